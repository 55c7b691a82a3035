//! The row-interleaved layout (`Layout::Rows8`) of Q4_K and Q6_K, as `repack.rs` makes it for
//! the 32-value types: eight weight rows per group, and per block column one super-block
//! holding block `b` of the eight rows, so that the AVX2 kernels (`kern_avx2_k_r8.rs`) read one
//! row per 32-bit lane and need no horizontal sum per row. Every field is stored as planes of
//! 32-bit (or, for the f16 scales, 16-bit) pieces, one per row: one load gives that piece of all
//! eight rows. A super-block has the size of the eight blocks it replaces.
//!
//! Q4_K (8 x 144 bytes):
//!
//! - bytes 0..16: the eight rows' f16 `d`; 16..32: their `dmin` (one `vcvtph2ps` each);
//! - bytes 32..128: the 12 packed scale bytes as three 32-bit words per row, word `p` of row
//!   `r` at `32 + 32p + 4r`, so that the 32-bit mask-and-shift unpacking of `scales_mins_k4`
//!   runs on all eight rows at once;
//! - bytes 128..1152: the 128 weight bytes in chunks of four, chunk `c` of row `r` at
//!   `128 + 32c + 4r`, as the 32-value types' weights.
//!
//! Q6_K (8 x 210 bytes): the eight `d` (0..16), the 16 scale bytes as four words per row (at
//! `16 + 32p + 4r`), the 128 `ql` bytes in chunks of four (at `144 + 32c + 4r`), then the 64
//! `qh` bytes alike (at `1168 + 32c + 4r`).

use super::block::Block;
use super::block_k::{BlockQ4K, BlockQ6K};
use super::kern_scalar_k::{vec_dot_q4k, vec_dot_q6k};
use super::kernel_io::KKind;
use super::quantized_activations_k::QuantRowsK;
use super::repack::ROWS;

/// Bytes of one Q4_K super-block (block `b` of a group's eight rows).
pub const Q4K_GROUP_BLOCK: usize = ROWS * BlockQ4K::BYTES;
/// Bytes of one Q6_K super-block.
pub const Q6K_GROUP_BLOCK: usize = ROWS * BlockQ6K::BYTES;

/// Bytes of one block of `kind`.
pub const fn block_bytes(kind: KKind) -> usize {
    match kind {
        KKind::Q4K => BlockQ4K::BYTES,
        KKind::Q6K => BlockQ6K::BYTES,
    }
}

/// Where byte `k` of row `r`'s block lands in its super-block.
#[inline]
fn packed_at(kind: KKind, r: usize, k: usize) -> usize {
    // A field of 32-bit pieces starting at `base` (in the super-block) and `from` (in the block).
    let words = |base: usize, from: usize| base + 32 * ((k - from) / 4) + 4 * r + (k - from) % 4;
    match (kind, k) {
        (KKind::Q4K, 0..4) => (k / 2) * 2 * ROWS + 2 * r + k % 2,
        (KKind::Q4K, 4..16) => words(32, 4),
        (KKind::Q4K, _) => words(128, 16),
        (KKind::Q6K, 0..128) => words(144, 0),
        (KKind::Q6K, 128..192) => words(1168, 128),
        (KKind::Q6K, 192..208) => words(16, 192),
        (KKind::Q6K, _) => 2 * r + k - 208,
    }
}

/// The interleaved copy of a matrix of `kind` of `rows` (whole groups) rows of `row_bytes`
/// bytes.
pub fn repack(kind: KKind, bytes: &[u8], rows: usize, row_bytes: usize) -> Vec<u8> {
    let bb = block_bytes(kind);
    let (nb, gb) = (row_bytes / bb, ROWS * bb);
    let mut out = vec![0u8; bytes.len()];
    for (g, dst) in out.chunks_exact_mut(nb * gb).enumerate().take(rows / ROWS) {
        for r in 0..ROWS {
            let row = &bytes[(g * ROWS + r) * row_bytes..][..row_bytes];
            for (b, blk) in row.chunks_exact(bb).enumerate() {
                let sb = &mut dst[b * gb..(b + 1) * gb];
                for (k, &v) in blk.iter().enumerate() {
                    sb[packed_at(kind, r, k)] = v;
                }
            }
        }
    }
    out
}

