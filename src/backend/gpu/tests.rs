//! Each device kernel against the CPU on the same inputs, through the same [`Pass`] ops, on
//! whatever adapter `--backend gpu` finds (lavapipe in CI): matrices of every type the device
//! reads with both matrix kernels, GeGLU, and attention within a sliding window over a cache
//! filled in two passes. Tolerances are float rounding: the device adds in another order.

use super::adapter::{pick, BackendChoice};
use super::context::Kernel;
use super::weights::DeviceWeight;
use super::GpuBackend;
use crate::backend::cpu::{dequantize_row, quantize_row, CpuBackend};
use crate::backend::{
    Act, AttendSeq, Backend, DType, DeviceKv, Glu, Heads, KvBuf, KvFormat, PassShape, Vector, WeightRef,
};

fn gpu(kernel: Kernel) -> GpuBackend {
    let (adapter, reason) =
        pick(BackendChoice::Gpu).expect("a Vulkan adapter (lavapipe: mesa-vulkan-drivers)").expect("gpu");
    let mut be = GpuBackend::new(&adapter, reason, 1).expect("a device");
    be.gpu.matmul = kernel;
    be
}

/// Deterministic values in about [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect()
}

fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: value {i} is {g}, the CPU's {w}");
    }
}

/// A `rows x cols` matrix of `dtype`: quantized from noise, or random K-quant blocks.
fn matrix(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    crate::backend::cpu::test_inputs::weight(dtype, rows, cols, seed)
}

/// The head (norm, then `w`) of `n` rows of `x` on the device against the CPU's dequantized
/// product. The CPU has no K-quant quantizer: those blocks are random bytes, every pattern a
/// valid block.
fn head_matches_the_cpu(be: &GpuBackend, dtype: DType, rows: usize, cols: usize, what: &str) {
    let n = 3;
    let x = values(n * cols, 7);
    let cpu = CpuBackend::new(1);
    let ones = Vector::new(vec![1.0; cols], be);
    let bytes = matrix(dtype, rows, cols, 100 + rows as u64);
    let mut w = WeightRef::new(dtype, &bytes, rows, cols).unwrap();
    let handle = be.upload_device(w);
    w.device = handle.as_ref();
    // The head norms first: with unit weights, the CPU norms the same rows.
    let mut normed = x.clone();
    cpu.rms_norm(&mut normed, &ones.values, 1e-6);
    let mut want = vec![0.0; n * rows];
    cpu.matmul_dequantized(w, &normed, n, &mut want);
    let shape = PassShape { rows: n, hidden: cols, q_dim: cols, kv_dim: cols, ffn: cols };
    let mut p = be.begin(shape, &[0, 1, 2]);
    p.load_x(&x);
    let got = p.head(&[0, 1, 2], ones.as_ref(), 1e-6, w).expect("the device ran");
    close(&got, &want, 1e-4, what);
}

#[test]
fn every_weight_type_multiplies_as_the_cpu_dequantized_does_with_every_kernel() {
    for kernel in [Kernel::MatmulRows, Kernel::Matmul, Kernel::MatmulSub] {
        let be = gpu(kernel);
        for dtype in DType::ALL {
            // Two 256-value blocks a row for the K-quants, three 32-value blocks otherwise.
            let cols = if dtype.block_len() == 256 { 512 } else { 96 };
            head_matches_the_cpu(&be, dtype, 70, cols, &format!("{} with {kernel:?}", dtype.name()));
        }
    }
}

