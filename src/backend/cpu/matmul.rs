//! The matmul driver: instruction-set dispatch, activation quantization, and the split of the
//! weight rows across the worker pool.
//!
//! The functions taking an [`Isa`] are crate-private: calling a SIMD level the CPU lacks is
//! undefined behaviour, and `CpuBackend` (which checks the level once) is the public way in.
//!
//! Loop order: each thread takes a contiguous range of weight rows; for each chunk of activation
//! rows (sized to stay in cache), each weight row is read once and dotted with the chunk's
//! activation rows in tiles of four. So with `n` rows up to `ACT_CHUNK` the weights stream from
//! memory once per call, which is what makes a 4-row pass cheaper than four 1-row passes.

use super::isa::Isa;
use super::kern_scalar;
use super::kernel_io::OutRows;
use super::pool::{self, Pool};
use super::quantized_activations::QuantRows;
use super::repack;
use super::type_traits::{dequantize_row, type_traits, IntDot};
use crate::backend::{DType, Layout, WeightRef};
use std::cell::RefCell;
use std::ops::Range;

/// Activation rows processed against a weight row before moving to the next weight row: 64 rows
/// of a 1536-wide int8 activation are 96 KiB, about an L2 share.
const ACT_CHUNK: usize = 64;
/// Below this many multiply-adds a matmul runs on the calling thread alone: waking the pool
/// costs more than it saves.
const PARALLEL_MIN_MACS: usize = 32 * 1024;

/// Fewest weight rows a thread claims at a time: below this the claim costs more than the rows.
const MIN_ROWS_PER_CHUNK: usize = 16;
/// Pieces per thread a parallel matmul is cut into: enough to rebalance when a thread starts
/// late (the machine may be shared), few enough that claiming stays cheap.
const CHUNKS_PER_THREAD: usize = 4;

