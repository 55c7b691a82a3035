//! The row-interleaved layout (`Layout::Rows8`) of the 32-value integer-dot types, made at load
//! time from the file's row-major blocks, and the portable dot over it.
//!
//! Eight weight rows form a group; a group stores, block column by block column, one
//! "super-block" holding block `b` of its eight rows:
//!
//! - the f16 header fields as planes: the eight rows' `d` (16 bytes), then for Q4_1 the eight
//!   `m` (16 bytes), so that one `vcvtph2ps` gives all eight scales in the lanes of a register;
//! - the weight bytes in chunks of four: chunk `c` holds bytes `4c..4c+4` of each row's block,
//!   row `r` at `32c + 4r`. A 256-bit load is one chunk of all eight rows, one row per 32-bit
//!   lane, so one broadcast of the matching four activation bytes serves eight weight rows and
//!   the integer sums come out one row per lane: no horizontal reduction per row.
//!
//! The super-block has the same size as the eight blocks (8 x 20 bytes for Q4_1), so the copy
//! costs exactly the bytes of the tensors it replaces. (llama.cpp's `block_q4_0x8` and
//! ik_llama.cpp's `_R8` types interleave rows the same way; the byte order here is our own.)

use super::block::IntBlock;
use super::block_q::{BlockQ4_0, BlockQ4_1, BlockQ8_0};
use super::kernel_io::{KKind, QKind};
use super::quantized_activations::QuantRows;
use crate::backend::DType;

/// Weight rows per interleaved group.
pub const ROWS: usize = 8;

/// Bytes of one super-block (block `b` of a group's eight rows) of `B`.
pub const fn group_block_bytes<B: IntBlock>() -> usize {
    ROWS * B::BYTES
}

/// Where byte `k` of row `r`'s block lands in its super-block.
#[inline]
fn packed_at<B: IntBlock>(r: usize, k: usize) -> usize {
    if k < B::QS_AT {
        // Header field `k / 2` (an f16) of row `r`, in that field's plane.
        (k / 2) * 2 * ROWS + r * 2 + k % 2
    } else {
        let q = k - B::QS_AT;
        ROWS * B::QS_AT + (q / 4) * 4 * ROWS + r * 4 + q % 4
    }
}

fn repack_as<B: IntBlock>(bytes: &[u8], rows: usize, row_bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    let (bb, nb) = (B::BYTES, row_bytes / B::BYTES);
    let gb = group_block_bytes::<B>();
    let group_bytes = nb * gb;
    for (g, dst) in out.chunks_exact_mut(group_bytes).enumerate().take(rows / ROWS) {
        for r in 0..ROWS {
            let row = &bytes[(g * ROWS + r) * row_bytes..][..row_bytes];
            for (b, blk) in row.chunks_exact(bb).enumerate() {
                let sb = &mut dst[b * gb..(b + 1) * gb];
                for (k, &v) in blk.iter().enumerate() {
                    sb[packed_at::<B>(r, k)] = v;
                }
            }
        }
    }
    out
}

/// The interleaved copy of a `rows x cols` matrix of `dtype`, or `None` when the type has no
/// interleaved kernels or `rows` is not a whole number of groups (such matrices stay as they are).
pub fn repack(dtype: DType, bytes: &[u8], rows: usize, cols: usize) -> Option<Vec<u8>> {
    let row_bytes = dtype.bytes_for(cols)?;
    if !rows.is_multiple_of(ROWS) || rows == 0 || bytes.len() != rows * row_bytes {
        return None;
    }
    Some(match dtype {
        DType::Q4_0 => repack_as::<BlockQ4_0>(bytes, rows, row_bytes),
        DType::Q4_1 => repack_as::<BlockQ4_1>(bytes, rows, row_bytes),
        DType::Q8_0 => repack_as::<BlockQ8_0>(bytes, rows, row_bytes),
        DType::Q4K => super::repack_k::repack(KKind::Q4K, bytes, rows, row_bytes),
        DType::Q6K => super::repack_k::repack(KKind::Q6K, bytes, rows, row_bytes),
        _ => return None,
    })
}

/// Row `r` of an interleaved matrix back in the file's encoding (`out` is one row's bytes).
pub fn unpack_row(dtype: DType, packed: &[u8], cols: usize, r: usize, out: &mut [u8]) {
    match dtype {
        DType::Q4_0 => unpack_row_as::<BlockQ4_0>(packed, cols, r, out),
        DType::Q4_1 => unpack_row_as::<BlockQ4_1>(packed, cols, r, out),
        DType::Q8_0 => unpack_row_as::<BlockQ8_0>(packed, cols, r, out),
        DType::Q4K => super::repack_k::unpack_row(KKind::Q4K, packed, cols / dtype.block_len(), r, out),
        DType::Q6K => super::repack_k::unpack_row(KKind::Q6K, packed, cols / dtype.block_len(), r, out),
        _ => panic!("{dtype} has no interleaved layout"),
    }
}

fn unpack_row_as<B: IntBlock>(packed: &[u8], cols: usize, r: usize, out: &mut [u8]) {
    let nb = cols / B::LEN;
    let gb = group_block_bytes::<B>();
    let group = &packed[(r / ROWS) * nb * gb..][..nb * gb];
    for (b, blk) in out.chunks_exact_mut(B::BYTES).enumerate() {
        for (k, v) in blk.iter_mut().enumerate() {
            *v = group[b * gb + packed_at::<B>(r % ROWS, k)];
        }
    }
}