#[test]
fn a_matrix_over_the_largest_binding_is_split_by_rows_and_reads_as_one() {
    let mut be = gpu(Kernel::MatmulRows);
    // Room for 16 rows of Q6_K (2 blocks of 212 bytes) a binding: 70 rows make 5 parts, the
    // last of 6 rows.
    be.max_binding = 16 * 2 * 212 + 100;
    let bytes = matrix(DType::Q6K, 70, 512, 3);
    let w = WeightRef::new(DType::Q6K, &bytes, 70, 512).unwrap();
    let handle = be.upload_device(w).unwrap();
    let dw = handle.downcast_ref::<DeviceWeight>().unwrap();
    let parts: Vec<(usize, usize)> = dw.parts.iter().map(|p| (p.row0, p.rows)).collect();
    assert_eq!(parts, [(0, 16), (16, 16), (32, 16), (48, 16), (64, 6)]);
    head_matches_the_cpu(&be, DType::Q6K, 70, 512, "Q6_K in 5 parts");
    // The embedding: tokens from every part, one twice.
    let mut w = WeightRef::new(DType::Q6K, &bytes, 70, 512).unwrap();
    w.device = Some(&handle);
    let tokens = [69u32, 0, 17, 47, 69, 31];
    let mut want = vec![0.0; tokens.len() * 512];
    for (row, &t) in want.chunks_exact_mut(512).zip(&tokens) {
        dequantize_row(DType::Q6K, w.row(t as usize), row);
    }
    let shape = PassShape { rows: tokens.len(), hidden: 512, q_dim: 512, kv_dim: 512, ffn: 512 };
    let positions: Vec<usize> = (0..tokens.len()).collect();
    let mut p = be.begin(shape, &positions);
    p.embed(w, &tokens, None);
    close(&p.read_x(0, tokens.len()).unwrap(), &want, 0.0, "embedding from parts");
    drop(p);
    // One row over the binding is refused by name.
    be.max_binding = 400;
    let err = be.can_hold(w).unwrap_err();
    assert!(err.contains("424 bytes") && err.contains("(400 bytes)"), "{err}");
}

#[test]
fn the_embedding_rows_are_the_dequantized_rows_of_the_tokens() {
    let be = gpu(Kernel::MatmulRows);
    let (rows, cols) = (10, 64);
    let bytes: Vec<u8> = (0..rows).flat_map(|r| quantize_row(DType::Q8_0, &values(cols, r as u32)).unwrap()).collect();
    let mut w = WeightRef::new(DType::Q8_0, &bytes, rows, cols).unwrap();
    let handle = be.upload_device(w);
    w.device = handle.as_ref();
    let tokens = [3u32, 9, 3];
    let mut want = vec![0.0; tokens.len() * cols];
    for (row, &t) in want.chunks_exact_mut(cols).zip(&tokens) {
        dequantize_row(DType::Q8_0, w.row(t as usize), row);
        row.iter_mut().for_each(|v| *v *= 2.5);
    }
    let shape = PassShape { rows: 3, hidden: cols, q_dim: cols, kv_dim: cols, ffn: cols };
    let mut p = be.begin(shape, &[0, 1, 2]);
    p.embed(w, &tokens, Some(2.5));
    close(&p.read_x(0, 3).unwrap(), &want, 0.0, "embedding");
}

