//! Kernel benchmarks (run: `cargo bench --bench kernels_bench`; Cargo.toml needs
//! `[[bench]] name = "kernels_bench" harness = false`).
//!
//! Weights are synthetic (random blocks with small finite scales) with the demo model's real
//! shapes and types (SmolLM2-135M Q4_1: 30 layers of Q4_1 q/k/v/o/gate/up/down, a Q8_0 tied
//! output head of 49152 x 576), one copy per layer so that a decode pass streams ~96 MB, more
//! than the L3 cache, as the real model does. Reported:
//! (a) weight bytes streamed per second, per tensor shape and for a whole decode pass, beside a
//!     STREAM-like read loop over a buffer of the same size, measured in the same run;
//! (b) one 4-row pass against four 1-row passes;
//! (c) 1 thread against 2 threads, and each instruction-set level;
//! (d) Q4_K and Q6_K: the integer kernels against the dequantize-and-f32 path they replaced,
//!     and their interleaved layout against the row-major one at the AVX2 level, in the same
//!     run (`KERNELS_BENCH_KQUANT=1` runs only this part);
//! (e) decode attention of one row over a whole step's caches (30 layers) against the STREAM-like
//!     read (`KERNELS_BENCH_ATTENTION=1` runs only this part);
//! (f) decode attention of a batched step, 1 to 4 sequences, with the caches out of the cores' own
//!     caches as in a forward pass (`KERNELS_BENCH_BATCH_ATTENTION=1` runs only this part).

use mtplx_lite::backend::cpu::Isa;
use mtplx_lite::backend::{
    stored_keys, stored_values, AttnSeq, Backend, CpuBackend, DType, Heads, KvBuf, KvFormat, Layout, Upload, WeightRef,
};
use std::time::Instant;

const LAYERS: usize = 30;
const HIDDEN: usize = 576;
const KV: usize = 192;
const FFN: usize = 1536;
const VOCAB: usize = 49152;

struct Mat {
    name: &'static str,
    dtype: DType,
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    layout: Layout,
}

impl Mat {
    fn w(&self) -> WeightRef<'_> {
        WeightRef { layout: self.layout, ..WeightRef::new(self.dtype, &self.bytes, self.rows, self.cols).unwrap() }
    }

    /// Into `be`'s preferred type and layout, as the model loader does.
    fn upload(&mut self, be: &CpuBackend) {
        if let Some(Upload { dtype, layout, bytes }) = be.upload(self.w()) {
            (self.dtype, self.layout, self.bytes) = (dtype, layout, bytes);
        }
    }
}

fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Random blocks whose f16 scale (and min) are small and finite.
fn synth(name: &'static str, dtype: DType, rows: usize, cols: usize, seed: &mut u64) -> Mat {
    let mut bytes = vec![0u8; dtype.bytes_for(rows * cols).unwrap()];
    for c in bytes.chunks_mut(8) {
        let r = rng(seed).to_le_bytes();
        c.copy_from_slice(&r[..c.len()]);
    }
    let scale = 0x1c00u16.to_le_bytes(); // f16 0.0039
    let offsets: &[usize] = match dtype {
        DType::Q4_1 | DType::Q4K => &[0, 2],
        DType::Q6K => &[208],
        DType::Q4_0 | DType::Q8_0 => &[0],
        _ => &[],
    };
    for blk in bytes.chunks_exact_mut(dtype.block_bytes()) {
        for &o in offsets {
            blk[o..o + 2].copy_from_slice(&scale);
        }
    }
    Mat { name, dtype, rows, cols, bytes, layout: Layout::Rows }
}

fn model(seed: &mut u64) -> (Vec<Vec<Mat>>, Mat) {
    let layers = (0..LAYERS)
        .map(|_| {
            vec![
                synth("attn_q 576x576 Q4_1", DType::Q4_1, HIDDEN, HIDDEN, seed),
                synth("attn_k 192x576 Q4_1", DType::Q4_1, KV, HIDDEN, seed),
                synth("attn_v 192x576 Q4_1", DType::Q4_1, KV, HIDDEN, seed),
                synth("attn_o 576x576 Q4_1", DType::Q4_1, HIDDEN, HIDDEN, seed),
                synth("ffn_gate 1536x576 Q4_1", DType::Q4_1, FFN, HIDDEN, seed),
                synth("ffn_up 1536x576 Q4_1", DType::Q4_1, FFN, HIDDEN, seed),
                synth("ffn_down 576x1536 Q4_1", DType::Q4_1, HIDDEN, FFN, seed),
            ]
        })
        .collect();
    (layers, synth("output 49152x576 Q8_0", DType::Q8_0, VOCAB, HIDDEN, seed))
}

