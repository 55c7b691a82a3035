//! The matmul driver: instruction-set dispatch, activation quantization, and the split of the
//! weight rows across the worker pool.
//!
//! Three kernel families: the 32-value types dot with [`QuantRows`], Q4_K and Q6_K with
//! [`QuantRowsK`], and the rest (floats, Q5_K) dequantize a weight row and dot in f32.
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
use super::quantized_activations_k::QuantRowsK;
use super::repack;
use super::repack_k;
use super::type_traits::{dequantize_row, type_traits, IntDot, KDot};
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

/// The quantized activations of a call, kept across calls to reuse the buffers (only the
/// calling thread quantizes).
#[derive(Default)]
pub struct Scratch {
    q: QuantRows,
    k: QuantRowsK,
}

/// Which kernels a call may use.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// Each type's fastest: its integer-dot kernels where it has them.
    Best,
    /// Dequantize every weight row and dot in f32, whatever the type: the baseline the
    /// benchmarks compare the integer kernels with.
    Float,
}

/// The kernel family of one matrix.
#[derive(Clone, Copy)]
enum Kernel {
    Int(IntDot),
    K(KDot),
    Float,
}

fn kernel(dtype: DType, path: Path) -> Kernel {
    let t = type_traits(dtype);
    match (path, t.int_dot, t.k_dot) {
        (Path::Float, ..) => Kernel::Float,
        (_, Some(q), _) => Kernel::Int(q),
        (_, _, Some(k)) => Kernel::K(k),
        _ => Kernel::Float,
    }
}

thread_local! {
    /// Per-thread buffer for one dequantized weight row (the float path).
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[i * w.rows + r] = dot(row r of w, row i of x)` for `i < n`, `r < w.rows`.
///
/// # Panics
/// When `x` is not `n * w.cols` values or `out` not `n * w.rows`.
pub(crate) fn matmul(pool: &Pool, isa: Isa, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32], xq: &mut Scratch) {
    matmul_many(pool, isa, &[w], x, n, &mut [out], xq, Path::Best)
}

/// [`matmul`] of several matrices with the same `cols` on the same `x` (Q/K/V, gate/up): one
/// activation quantization and one pool dispatch for all of them, with the kernels `path` allows.
///
/// # Panics
/// When the matrices differ in `cols`, `ws` and `outs` in length, or a slice in its shape.
// Eight distinct inputs, each used once: bundling some into a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_many(
    pool: &Pool,
    isa: Isa,
    ws: &[WeightRef<'_>],
    x: &[f32],
    n: usize,
    outs: &mut [&mut [f32]],
    xq: &mut Scratch,
    path: Path,
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
    let kernels: Vec<Kernel> = ws.iter().map(|w| kernel(w.dtype, path)).collect();
    if kernels.iter().any(|k| matches!(k, Kernel::Int(_))) {
        let row_major = ws.iter().zip(&kernels).any(|(w, k)| matches!(k, Kernel::Int(_)) && w.layout == Layout::Rows);
        xq.q.quantize(isa, x, n, cols, row_major);
    }
    if kernels.iter().any(|k| matches!(k, Kernel::K(_))) {
        xq.k.quantize(x, n, cols);
    }
    let outps: Vec<OutRows<'_>> = outs.iter_mut().map(|o| OutRows::new(o, n)).collect();
    let (xq, xk) = (&xq.q, &xq.k);
    let work = |m: usize, rows: Range<usize>| {
        let w = ws[m];
        for a in (0..n).step_by(ACT_CHUNK) {
            let acts = a..(a + ACT_CHUNK).min(n);
            match (kernels[m], w.layout) {
                (Kernel::Int(k), Layout::Rows8) => matmul_r8(isa, k, w, rows.clone(), xq, acts, &outps[m]),
                (Kernel::Int(k), Layout::Rows) => matmul_q(isa, k, w, rows.clone(), xq, acts, &outps[m]),
                (Kernel::K(k), Layout::Rows) => matmul_k(isa, k, w, rows.clone(), xk, acts, &outps[m]),
                (Kernel::K(k), Layout::Rows8) => matmul_k_r8(isa, k, w, rows.clone(), xk, acts, &outps[m]),
                (Kernel::Float, Layout::Rows) => matmul_float(isa, w, rows.clone(), x, acts, &outps[m]),
                (_, Layout::Rows8) => panic!("{}: no interleaved layout for this type and path", w.dtype),
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

/// Q4_K and Q6_K: the AVX2 kernel at both x86 levels (AVX-512 has none of its own for them).
fn matmul_k(
    isa: Isa,
    k_dot: KDot,
    w: WeightRef<'_>,
    rows: Range<usize>,
    x: &QuantRowsK,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both x86 levels are only produced after detecting AVX2, FMA and F16C; the
        // workers own disjoint rows, hence their entries of `out`; the kernel checks the shapes.
        Isa::Avx2 | Isa::Avx512 => unsafe {
            super::kern_avx2_k::matmul_k(k_dot.kind, w.bytes, w.row_bytes(), rows, x, acts, out)
        },
        _ => {
            for r in rows {
                let wr = w.row(r);
                for i in acts.clone() {
                    // SAFETY: this worker owns weight rows `rows`, hence entries (i, r).
                    unsafe { out.write(i, r, (k_dot.scalar)(wr, x, i)) };
                }
            }
        }
    }
}

/// An interleaved Q4_K or Q6_K matrix ([`Layout::Rows8`]): `rows` are whole groups. Every level gives
/// the row-major path's results bit for bit.
fn matmul_k_r8(
    isa: Isa,
    k_dot: KDot,
    w: WeightRef<'_>,
    rows: Range<usize>,
    x: &QuantRowsK,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both x86 levels are only produced after detecting AVX2, FMA and F16C; the
        // workers own disjoint groups, hence their entries of `out`; the kernel checks the shapes.
        Isa::Avx2 | Isa::Avx512 => unsafe {
            super::kern_avx2_k_r8::matmul_k_r8(k_dot.kind, w.bytes, rows, x, acts, out)
        },
        _ => {
            let nb = w.cols / w.dtype.block_len();
            let group_bytes = nb * repack::ROWS * repack_k::block_bytes(k_dot.kind);
            for g in rows.start / repack::ROWS..rows.end / repack::ROWS {
                let grp = &w.bytes[g * group_bytes..(g + 1) * group_bytes];
                for (i, vals) in acts.clone().zip(repack_k::dot_group(k_dot.kind, grp, nb, x, acts.clone())) {
                    for (r, v) in vals.into_iter().enumerate() {
                        // SAFETY: this worker owns weight rows `rows` (whole groups), hence
                        // entries (i, g * ROWS + r).
                        unsafe { out.write(i, g * repack::ROWS + r, v) };
                    }
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
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is only produced after detecting AVX-512 F/BW/VL/VNNI, AVX2, FMA
        // and F16C; the matrix and the cut as above.
        Isa::Avx512 => unsafe { super::kern_avx512_r8::matmul_r8(int_dot.kind, w.bytes, rows, x, acts, out) },
        // The portable level has no kernel for the layout (the backend does not repack for
        // it): the portable reference keeps such a matrix correct there.
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

/// Float weights, Q5_K, and any type on [`Path::Float`]: dequantize a weight row once, dot it
/// with every activation row of the chunk.
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
#[path = "matmul_tests.rs"]
mod tests;