thread_local! {
    /// Per-thread buffer for one dequantized weight row (float and K-quant paths).
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[i * w.rows + r] = dot(row r of w, row i of x)` for `i < n`, `r < w.rows`.
///
/// # Panics
/// When `x` is not `n * w.cols` values or `out` not `n * w.rows`.
pub(crate) fn matmul(
    pool: &Pool,
    isa: Isa,
    w: WeightRef<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    xq: &mut QuantRows,
) {
    matmul_many(pool, isa, &[w], x, n, &mut [out], xq)
}

/// [`matmul`] of several matrices with the same `cols` on the same `x` (Q/K/V, gate/up): one
/// activation quantization and one pool dispatch for all of them.
///
/// # Panics
/// When the matrices differ in `cols`, `ws` and `outs` in length, or a slice in its shape.
pub(crate) fn matmul_many(
    pool: &Pool,
    isa: Isa,
    ws: &[WeightRef<'_>],
    x: &[f32],
    n: usize,
    outs: &mut [&mut [f32]],
    xq: &mut QuantRows,
) {
    assert_eq!(ws.len(), outs.len(), "matmul: {} matrices but {} outputs", ws.len(), outs.len());
    let Some(cols) = ws.first().map(|w| w.cols) else {
        return;
    };
    for (w, out) in ws.iter().zip(outs.iter()) {
        assert_eq!(w.cols, cols, "matmul: fused matrices differ in columns ({} vs {cols})", w.cols);
        assert_eq!(x.len(), n * w.cols, "matmul: x has {} values, want {n} x {}", x.len(), w.cols);
        assert_eq!(out.len(), n * w.rows, "matmul: out has {} values, want {n} x {}", out.len(), w.rows);
        assert_eq!(w.bytes.len(), w.rows * w.row_bytes(), "matmul: weight bytes do not match its shape");
        assert!(
            w.layout == Layout::Rows || w.rows.is_multiple_of(repack::ROWS),
            "matmul: an interleaved matrix of {} rows is not whole groups",
            w.rows
        );
    }
    if n == 0 {
        return;
    }
    if ws.iter().any(|w| type_traits(w.dtype).int_dot.is_some()) {
        xq.quantize(isa, x, n, cols);
    }
    let outps: Vec<OutRows<'_>> = outs.iter_mut().map(|o| OutRows::new(o, n)).collect();
    let xq = &*xq;
    let work = |m: usize, rows: Range<usize>| {
        let w = ws[m];
        for a in (0..n).step_by(ACT_CHUNK) {
            let acts = a..(a + ACT_CHUNK).min(n);
            match (type_traits(w.dtype).int_dot, w.layout) {
                (Some(k), Layout::Rows8) => matmul_r8(isa, k, w, rows.clone(), xq, acts, &outps[m]),
                (Some(k), Layout::Rows) => matmul_q(isa, k, w, rows.clone(), xq, acts, &outps[m]),
                (None, Layout::Rows) => matmul_float(isa, w, rows.clone(), x, acts, &outps[m]),
                (None, Layout::Rows8) => panic!("{}: no interleaved layout for this type", w.dtype),
            }
        }
    };
    let total_rows: usize = ws.iter().map(|w| w.rows).sum();
    if n * total_rows * cols < PARALLEL_MIN_MACS || pool.threads() == 1 {
        (0..ws.len()).for_each(|m| work(m, 0..ws[m].rows));
        return;
    }
    // Cut each matrix into pieces of at least MIN_ROWS_PER_CHUNK rows, about
    // CHUNKS_PER_THREAD per thread over all of them, for the workers to claim.
    let target = CHUNKS_PER_THREAD * pool.threads();
    let mut tasks: Vec<(usize, Range<usize>)> = Vec::with_capacity(target + ws.len());
    for (m, w) in ws.iter().enumerate() {
        // An interleaved matrix is cut between its groups of rows only.
        let unit = if w.layout == Layout::Rows8 { repack::ROWS } else { 1 };
        let units = w.rows / unit;
        let pieces = (w.rows * target).div_ceil(total_rows).min(w.rows / MIN_ROWS_PER_CHUNK).clamp(1, units);
        tasks.extend((0..pieces).map(|p| {
            let c = pool::chunk(units, p, pieces);
            (m, c.start * unit..c.end * unit)
        }));
    }
    pool.run(tasks.len(), &|t| work(tasks[t].0, tasks[t].1.clone()));
}

fn matmul_q(
    isa: Isa,
    int_dot: IntDot,
    w: WeightRef<'_>,
    rows: Range<usize>,
    x: &QuantRows,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    let rb = w.row_bytes();
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only produced after detecting AVX-512 F/BW/VL/VNNI, AVX2,
        // FMA and F16C; rows, acts and out were checked against the shapes by `matmul`.
        Isa::Avx512 => unsafe { super::kern_avx512::matmul_q(int_dot.kind, w.bytes, rb, rows, x, acts, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only produced after detecting AVX2, FMA and F16C; shapes as above.
        Isa::Avx2 => unsafe { super::kern_avx2::matmul_q(int_dot.kind, w.bytes, rb, rows, x, acts, out) },
        _ => {
            let dot = int_dot.scalar;
            for r in rows {
                let wr = w.row(r);
                for i in acts.clone() {
                    // SAFETY: this worker owns weight rows `rows`, hence entries (i, r).
                    unsafe { out.write(i, r, dot(wr, x, i)) };
                }
            }
        }
    }
}

/// An interleaved Q4_0/Q4_1/Q8_0 matrix ([`Layout::Rows8`]): `rows` are whole groups.
fn matmul_r8(
    isa: Isa,
    int_dot: IntDot,
    w: WeightRef<'_>,
    rows: Range<usize>,
    x: &QuantRows,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only produced after detecting AVX2, FMA and F16C; `w` is an
        // interleaved matrix (its layout says so) whose shape `matmul` checked, and the tasks
        // cut it between groups.
        Isa::Avx2 => unsafe { super::kern_avx2_r8::matmul_r8(int_dot.kind, w.bytes, rows, x, acts, out) },
        // The other levels have no kernels for the layout (the backend does not repack for
        // them): the portable reference keeps such a matrix correct there.
        _ => {
            let dot = repack::dot_group_of(int_dot.kind);
            let group_bytes = w.row_bytes() * repack::ROWS;
            for g in rows.start / repack::ROWS..rows.end.div_ceil(repack::ROWS) {
                let grp = &w.bytes[g * group_bytes..(g + 1) * group_bytes];
                for i in acts.clone() {
                    for (r, v) in dot(grp, x, i).into_iter().enumerate() {
                        // SAFETY: this worker owns weight rows `rows` (whole groups), hence
                        // entries (i, g * ROWS + r).
                        unsafe { out.write(i, g * repack::ROWS + r, v) };
                    }
                }
            }
        }
    }
}

/// Float weights and the K-quants: dequantize a weight row once, dot it with every activation
/// row of the chunk.
fn matmul_float(isa: Isa, w: WeightRef<'_>, rows: Range<usize>, x: &[f32], acts: Range<usize>, out: &OutRows<'_>) {
    let cols = w.cols;
    ROW.with_borrow_mut(|buf| {
        buf.resize(cols, 0.0);
        for r in rows {
            let wr = w.row(r);
            match (isa, w.dtype) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX2/F16C were detected for both x86 SIMD levels; `wr` is `cols` f16s.
                (Isa::Avx2 | Isa::Avx512, DType::F16) => unsafe { super::kern_avx2_f32::f16_row(wr, buf) },
                _ => dequantize_row(w.dtype, wr, buf),
            }
            for i in acts.clone() {
                let v = dot_f32(isa, buf, &x[i * cols..(i + 1) * cols]);
                // SAFETY: this worker owns weight rows `rows`, hence entries (i, r).
                unsafe { out.write(i, r, v) };
            }
        }
    });
}

/// f32 dot product on the best available instruction set.
pub(crate) fn dot_f32(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected for both x86 SIMD levels; lengths are equal.
        Isa::Avx2 | Isa::Avx512 => unsafe { super::kern_avx2_f32::dot_f32(a, b) },
        _ => kern_scalar::dot_f32(a, b),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::{isas_under_test, noise, weight};
    use super::super::type_traits::quantize_row;
    use super::*;

    /// The plain f32 product of the dequantized weight and `x`, in f64.
    fn reference(w: WeightRef<'_>, x: &[f32], n: usize) -> Vec<f32> {
        let mut row = vec![0f32; w.cols];
        let mut out = vec![0f32; n * w.rows];
        for r in 0..w.rows {
            dequantize_row(w.dtype, w.row(r), &mut row);
            for i in 0..n {
                let s: f64 = row.iter().zip(&x[i * w.cols..]).map(|(&a, &b)| a as f64 * b as f64).sum();
                out[i * w.rows + r] = s as f32;
            }
        }
        out
    }

    const ALL: [DType; 9] = DType::ALL;

    fn run(pool: &Pool, isa: Isa, w: WeightRef<'_>, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; n * w.rows];
        matmul(pool, isa, w, x, n, &mut out, &mut QuantRows::new());
        out
    }

    fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * scale, "{what}: entry {k}: {x} vs {y} (scale {scale})");
        }
    }

    #[test]
    fn every_isa_matches_the_scalar_path_for_every_type() {
        let pool = Pool::new(2);
        // The AVX-512 kernel takes blocks of 32 four at a time: 288, 320 and 352 columns leave
        // 1, 2 and 3 blocks over, 512 none (and is two K super-blocks).
        let shapes = [(288, &ALL[..6]), (320, &ALL[..6]), (352, &ALL[..6]), (512, &ALL[..])];
        for (cols, types) in shapes {
            for &dtype in types {
                let rows = 37;
                let wb = weight(dtype, rows, cols, 7);
                let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
                for n in [1, 3, 4, 6] {
                    let x = noise(n * cols, 99 + n as u64);
                    let want = run(&pool, Isa::Scalar, w, &x, n);
                    for isa in isas_under_test() {
                        let got = run(&pool, isa, w, &x, n);
                        assert_close(&got, &want, 1e-5, &format!("{dtype} {} n={n} cols={cols}", isa.name()));
                    }
                }
            }
        }
    }

    #[test]
    fn results_agree_with_the_dequantized_f32_product() {
        // The integer paths quantize activations to 8 bits: agreement within that error.
        let pool = Pool::new(1);
        let (rows, cols, n) = (19, 512, 2);
        for dtype in ALL {
            let wb = weight(dtype, rows, cols, 3);
            let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
            let x = noise(n * cols, 5);
            let want = reference(w, &x, n);
            let tol = if matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0) { 2e-2 } else { 1e-5 };
            for isa in isas_under_test() {
                assert_close(&run(&pool, isa, w, &x, n), &want, tol, &format!("{dtype} {}", isa.name()));
            }
        }
    }

    #[test]
    fn batched_rows_equal_one_row_at_a_time_and_threads_do_not_change_results() {
        let (p1, p2) = (Pool::new(1), Pool::new(2));
        let (rows, cols) = (301, 576);
        for dtype in [DType::Q4_1, DType::Q8_0, DType::F32] {
            let wb = weight(dtype, rows, cols, 11);
            let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
            let n = ACT_CHUNK + 5; // crosses an activation chunk and leaves a partial tile
            let x = noise(n * cols, 12);
            for isa in isas_under_test() {
                let batched = run(&p2, isa, w, &x, n);
                assert_eq!(batched, run(&p1, isa, w, &x, n), "{dtype} {}: 1 vs 2 threads", isa.name());
                for i in [0, 3, n - 1] {
                    let single = run(&p1, isa, w, &x[i * cols..(i + 1) * cols], 1);
                    assert_eq!(&batched[i * rows..(i + 1) * rows], &single[..], "{dtype} {} row {i}", isa.name());
                }
            }
        }
    }

    #[test]
    fn fused_matrices_equal_separate_calls() {
        let pool = Pool::new(2);
        let cols = 768;
        let shapes = [(DType::Q4_1, 576), (DType::Q8_0, 192), (DType::F16, 64), (DType::Q4K, 200)];
        let bytes: Vec<Vec<u8>> = shapes.iter().map(|&(t, r)| weight(t, r, cols, r as u64)).collect();
        let ws: Vec<WeightRef<'_>> =
            shapes.iter().zip(&bytes).map(|(&(t, r), b)| WeightRef::new(t, b, r, cols).unwrap()).collect();
        for n in [1, 5] {
            let x = noise(n * cols, 8);
            for isa in isas_under_test() {
                let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![f32::NAN; n * w.rows]).collect();
                let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                matmul_many(&pool, isa, &ws, &x, n, &mut refs, &mut QuantRows::new());
                for (w, o) in ws.iter().zip(&outs) {
                    assert_eq!(o, &run(&pool, isa, *w, &x, n), "{} {} n={n}", w.dtype, isa.name());
                }
            }
        }
    }

    #[test]
    fn an_extreme_q8_weight_of_minus_128_is_handled() {
        // ggml never writes -128, but a file may: the sign trick must not overflow.
        let cols = 64;
        let mut wb = quantize_row(DType::Q8_0, &noise(cols, 1)).unwrap();
        wb[2] = 0x80;
        wb[36] = 0x80;
        let w = WeightRef::new(DType::Q8_0, &wb, 1, cols).unwrap();
        let x = noise(cols, 2);
        let want = reference(w, &x, 1);
        for isa in isas_under_test() {
            assert_close(&run(&Pool::new(1), isa, w, &x, 1), &want, 2e-2, isa.name());
        }
    }

    /// `w` interleaved, as the backend repacks it at load time.
    fn packed(w: WeightRef<'_>) -> Vec<u8> {
        repack::repack(w.dtype, w.bytes, w.rows, w.cols).expect("whole groups of an int-dot type")
    }

    #[test]
    fn interleaved_weights_give_the_row_major_results_and_batches_do_not_change_a_row() {
        let (p1, p2) = (Pool::new(1), Pool::new(2));
        let (rows, cols) = (136, 576);
        for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
            let wb = weight(dtype, rows, cols, 31);
            let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
            let pb = packed(w);
            let wp = WeightRef { bytes: &pb, layout: Layout::Rows8, ..w };
            for n in [1, 2, 5, ACT_CHUNK + 3] {
                let x = noise(n * cols, 40 + n as u64);
                for isa in isas_under_test() {
                    let want = run(&p2, isa, w, &x, n);
                    let got = run(&p2, isa, wp, &x, n);
                    let what = format!("{dtype} {} n={n}", isa.name());
                    if isa == Isa::Scalar {
                        // The portable path runs each row's very operations: bit-equal.
                        assert_eq!(got, want, "{what}");
                    } else {
                        // Another order of the float operations than the row-major kernel's:
                        // AVX2's interleaved kernel, or at AVX-512 (where the backend does not
                        // repack) the portable fallback against the AVX-512 row-major kernel.
                        assert_close(&got, &want, 1e-5, &what);
                    }
                    assert_eq!(got, run(&p1, isa, wp, &x, n), "{what}: 1 vs 2 threads");
                    for i in [0, n / 2, n - 1] {
                        let single = run(&p1, isa, wp, &x[i * cols..(i + 1) * cols], 1);
                        assert_eq!(&got[i * rows..(i + 1) * rows], &single[..], "{what}: row {i} alone");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "not whole groups")]
    fn an_interleaved_matrix_must_be_whole_groups() {
        let wb = weight(DType::Q4_1, 12, 32, 1);
        let w = WeightRef { layout: Layout::Rows8, ..WeightRef::new(DType::Q4_1, &wb, 12, 32).unwrap() };
        run(&Pool::new(1), Isa::Scalar, w, &[0.0; 32], 1);
    }

    #[test]
    #[should_panic(expected = "matmul: x has")]
    fn mismatched_activations_are_refused() {
        let wb = weight(DType::Q4_0, 2, 32, 1);
        let w = WeightRef::new(DType::Q4_0, &wb, 2, 32).unwrap();
        run(&Pool::new(1), Isa::Scalar, w, &[0.0; 31], 1);
    }
}