/// Best of `reps` timings of `f`, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    if reps > 0 {
        f();
    }
    (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// STREAM-like read bandwidth over `buf` with `threads` threads (bytes per second).
fn stream_read(buf: &[u64], threads: usize) -> f64 {
    let secs = best(5, || {
        let part = buf.len().div_ceil(threads);
        std::thread::scope(|s| {
            let hs: Vec<_> = buf
                .chunks(part)
                .map(|c| {
                    s.spawn(move || {
                        let mut acc = [0u64; 8];
                        for ch in c.chunks_exact(8) {
                            for k in 0..8 {
                                acc[k] = acc[k].wrapping_add(ch[k]);
                            }
                        }
                        acc.iter().fold(0u64, |a, &b| a.wrapping_add(b))
                    })
                })
                .collect();
            let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).fold(0, u64::wrapping_add);
            std::hint::black_box(total);
        });
    });
    (buf.len() * 8) as f64 / secs
}

/// Seconds of one decode pass of `n` rows over every matrix (211 matmuls, in model order).
///
/// The machine this runs on may be shared, and a pass (milliseconds) is often preempted, so
/// each call is timed on its own and the pass time is the sum over calls of each call's best
/// time across `reps` passes: every call still streams its weights from memory as in a real
/// pass, but a preemption only spoils the one call it hits.
fn pass(be: &CpuBackend, layers: &[Vec<Mat>], out_head: &Mat, n: usize, x: &[f32], y: &mut [f32], reps: usize) -> f64 {
    let mats: Vec<&Mat> = layers.iter().flatten().chain(std::iter::once(out_head)).collect();
    let mut best = vec![f64::INFINITY; mats.len()];
    for _ in 0..reps + 1 {
        for (b, m) in best.iter_mut().zip(&mats) {
            let t = Instant::now();
            be.matmul(m.w(), &x[..n * m.cols], n, &mut y[..n * m.rows]);
            *b = b.min(t.elapsed().as_secs_f64());
        }
    }
    best.iter().sum()
}

/// `KERNELS_BENCH_COMPUTE=isa:n:calls[:rows|:q8]` runs only `calls` in-cache matmuls of one
/// ffn_gate-shaped Q4_1 matrix (`:q8`: a 1536x576 Q8_0 one) at that level and row count, in the
/// backend's repacked layout (`:rows`: the file's), for `perf stat` (whose CPU time ignores
/// preemption on a shared machine): per-call CPU time = task-clock / calls.
fn compute_only(spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    let isa = *Isa::available().iter().find(|i| i.name() == parts[0]).expect("an available ISA name");
    let (n, calls): (usize, usize) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
    let dtype = if parts.contains(&"q8") { DType::Q8_0 } else { DType::Q4_1 };
    let mut m = synth("ffn_gate", dtype, FFN, HIDDEN, &mut 12345);
    let be = CpuBackend::with_isa(1, isa);
    if !parts.contains(&"rows") {
        m.upload(&be);
    }
    let x: Vec<f32> = (0..n * HIDDEN).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
    let mut y = vec![0f32; n * FFN];
    for _ in 0..calls {
        be.matmul(m.w(), &x, n, &mut y);
    }
    println!("{} {:?} n={n}: {calls} calls, y[0] = {}", isa.name(), m.layout, y[0]);
}