/// GeGLU, then attention in a window of 3 over a cache written by a pass of 4 rows and one of
/// 2, run through `be`'s passes: the output of the second pass.
fn glu_and_window(be: &dyn Backend) -> (Vec<f32>, Vec<f32>) {
    let heads = Heads { n_heads: 4, n_kv_heads: 2, head_dim: 8 };
    let d = 16;
    let glu_shape = PassShape { rows: 2, hidden: d, q_dim: d, kv_dim: d, ffn: d };
    let mut p = be.begin(glu_shape, &[0, 1]);
    p.load_x(&values(2 * d, 1));
    p.copy(Act::X, Act::Gate);
    p.load_x(&values(2 * d, 2));
    p.copy(Act::X, Act::Up);
    p.glu(Glu::GeluTanh);
    p.copy(Act::Gate, Act::X);
    let glu = p.read_x(0, 2).unwrap();
    drop(p);
    // Q, K and V from the pass's rows through F32 projections, as a layer makes them.
    // Rows of whole 32-value blocks, as the device reads them (the loader checks it).
    let hidden = 32;
    let mats: Vec<(Vec<u8>, usize)> = [(32usize, 20u32), (16, 21), (16, 22)]
        .iter()
        .map(|&(rows, seed)| (values(rows * hidden, seed).iter().flat_map(|v| v.to_le_bytes()).collect(), rows))
        .collect();
    let handles: Vec<_> =
        mats.iter().map(|(b, rows)| be.upload_device(WeightRef::new(DType::F32, b, *rows, hidden).unwrap())).collect();
    let wo_bytes: Vec<u8> = values(32 * 32, 23).iter().flat_map(|v| v.to_le_bytes()).collect();
    let wo_handle = be.upload_device(WeightRef::new(DType::F32, &wo_bytes, 32, 32).unwrap());
    let wo = WeightRef { device: wo_handle.as_ref(), ..WeightRef::new(DType::F32, &wo_bytes, 32, 32).unwrap() };
    let ws: Vec<WeightRef<'_>> = mats
        .iter()
        .zip(&handles)
        .map(|((b, rows), h)| WeightRef { device: h.as_ref(), ..WeightRef::new(DType::F32, b, *rows, hidden).unwrap() })
        .collect();
    let (mut keys, mut values_buf) = (KvBuf::new(), KvBuf::new());
    let mut device: Option<Box<dyn DeviceKv>> = None;
    let mut out = Vec::new();
    for (start, rows) in [(0usize, 4usize), (4, 2)] {
        let shape = PassShape { rows, hidden, q_dim: 32, kv_dim: 16, ffn: d };
        let positions: Vec<usize> = (start..start + rows).collect();
        let mut p = be.begin(shape, &positions);
        p.load_x(&values(rows * hidden, 10 + start as u32));
        p.matmul(&ws, Act::X, &[Act::Q, Act::K, Act::V]);
        let mut seq = [AttendSeq {
            rows,
            start,
            layer: 0,
            keys: &mut keys,
            values: &mut values_buf,
            format: KvFormat::F16,
            device: &mut device,
            layers: 1,
            capacity: 16,
        }];
        p.attend(&mut seq, heads, 0.35, Some(3));
        // Att back to the residual stream, as a layer's output projection does.
        p.matmul(&[wo], Act::Att, &[Act::X]);
        out = p.read_x(0, rows).unwrap();
    }
    (glu, out)
}

#[test]
fn geglu_and_windowed_attention_over_two_passes_match_the_cpu() {
    let cpu = CpuBackend::new(1);
    let (want_glu, want_att) = glu_and_window(&cpu);
    let be = gpu(Kernel::MatmulRows);
    let (glu, att) = glu_and_window(&be);
    close(&glu, &want_glu, 1e-5, "geglu");
    // Keys and values are rounded to f16 on both sides; the sums differ only in order.
    close(&att, &want_att, 1e-4, "windowed attention");
}

#[test]
fn the_device_argmax_picks_as_the_host_does_ties_to_the_lowest_id() {
    let be = gpu(Kernel::MatmulRows);
    let (vocab, cols) = (700, 64);
    let x = values(4 * cols, 5);
    let ones = Vector::new(vec![1.0; cols], &be);
    let mut rows = values(vocab * cols, 9);
    // Rows 300 and 650 are the same strong row: for the rows of x they win, they tie, and the
    // lower id must be picked. Rows 0..700 otherwise random.
    let strong: Vec<f32> = (0..cols).map(|i| 50.0 * x[i].signum()).collect();
    rows[300 * cols..301 * cols].copy_from_slice(&strong);
    rows[650 * cols..651 * cols].copy_from_slice(&strong);
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut w = WeightRef::new(DType::F32, &bytes, vocab, cols).unwrap();
    let handle = be.upload_device(w);
    w.device = handle.as_ref();
    let shape = PassShape { rows: 4, hidden: cols, q_dim: cols, kv_dim: cols, ffn: cols };
    let mut p = be.begin(shape, &[0, 1, 2, 3]);
    p.load_x(&x);
    let logits = p.head(&[0, 1, 2, 3], ones.as_ref(), 1e-6, w).unwrap();
    let want: Vec<u32> = logits.chunks_exact(vocab).map(crate::backend::math::argmax).collect();
    drop(p);
    let mut p = be.begin(shape, &[0, 1, 2, 3]);
    p.load_x(&x);
    let got = p.head_argmax(&[0, 1, 2, 3], ones.as_ref(), 1e-6, w).unwrap();
    assert_eq!(got, want, "the device's picks against the host's over the same logits");
    assert_eq!(got[0], 300, "row 0 of x is the strong row's own direction: the tie goes to the lower id");
    assert!(want[1..].iter().any(|&t| t != 300), "other rows pick other ids: {want:?}");
}
