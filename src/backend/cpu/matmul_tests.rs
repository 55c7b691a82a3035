//! The matmul driver against the dequantized f32 product, across levels, threads and batches.

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

const ALL: [DType; 10] = DType::ALL;

fn run(pool: &Pool, isa: Isa, w: WeightRef<'_>, x: &[f32], n: usize) -> Vec<f32> {
    run_path(pool, isa, w, x, n, Path::Best)
}

fn run_path(pool: &Pool, isa: Isa, w: WeightRef<'_>, x: &[f32], n: usize, path: Path) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * w.rows];
    matmul_many(pool, isa, &[w], x, n, &mut [&mut out], &mut Scratch::default(), path);
    out
}

/// The K-quants with integer kernels.
const K_INT: [DType; 2] = [DType::Q4K, DType::Q6K];

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
    // 1, 2 and 3 blocks over, 512 none (and is two K super-blocks; 768 three).
    let shapes = [(288, &ALL[..6]), (320, &ALL[..6]), (352, &ALL[..6]), (512, &ALL[..]), (768, &ALL[6..])];
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
                    let what = format!("{dtype} {} n={n} cols={cols}", isa.name());
                    if K_INT.contains(&dtype) {
                        // The K kernels reduce to the portable integers and scale them alike.
                        assert_eq!(got, want, "{what}");
                    } else {
                        assert_close(&got, &want, 1e-5, &what);
                    }
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
        let mut x = noise(n * cols, 5);
        // Activation blocks of unequal magnitude, as a model's are.
        x[..128].iter_mut().for_each(|v| *v *= 8.0);
        let want = reference(w, &x, n);
        let k_bound = K_INT.contains(&dtype).then(|| k_quant_bound(w, &x, n));
        let tol = if matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0) { 2e-2 } else { 1e-5 };
        for isa in isas_under_test() {
            let got = run(&pool, isa, w, &x, n);
            let what = format!("{dtype} {}", isa.name());
            let Some(bound) = &k_bound else {
                assert_close(&got, &want, tol, &what);
                continue;
            };
            for (k, ((g, e), b)) in got.iter().zip(&want).zip(bound).enumerate() {
                assert!((g - e).abs() <= *b, "{what}: entry {k}: {g} vs {e} (bound {b})");
            }
        }
    }
}

/// Per output entry of a Q4_K/Q6_K product, how far the integer path may be from the exact
/// one: each activation is rounded by at most half its block's step `amax / 127`, so the error
/// is at most `sum_k |w_k| * amax(k's block) / 254`, plus the float rounding of the two paths
/// (1e-5 of the sum of the terms' magnitudes, a hundred times what f32 sums of ~1000 terms
/// accumulate).
fn k_quant_bound(w: WeightRef<'_>, x: &[f32], n: usize) -> Vec<f32> {
    let mut row = vec![0f32; w.cols];
    let mut out = vec![0f32; n * w.rows];
    for r in 0..w.rows {
        dequantize_row(w.dtype, w.row(r), &mut row);
        for i in 0..n {
            let xi = &x[i * w.cols..(i + 1) * w.cols];
            let mut b = 0f64;
            for (wb, xb) in row.chunks(256).zip(xi.chunks(256)) {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                let terms: f64 = wb.iter().zip(xb).map(|(&a, &c)| (a as f64 * c as f64).abs()).sum();
                b += wb.iter().map(|&a| (a as f64).abs()).sum::<f64>() * amax / 254.0 + 1e-5 * terms;
            }
            out[i * w.rows + r] = b as f32;
        }
    }
    out
}

#[test]
fn the_float_path_is_the_dequantized_product_and_unchanged_for_types_without_int_kernels() {
    let pool = Pool::new(2);
    let (rows, cols, n) = (21, 512, 3);
    for dtype in ALL {
        let wb = weight(dtype, rows, cols, 13);
        let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
        let x = noise(n * cols, 14);
        let want = reference(w, &x, n);
        for isa in isas_under_test() {
            let float = run_path(&pool, isa, w, &x, n, Path::Float);
            let what = format!("{dtype} {}", isa.name());
            assert_close(&float, &want, 1e-5, &what);
            let t = type_traits(dtype);
            if t.int_dot.is_none() && t.k_dot.is_none() {
                assert_eq!(run(&pool, isa, w, &x, n), float, "{what}");
            }
        }
    }
}

#[test]
fn extreme_k_quant_blocks_give_the_portable_result_at_every_level() {
    // Every weight bit set (scales and mins 63, Q6_K scales -1, values 15 / 63) and
    // activations at +-127 times the scale: the largest sums the SIMD kernels' 16- and 32-bit
    // lanes must hold. Q6_K's scale bytes -128 are covered by the random blocks.
    let (rows, cols) = (4, 512);
    let x: Vec<f32> = (0..2 * cols).map(|k| if k % 5 == 0 { -1.0 } else { 1.0 }).collect();
    for dtype in K_INT {
        let mut wb = vec![0xffu8; dtype.bytes_for(rows * cols).unwrap()];
        // d (and dmin) = 1.0.
        let (at, header): (usize, &[u8]) =
            if dtype == DType::Q6K { (208, &[0x00, 0x3c]) } else { (0, &[0x00, 0x3c, 0x00, 0x3c]) };
        for blk in wb.chunks_exact_mut(dtype.block_bytes()) {
            blk[at..at + header.len()].copy_from_slice(header);
        }
        let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
        let want = run(&Pool::new(1), Isa::Scalar, w, &x, 2);
        assert_close(&want, &reference(w, &x, 2), 1e-5, &format!("{dtype} scalar"));
        for isa in isas_under_test() {
            assert_eq!(run(&Pool::new(1), isa, w, &x, 2), want, "{dtype} {}", isa.name());
        }
    }
}