/// (d): each K-quant matrix in cache, 1 thread, at the best level: per row count, the best
/// time of the integer path and of the dequantize-and-f32 path, taking turns so that a busy
/// machine slows both alike, and how far apart their results are.
fn kquant_vs_float() {
    let isa = Isa::detect();
    println!("\n== Q4_K / Q6_K in cache, 1 thread, {}: integer kernels vs dequantize + f32 ==", isa.name());
    let be = CpuBackend::with_isa(1, isa);
    let mut seed = 0x2545f4914f6cdd1du64;
    // The K-quants need columns in whole 256-value blocks: ffn_down's 1536 are, ffn_gate's 576
    // are not (such tensors stay Q5_0/Q8_0 in Q4_K_M files), so 768 stands in for them.
    let shapes = [
        ("ffn_down 576x1536 Q4_K", DType::Q4K, HIDDEN, FFN),
        ("1536x768 Q4_K", DType::Q4K, FFN, 768),
        ("ffn_down 576x1536 Q6_K", DType::Q6K, HIDDEN, FFN),
        ("1536x768 Q6_K", DType::Q6K, FFN, 768),
    ];
    for (name, dtype, rows, cols) in shapes {
        let m = synth(name, dtype, rows, cols, &mut seed);
        let x: Vec<f32> = (0..4 * cols).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
        for n in [1, 4] {
            let (x, mut yi, mut yf) = (&x[..n * cols], vec![0f32; n * rows], vec![0f32; n * rows]);
            let (mut ti, mut tf) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..10 {
                ti = ti.min(best(20, || be.matmul(m.w(), x, n, &mut yi)));
                tf = tf.min(best(20, || be.matmul_dequantized(m.w(), x, n, &mut yf)));
            }
            let scale = yf.iter().fold(0f32, |a, v| a.max(v.abs()));
            let diff = yi.iter().zip(&yf).fold(0f32, |a, (p, q)| a.max((p - q).abs()));
            println!(
                "  {name:<24} n={n}: integer {:>7.1} us, f32 {:>7.1} us: {:>5.2}x (results differ by {:.1e} of their max)",
                ti * 1e6,
                tf * 1e6,
                tf / ti,
                diff / scale
            );
            // The interleaved layout, which the backend makes at the AVX2 level only.
            let Some(avx2) = Isa::available().contains(&Isa::Avx2).then(|| CpuBackend::with_isa(1, Isa::Avx2)) else {
                continue;
            };
            let Some(Upload { dtype, layout, bytes }) = avx2.upload(m.w()) else { continue };
            let p = Mat { name, dtype, rows, cols, bytes, layout };
            let mut yp = vec![0f32; n * rows];
            let (mut tp, mut tr) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..10 {
                tp = tp.min(best(20, || avx2.matmul(p.w(), x, n, &mut yp)));
                tr = tr.min(best(20, || avx2.matmul(m.w(), x, n, &mut yi)));
            }
            println!(
                "  {:<24} n={n}: avx2 interleaved {:>7.1} us, row-major {:>7.1} us: {:>5.2}x, {:.2}x the f32 path (results {})",
                "",
                tp * 1e6,
                tr * 1e6,
                tr / tp,
                tf / tp,
                if yp == yi { "bit-equal" } else { "DIFFER" }
            );
        }
    }
}

/// Every layer's keys and values of `positions` positions of `kvd`, in `format`; `seed` makes
/// one sequence's differ from another's.
fn layer_caches(positions: usize, kvd: usize, format: KvFormat, seed: usize) -> Vec<(KvBuf, KvBuf)> {
    let rows =
        |s: usize| -> Vec<f32> { (0..positions * kvd).map(|i| (((i + s) * 31 % 97) as f32 - 48.0) / 97.0).collect() };
    (0..LAYERS)
        .map(|l| (stored_keys(&rows(seed + 2 * l), kvd, format), stored_values(&rows(seed + 2 * l + 1), kvd, format)))
        .collect()
}