/// The portable dot of one group (`nb` super-blocks at `group`) with activation row `i`, the
/// eight rows' results in order. Each row runs the very operations of `kern_scalar::vec_dot`
/// on its own blocks, so the results are bit-equal to the row-major path's: this is the
/// reference the SIMD kernels of the layout are tested against.
pub fn dot_group<B: IntBlock>(group: &[u8], x: &QuantRows, i: usize) -> [f32; ROWS] {
    let (xq, xd, xs) = (x.qs(i), x.d(i), x.s(i));
    let gb = group_block_bytes::<B>();
    let mut acc = [0f32; ROWS];
    let mut blk = vec![0u8; B::BYTES];
    for (b, sb) in group.chunks_exact(gb).enumerate() {
        for (r, a) in acc.iter_mut().enumerate() {
            for (k, v) in blk.iter_mut().enumerate() {
                *v = sb[packed_at::<B>(r, k)];
            }
            *a += B::block_dot(&blk, &xq[b * B::LEN..(b + 1) * B::LEN], xd[b], xs[b]);
        }
    }
    acc
}

/// [`dot_group`] for a kernel family.
pub fn dot_group_of(kind: QKind) -> fn(&[u8], &QuantRows, usize) -> [f32; ROWS] {
    match kind {
        QKind::Q4_0 => dot_group::<BlockQ4_0>,
        QKind::Q4_1 => dot_group::<BlockQ4_1>,
        QKind::Q8_0 => dot_group::<BlockQ8_0>,
    }
}

#[cfg(test)]
mod tests {
    use super::super::isa::Isa;
    use super::super::kern_scalar::vec_dot;
    use super::super::test_inputs::{noise, weight};
    use super::*;

    const TYPES: [DType; 3] = [DType::Q4_0, DType::Q4_1, DType::Q8_0];

    #[test]
    fn every_row_unpacks_to_its_file_bytes() {
        let (rows, cols) = (24, 96);
        for dtype in TYPES {
            let wb = weight(dtype, rows, cols, 4);
            let packed = repack(dtype, &wb, rows, cols).expect("whole groups repack");
            assert_eq!(packed.len(), wb.len(), "{dtype}: the copy is exactly as large");
            let rb = wb.len() / rows;
            let mut row = vec![0u8; rb];
            for r in 0..rows {
                unpack_row(dtype, &packed, cols, r, &mut row);
                assert_eq!(row, wb[r * rb..(r + 1) * rb], "{dtype} row {r}");
            }
        }
    }

    #[test]
    fn a_super_block_puts_each_rows_scale_in_its_lane_and_four_byte_chunks_side_by_side() {
        let (rows, cols) = (8, 32);
        let wb = weight(DType::Q4_1, rows, cols, 9);
        let p = repack(DType::Q4_1, &wb, rows, cols).unwrap();
        for r in 0..8 {
            let blk = &wb[r * 20..(r + 1) * 20];
            assert_eq!(&p[2 * r..2 * r + 2], &blk[0..2], "d of row {r}");
            assert_eq!(&p[16 + 2 * r..16 + 2 * r + 2], &blk[2..4], "m of row {r}");
            for c in 0..4 {
                assert_eq!(&p[32 + 32 * c + 4 * r..][..4], &blk[4 + 4 * c..][..4], "chunk {c} of row {r}");
            }
        }
    }

    #[test]
    fn matrices_that_are_not_whole_groups_or_have_no_kernels_stay_as_they_are() {
        assert!(repack(DType::Q4_1, &weight(DType::Q4_1, 12, 64, 1), 12, 64).is_none());
        assert!(repack(DType::F16, &weight(DType::F16, 8, 64, 1), 8, 64).is_none());
        assert!(repack(DType::Q4_1, &[0u8; 10], 8, 64).is_none(), "bytes that do not match the shape");
    }

    #[test]
    fn the_group_dot_is_bit_equal_to_the_row_major_dot() {
        let (rows, cols, n) = (16, 160, 3);
        for dtype in TYPES {
            let wb = weight(dtype, rows, cols, 21);
            let packed = repack(dtype, &wb, rows, cols).unwrap();
            let mut xq = QuantRows::new();
            xq.quantize(Isa::Scalar, &noise(n * cols, 5), n, cols, false);
            let rb = wb.len() / rows;
            let gbytes = rb * ROWS;
            for i in 0..n {
                for g in 0..rows / ROWS {
                    let got = match dtype {
                        DType::Q4_0 => dot_group::<BlockQ4_0>(&packed[g * gbytes..][..gbytes], &xq, i),
                        DType::Q4_1 => dot_group::<BlockQ4_1>(&packed[g * gbytes..][..gbytes], &xq, i),
                        _ => dot_group::<BlockQ8_0>(&packed[g * gbytes..][..gbytes], &xq, i),
                    };
                    for (r, &v) in got.iter().enumerate() {
                        let row = &wb[(g * ROWS + r) * rb..][..rb];
                        let want = match dtype {
                            DType::Q4_0 => vec_dot::<BlockQ4_0>(row, &xq, i),
                            DType::Q4_1 => vec_dot::<BlockQ4_1>(row, &xq, i),
                            _ => vec_dot::<BlockQ8_0>(row, &xq, i),
                        };
                        assert_eq!(v.to_bits(), want.to_bits(), "{dtype} act {i} row {}", g * ROWS + r);
                    }
                }
            }
        }
    }
}