#[test]
fn batched_rows_equal_one_row_at_a_time_and_threads_do_not_change_results() {
    let (p1, p2) = (Pool::new(1), Pool::new(2));
    let rows = 301;
    let shapes = [(DType::Q4_1, 576), (DType::Q8_0, 576), (DType::F32, 576), (DType::Q4K, 768), (DType::Q6K, 768)];
    for (dtype, cols) in shapes {
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
            matmul_many(&pool, isa, &ws, &x, n, &mut refs, &mut Scratch::default(), Path::Best);
            for (w, o) in ws.iter().zip(&outs) {
                assert_eq!(o, &run(&pool, isa, *w, &x, n), "{} {} n={n}", w.dtype, isa.name());
            }
        }
    }
}

#[test]
fn an_extreme_q8_weight_of_minus_128_is_handled() {
    // ggml never writes -128, but a file may: the sign trick must not overflow, in the
    // row-major kernels and in the interleaved ones (16 rows: AVX-512 takes two groups at once).
    let (rows, cols) = (16, 64);
    let mut wb = quantize_row(DType::Q8_0, &noise(rows * cols, 1)).unwrap();
    let row_bytes = wb.len() / rows;
    for at in [2, 36, 9 * row_bytes + 5, 9 * row_bytes + 60] {
        wb[at] = 0x80;
    }
    let w = WeightRef::new(DType::Q8_0, &wb, rows, cols).unwrap();
    let pb = packed(w);
    let wp = WeightRef { bytes: &pb, layout: Layout::Rows8, ..w };
    let x = noise(2 * cols, 2);
    let want = reference(w, &x, 2);
    for isa in isas_under_test() {
        assert_close(&run(&Pool::new(1), isa, w, &x, 2), &want, 2e-2, isa.name());
        assert_close(&run(&Pool::new(1), isa, wp, &x, 2), &want, 2e-2, isa.name());
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
            let mut simd = Vec::new();
            for isa in isas_under_test() {
                let want = run(&p2, isa, w, &x, n);
                let got = run(&p2, isa, wp, &x, n);
                let what = format!("{dtype} {} n={n}", isa.name());
                if isa == Isa::Scalar {
                    // The portable path runs each row's very operations: bit-equal.
                    assert_eq!(got, want, "{what}");
                } else {
                    // The SIMD levels' interleaved kernels order the float operations otherwise
                    // than their row-major ones.
                    assert_close(&got, &want, 1e-5, &what);
                    simd.push(got.clone());
                }
                assert_eq!(got, run(&p1, isa, wp, &x, n), "{what}: 1 vs 2 threads");
                for i in [0, n / 2, n - 1] {
                    let single = run(&p1, isa, wp, &x[i * cols..(i + 1) * cols], 1);
                    assert_eq!(&got[i * rows..(i + 1) * rows], &single[..], "{what}: row {i} alone");
                }
            }
            // AVX-512's kernel sums the same integers as AVX2's and shares its float steps.
            if let [avx2, avx512] = &simd[..] {
                assert_eq!(avx2, avx512, "{dtype} n={n}: AVX2 and AVX-512 interleaved kernels differ");
            }
        }
    }
}

#[test]
fn interleaved_k_quants_give_the_row_major_results_bit_for_bit_at_every_level() {
    let (p1, p2) = (Pool::new(1), Pool::new(2));
    let (rows, cols) = (136, 768);
    for dtype in K_INT {
        let wb = weight(dtype, rows, cols, 37);
        let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
        let pb = packed(w);
        let wp = WeightRef { bytes: &pb, layout: Layout::Rows8, ..w };
        for n in [1, 2, 3, 5, ACT_CHUNK + 3] {
            interleaved_k_case(&p1, &p2, w, wp, n);
        }
    }
}

/// `wp` (the interleaved copy of `w`) at every level, 1 and 2 threads, and one row alone, against
/// the portable row-major path.
fn interleaved_k_case(p1: &Pool, p2: &Pool, w: WeightRef<'_>, wp: WeightRef<'_>, n: usize) {
    let (rows, cols) = (w.rows, w.cols);
    let x = noise(n * cols, 50 + n as u64);
    let want = run(p1, Isa::Scalar, w, &x, n);
    for isa in isas_under_test() {
        let what = format!("{} {} n={n}", w.dtype, isa.name());
        assert_eq!(run(p2, isa, wp, &x, n), want, "{what}");
        assert_eq!(run(p1, isa, wp, &x, n), want, "{what}: 1 thread");
        let i = n - 1;
        let single = run(p1, isa, wp, &x[i * cols..(i + 1) * cols], 1);
        assert_eq!(&want[i * rows..(i + 1) * rows], &single[..], "{what}: row {i} alone");
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