/// Decode attention of one row over 30 layers' caches (separate keys and values), against the
/// STREAM-like read bandwidth `stream` (1 and 2 threads, bytes per second).
fn step_attention(x: &[f32], stream: [f64; 2]) {
    let heads = Heads { n_heads: 9, n_kv_heads: 3, head_dim: 64 };
    // A decode step reads every layer's cache once, more than the last-level cache holds at
    // long contexts: what attention costs there is a question of memory, as the weights' is.
    println!("\n== decode attention of a whole step (30 layers' caches), {} ==", Isa::detect().name());
    for ctx in [512, 2048, 4096] {
        // The cache in the format the backend reads (16-bit keys and values either way).
        let format = CpuBackend::with_isa(1, Isa::detect()).kv_format(heads.head_dim);
        let caches = layer_caches(ctx, heads.kv_dim(), format, 0);
        let bytes = (2 * LAYERS * ctx * heads.kv_dim() * std::mem::size_of::<u16>()) as f64;
        let q = &x[..heads.q_dim()];
        let mut o = vec![0f32; heads.q_dim()];
        for threads in [1, 2] {
            let be = CpuBackend::with_isa(threads, Isa::detect());
            let secs = best(20, || {
                for (k, v) in &caches {
                    let seq = AttnSeq {
                        q,
                        keys: k,
                        values: v,
                        format,
                        start_pos: ctx - 1,
                        n_q: 1,
                        out: &mut o,
                        window: None,
                    };
                    be.attention(seq, heads, 0.125);
                }
            });
            print!(
                "  ctx {ctx:>5}, {threads} thread(s): {:>6.2} ms ({:>4.1} GB/s, {:>3.0}% of STREAM)",
                secs * 1e3,
                bytes / secs / 1e9,
                100.0 * bytes / secs / stream[threads - 1]
            );
        }
        println!();
    }
}

/// Decode attention of a batched step: 1 sequence of 1 row, 1 of 4 rows (verification) and 2 to 4
/// sequences of 1 row (continuous batching), each over its own 30 layers' caches, as a forward
/// pass runs it: before each layer's call the threads read a layer's worth of weights (3.2 MB,
/// untimed), which leaves the caches in the shared cache or memory, not in the cores' own.
fn batch_attention(x: &[f32], evict: &[u64]) {
    let heads = Heads { n_heads: 9, n_kv_heads: 3, head_dim: 64 };
    let (kvd, qd) = (heads.kv_dim(), heads.q_dim());
    let format = CpuBackend::with_isa(1, Isa::detect()).kv_format(heads.head_dim);
    println!("\n== decode attention of a batched step (30 layers), {}, 2 threads ==", Isa::detect().name());
    let be = CpuBackend::with_isa(2, Isa::detect());
    let layer_bytes = evict.len() / LAYERS;
    for ctx in [16, 100, 200, 512] {
        // Room for the 4 rows of the verification shape.
        let seqs: Vec<Vec<(KvBuf, KvBuf)>> = (0..4).map(|s| layer_caches(ctx + 4, kvd, format, 1000 * s)).collect();
        print!("  ctx {ctx:>4}:");
        for (label, n_seqs, rows) in
            [("1 seq x 1", 1, 1), ("1 seq x 4", 1, 4), ("2 seqs x 1", 2, 1), ("3 seqs x 1", 3, 1), ("4 seqs x 1", 4, 1)]
        {
            let q = &x[..rows * qd];
            let mut outs = vec![vec![0f32; rows * qd]; n_seqs];
            let mut secs = f64::INFINITY;
            for _ in 0..20 {
                let mut t = 0.0;
                for l in 0..LAYERS {
                    let chunk = &evict[l * layer_bytes..][..layer_bytes];
                    std::hint::black_box(chunk.iter().step_by(8).fold(0u64, |a, &b| a.wrapping_add(b)));
                    let start = Instant::now();
                    let mut batch: Vec<AttnSeq<'_>> = outs
                        .iter_mut()
                        .zip(&seqs)
                        .map(|(o, c)| AttnSeq {
                            q,
                            keys: &c[l].0,
                            values: &c[l].1,
                            format,
                            start_pos: ctx,
                            n_q: rows,
                            out: o,
                            window: None,
                        })
                        .collect();
                    be.attention_batch(&mut batch, heads, 0.125);
                    t += start.elapsed().as_secs_f64();
                }
                secs = secs.min(t);
            }
            let bytes = (2 * LAYERS * n_seqs * (ctx + rows) * kvd * 2) as f64;
            print!("  {label}: {:>5.3} ms ({:>4.1} GB/s)", secs * 1e3, bytes / secs / 1e9);
        }
        println!();
    }
}