/// Row `r` of an interleaved matrix of `kind` with `nb` blocks per row, in the file's encoding.
pub fn unpack_row(kind: KKind, packed: &[u8], nb: usize, r: usize, out: &mut [u8]) {
    let bb = block_bytes(kind);
    let gb = ROWS * bb;
    let group = &packed[(r / ROWS) * nb * gb..][..nb * gb];
    for (b, blk) in out.chunks_exact_mut(bb).enumerate().take(nb) {
        for (k, v) in blk.iter_mut().enumerate() {
            *v = group[b * gb + packed_at(kind, r % ROWS, k)];
        }
    }
}

/// The portable dots of one group (`nb` super-blocks at `group`) with activation rows `acts`
/// (`out[i - acts.start][r]` for weight row `r`): each row is unpacked once and dotted by the
/// row-major portable kernel, so the results are bit-equal to the row-major path's. The
/// fallback of the levels without a kernel for the layout.
pub fn dot_group(
    kind: KKind,
    group: &[u8],
    nb: usize,
    x: &QuantRowsK,
    acts: std::ops::Range<usize>,
) -> Vec<[f32; ROWS]> {
    let rb = nb * block_bytes(kind);
    let mut rows = vec![0u8; ROWS * rb];
    for (r, row) in rows.chunks_exact_mut(rb).enumerate() {
        unpack_row(kind, group, nb, r, row);
    }
    let dot = match kind {
        KKind::Q4K => vec_dot_q4k,
        KKind::Q6K => vec_dot_q6k,
    };
    acts.map(|i| {
        let mut v = [0f32; ROWS];
        for (o, row) in v.iter_mut().zip(rows.chunks_exact(rb)) {
            *o = dot(row, x, i);
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
    fn the_backend_interleaves_q4k_and_q6k_at_the_levels_with_their_kernels_only() {
        let (rows, cols) = (16, 256);
        for (dtype, kind) in [(DType::Q4K, Some(KKind::Q4K)), (DType::Q6K, Some(KKind::Q6K)), (DType::Q5K, None)] {
            let wb = weight(dtype, rows, cols, 1);
            let w = WeightRef::new(dtype, &wb, rows, cols).unwrap();
            for isa in isas_under_test() {
                let got = CpuBackend::with_isa(1, isa).upload(w);
                let want = kind.filter(|_| isa != Isa::Scalar);
                assert_eq!(got.is_some(), want.is_some(), "{dtype} {}", isa.name());
                if let (Some(up), Some(kind)) = (got, want) {
                    assert_eq!((up.dtype, up.layout), (dtype, Layout::Rows8));
                    assert_eq!(up.bytes, repack(kind, &wb, rows, wb.len() / rows));
                }
            }
        }
    }

    #[test]
    fn the_layout_is_a_permutation_and_every_row_unpacks_to_its_file_bytes() {
        for (dtype, kind) in [(DType::Q4K, KKind::Q4K), (DType::Q6K, KKind::Q6K)] {
            let mut seen = vec![false; ROWS * block_bytes(kind)];
            for r in 0..ROWS {
                for k in 0..block_bytes(kind) {
                    let at = packed_at(kind, r, k);
                    assert!(!std::mem::replace(&mut seen[at], true), "{dtype}: row {r} byte {k} lands on another's");
                }
            }
            let (rows, cols) = (24, 768);
            let wb = weight(dtype, rows, cols, 3);
            let rb = wb.len() / rows;
            let packed = repack(kind, &wb, rows, rb);
            assert_eq!(packed.len(), wb.len());
            let mut row = vec![0u8; rb];
            for r in 0..rows {
                unpack_row(kind, &packed, cols / 256, r, &mut row);
                assert_eq!(row, &wb[r * rb..(r + 1) * rb], "{dtype} row {r}");
            }
        }
    }
}
