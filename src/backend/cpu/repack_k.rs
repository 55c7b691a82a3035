//! The row-interleaved layout (`Layout::Rows8`) of Q4_K, as `repack.rs` makes it for the
//! 32-value types: eight weight rows per group, and per block column one super-block holding
//! block `b` of the eight rows, so that the AVX2 kernel (`kern_avx2_k_r8.rs`) reads one row per
//! 32-bit lane and needs no horizontal sum per row.
//!
//! A Q4_K super-block (8 x 144 bytes, the size of the blocks it replaces):
//!
//! - bytes 0..16: the eight rows' f16 `d`; 16..32: their `dmin` (one `vcvtph2ps` each);
//! - bytes 32..128: the 12 packed scale bytes as three 32-bit words per row, word `p` of row
//!   `r` at `32 + 32p + 4r`: one load gives word `p` of every row, and the 32-bit mask-and-shift
//!   unpacking of `scales_mins_k4` then runs on all eight rows at once;
//! - bytes 128..1152: the 128 weight bytes in chunks of four, chunk `c` of row `r` at
//!   `128 + 32c + 4r`, as the 32-value types' weights.

use super::block::Block;
use super::block_k::BlockQ4K;
use super::kern_scalar_k::vec_dot_q4k;
use super::quantized_activations_k::QuantRowsK;
use super::repack::ROWS;

/// Bytes of one Q4_K super-block (block `b` of a group's eight rows).
pub const Q4K_GROUP_BLOCK: usize = ROWS * BlockQ4K::BYTES;

/// Where byte `k` of row `r`'s Q4_K block lands in its super-block.
#[inline]
fn q4k_at(r: usize, k: usize) -> usize {
    match k {
        0..4 => (k / 2) * 2 * ROWS + 2 * r + k % 2,
        4..16 => 32 + 32 * ((k - 4) / 4) + 4 * r + (k - 4) % 4,
        _ => 128 + 32 * ((k - 16) / 4) + 4 * r + (k - 16) % 4,
    }
}

/// The interleaved copy of a Q4_K matrix of `rows` (whole groups) rows of `row_bytes` bytes.
pub fn repack_q4k(bytes: &[u8], rows: usize, row_bytes: usize) -> Vec<u8> {
    let nb = row_bytes / BlockQ4K::BYTES;
    let mut out = vec![0u8; bytes.len()];
    for (g, dst) in out.chunks_exact_mut(nb * Q4K_GROUP_BLOCK).enumerate().take(rows / ROWS) {
        for r in 0..ROWS {
            let row = &bytes[(g * ROWS + r) * row_bytes..][..row_bytes];
            for (b, blk) in row.chunks_exact(BlockQ4K::BYTES).enumerate() {
                let sb = &mut dst[b * Q4K_GROUP_BLOCK..(b + 1) * Q4K_GROUP_BLOCK];
                for (k, &v) in blk.iter().enumerate() {
                    sb[q4k_at(r, k)] = v;
                }
            }
        }
    }
    out
}

/// Row `r` of an interleaved Q4_K matrix with `nb` blocks per row, in the file's encoding.
pub fn unpack_row_q4k(packed: &[u8], nb: usize, r: usize, out: &mut [u8]) {
    let group = &packed[(r / ROWS) * nb * Q4K_GROUP_BLOCK..][..nb * Q4K_GROUP_BLOCK];
    for (b, blk) in out.chunks_exact_mut(BlockQ4K::BYTES).enumerate().take(nb) {
        for (k, v) in blk.iter_mut().enumerate() {
            *v = group[b * Q4K_GROUP_BLOCK + q4k_at(r % ROWS, k)];
        }
    }
}

/// The portable dots of one group (`nb` super-blocks at `group`) with activation rows `acts`
/// (`out[i - acts.start][r]` for weight row `r`): each row is unpacked once and dotted by
/// `vec_dot_q4k`, so the results are bit-equal to the row-major path's. The fallback of the
/// levels without a kernel for the layout.
pub fn dot_group_q4k(group: &[u8], nb: usize, x: &QuantRowsK, acts: std::ops::Range<usize>) -> Vec<[f32; ROWS]> {
    let mut rows = vec![0u8; ROWS * nb * BlockQ4K::BYTES];
    for (r, row) in rows.chunks_exact_mut(nb * BlockQ4K::BYTES).enumerate() {
        unpack_row_q4k(group, nb, r, row);
    }
    acts.map(|i| {
        let mut v = [0f32; ROWS];
        for (o, row) in v.iter_mut().zip(rows.chunks_exact(nb * BlockQ4K::BYTES)) {
            *o = vec_dot_q4k(row, x, i);
        }
        v
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::{isas_under_test, weight};
    use super::super::{CpuBackend, Isa};
    use super::*;
    use crate::backend::{Backend, DType, Layout, WeightRef};

    #[test]
    fn the_backend_interleaves_q4k_at_the_levels_with_its_kernels_only() {
        let (rows, cols) = (16, 256);
        for dtype in [DType::Q4K, DType::Q6K, DType::Q5K] {
            let wb = weight(dtype, rows, cols, 1);
            let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
            for isa in isas_under_test() {
                let got = CpuBackend::with_isa(1, isa).repack(w);
                let want = dtype == DType::Q4K && isa != Isa::Scalar;
                assert_eq!(got.is_some(), want, "{dtype} {}", isa.name());
                if let Some((layout, bytes)) = got {
                    assert_eq!((layout, bytes), (Layout::Rows8, repack_q4k(&wb, rows, wb.len() / rows)));
                }
            }
        }
    }

    #[test]
    fn the_layout_is_a_permutation_and_every_row_unpacks_to_its_file_bytes() {
        let mut seen = vec![false; Q4K_GROUP_BLOCK];
        for r in 0..ROWS {
            for k in 0..BlockQ4K::BYTES {
                assert!(!std::mem::replace(&mut seen[q4k_at(r, k)], true), "row {r} byte {k} lands on another's");
            }
        }
        let (rows, cols) = (24, 768);
        let wb = weight(DType::Q4K, rows, cols, 3);
        let rb = wb.len() / rows;
        let packed = repack_q4k(&wb, rows, rb);
        assert_eq!(packed.len(), wb.len());
        let mut row = vec![0u8; rb];
        for r in 0..rows {
            unpack_row_q4k(&packed, cols / 256, r, &mut row);
            assert_eq!(row, &wb[r * rb..(r + 1) * rb], "row {r}");
        }
    }
}