fn main() {
    if std::env::var("KERNELS_BENCH_BATCH_ATTENTION").is_ok() {
        let buf: Vec<u64> = (0..96_000_000 / 8).map(|i| i as u64).collect();
        let x: Vec<f32> = (0..4 * 576).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
        return batch_attention(&x, &buf);
    }
    if let Ok(spec) = std::env::var("KERNELS_BENCH_COMPUTE") {
        return compute_only(&spec);
    }
    if std::env::var("KERNELS_BENCH_KQUANT").is_ok() {
        return kquant_vs_float();
    }
    if std::env::var("KERNELS_BENCH_ATTENTION").is_ok() {
        let buf: Vec<u64> = (0..96_000_000 / 8).map(|i| i as u64).collect();
        let x: Vec<f32> = (0..576).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
        return step_attention(&x, [stream_read(&buf, 1), stream_read(&buf, 2)]);
    }
    let mut seed = 0x9e3779b97f4a7c15u64;
    let (mut layers, mut head) = model(&mut seed);
    // The backend's repacked layout, as the model loader makes it, unless
    // KERNELS_BENCH_LAYOUT=rows asks for the file's.
    let rows_only = std::env::var("KERNELS_BENCH_LAYOUT").is_ok_and(|v| v == "rows");
    if !rows_only {
        let be = CpuBackend::with_isa(1, Isa::detect());
        layers.iter_mut().flatten().chain(std::iter::once(&mut head)).for_each(|m| m.upload(&be));
    }
    let layout = head.layout;
    let total_bytes: usize = layers.iter().flatten().map(|m| m.bytes.len()).sum::<usize>() + head.bytes.len();
    let x: Vec<f32> = (0..8 * FFN).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
    let mut y = vec![0f32; 8 * VOCAB];
    let isas = Isa::available();
    let best_isa = Isa::detect();
    println!(
        "kernels_bench: {} MB of weights per decode pass; ISAs {:?}; layout {layout:?}",
        total_bytes / 1_000_000,
        isas
    );

    let stream_buf: Vec<u64> = (0..total_bytes / 8).map(|i| i as u64).collect();
    let s1 = stream_read(&stream_buf, 1);
    let s2 = stream_read(&stream_buf, 2);
    println!(
        "STREAM-like read of {} MB: 1 thread {:.1} GB/s, 2 threads {:.1} GB/s",
        total_bytes / 1_000_000,
        s1 / 1e9,
        s2 / 1e9
    );
    drop(stream_buf);

    {
        // Is the second thread really there? Chunks of ~20 us each, counted per thread.
        let be = CpuBackend::with_isa(2, best_isa);
        let caller = std::thread::current().id();
        let by_worker = std::sync::atomic::AtomicUsize::new(0);
        let t = Instant::now();
        be.pool().run(1000, &|_| {
            let s = Instant::now();
            while s.elapsed().as_micros() < 20 {
                std::hint::spin_loop();
            }
            if std::thread::current().id() != caller {
                by_worker.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        println!(
            "pool check: 1000 chunks of 20 us on 2 threads took {:.1} ms (10 ms when both cores are free; 20 ms means the machine is busy and 2-thread numbers below are not meaningful); the worker ran {}",
            t.elapsed().as_secs_f64() * 1e3,
            by_worker.into_inner()
        );
        let t = Instant::now();
        for _ in 0..10000 {
            be.pool().run(2, &|_| {});
        }
        println!("pool dispatch: {:.2} us per empty 2-chunk job", t.elapsed().as_secs_f64() * 1e6 / 10000.0);
    }

    for threads in [1, 2] {
        let be = CpuBackend::with_isa(threads, best_isa);
        let stream = if threads == 1 { s1 } else { s2 };
        println!("\n== {threads} thread(s), {} ==", best_isa.name());
        // (a) per shape: every layer's copy in turn, so each call streams from memory.
        for k in 0..layers[0].len() {
            let bytes: usize = layers.iter().map(|l| l[k].bytes.len()).sum();
            // Per call best over 10 rounds through the 30 copies (see `pass` on why).
            let mut per = vec![f64::INFINITY; LAYERS];
            for _ in 0..11 {
                for (b, l) in per.iter_mut().zip(&layers) {
                    let m = &l[k];
                    *b = b.min(best(0, || be.matmul(m.w(), &x[..m.cols], 1, &mut y[..m.rows])));
                }
            }
            let secs: f64 = per.iter().sum();
            let per_call_us = secs / LAYERS as f64 * 1e6;
            println!(
                "  {:<24} {:>6.1} GB/s ({:>4.0}% of STREAM), {:>6.1} us/call",
                layers[0][k].name,
                bytes as f64 / secs / 1e9,
                bytes as f64 / secs / stream * 100.0,
                per_call_us
            );
        }
        let secs = best(5, || be.matmul(head.w(), &x[..HIDDEN], 1, &mut y[..VOCAB]));
        println!(
            "  {:<24} {:>6.1} GB/s ({:>4.0}% of STREAM), {:>6.1} us/call",
            head.name,
            head.bytes.len() as f64 / secs / 1e9,
            head.bytes.len() as f64 / secs / stream * 100.0,
            secs * 1e6
        );
        let one = pass(&be, &layers, &head, 1, &x, &mut y, 10);
        println!(
            "  decode pass (211 matvecs): {:.2} ms = {:.1} GB/s ({:.0}% of STREAM), matmul-only bound {:.0} tok/s",
            one * 1e3,
            total_bytes as f64 / one / 1e9,
            total_bytes as f64 / one / stream * 100.0,
            1.0 / one
        );
        // (b) batched rows: a k-row pass against a 1-row pass (what `bench --rows` reports for
        // the whole model, here for the matmuls alone).
        for k in [2, 4, 5, 8] {
            let t = pass(&be, &layers, &head, k, &x, &mut y, 10);
            println!("  {k}-row pass {:.2} ms: {:.2}x the 1-row pass", t * 1e3, t / one);
        }
    }

    println!("\n== compute throughput in cache (one ffn_gate matrix, 1.3 MB, repeated), 1 thread ==");
    // The repacked layout has kernels at one level only (the others run its slow reference).
    let levels: Vec<Isa> = isas.iter().copied().filter(|&i| layout == Layout::Rows || i == best_isa).collect();
    for &isa in &levels {
        let be = CpuBackend::with_isa(1, isa);
        let m = &layers[0][4];
        for n in [1, 4, 8] {
            let reps = if isa == Isa::Scalar { 5 } else { 100 };
            let secs = best(reps, || be.matmul(m.w(), &x[..n * m.cols], n, &mut y[..n * m.rows]));
            println!(
                "  {:<7} n={n}: {:>7.1} us/call, {:>6.1} GB/s of weights",
                isa.name(),
                secs * 1e6,
                m.bytes.len() as f64 / secs / 1e9
            );
        }
    }

    println!("\n== decode attention (9 heads / 3 KV heads of 64), one layer, {} ==", best_isa.name());
    let heads = Heads { n_heads: 9, n_kv_heads: 3, head_dim: 64 };
    for ctx in [128, 512, 2048] {
        let kv: Vec<f32> = (0..ctx * heads.kv_dim()).map(|i| ((i * 31 % 97) as f32 - 48.0) / 97.0).collect();
        let format = CpuBackend::with_isa(1, best_isa).kv_format(heads.head_dim);
        let keys = stored_keys(&kv, heads.kv_dim(), format);
        let kv = stored_values(&kv, heads.kv_dim(), format);
        let q = &x[..heads.q_dim()];
        let mut o = vec![0f32; heads.q_dim()];
        for threads in [1, 2] {
            let be = CpuBackend::with_isa(threads, best_isa);
            let secs = best(200, || {
                let seq = AttnSeq {
                    q,
                    keys: &keys,
                    values: &kv,
                    format,
                    start_pos: ctx - 1,
                    n_q: 1,
                    out: &mut o,
                    window: None,
                };
                be.attention(seq, heads, 0.125)
            });
            print!("  ctx {ctx:>5}, {threads} thread(s): {:>6.1} us", secs * 1e6);
        }
        println!();
    }

    step_attention(&x, [s1, s2]);
    let evict: Vec<u64> = (0..96_000_000 / 8).map(|i| i as u64).collect();
    batch_attention(&x, &evict);
    drop(evict);

    println!("\n== instruction sets, decode pass, 2 threads ==");
    for &isa in &levels {
        let be = CpuBackend::with_isa(2, isa);
        let reps = if isa == Isa::Scalar { 2 } else { 10 };
        let one = pass(&be, &layers, &head, 1, &x, &mut y, reps);
        let four = pass(&be, &layers, &head, 4, &x, &mut y, reps);
        println!(
            "  {:<7} 1-row {:>7.2} ms ({:>5.1} GB/s)   4-row {:>7.2} ms",
            isa.name(),
            one * 1e3,
            total_bytes as f64 / one / 1e9,
            four * 1e3
        );
    }

    kquant_vs_float();
}
