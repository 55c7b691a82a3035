//! The K-quants (256-value super-blocks with 6-bit sub-block scales), per ggml-common.h: their
//! layouts and decoders; no encoder. Q4_K and Q6_K have integer-dot kernels (`kern_scalar_k`,
//! `kern_avx2_k`); Q5_K is dequantized a row at a time and dotted in f32.

use super::block::Block;
use super::float16::f16_at;
use crate::backend::DType;

/// Values per K-quant super-block.
pub const QK_K: usize = 256;

/// block_q4_K { d, dmin: f16, scales: [u8; 12], qs: [u8; 128] }.
pub struct BlockQ4K;
/// block_q5_K { d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] }.
pub struct BlockQ5K;
/// block_q6_K { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 }.
pub struct BlockQ6K;

/// The 6-bit scale and min of sub-block `j` (0..8) packed in 12 bytes (ggml's get_scale_min_k4).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// The eight 6-bit scales and the eight 6-bit mins of a Q4_K/Q5_K block, from its 12 packed
/// bytes: [`scale_min_k4`] for all eight at once, four bytes per 32-bit operation (the integer
/// kernels unpack every weight block; byte by byte, a Q4_K matmul took 2-5% longer).
#[inline]
pub fn scales_mins_k4(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    let word = |k: usize| u32::from_le_bytes([q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]]);
    let (q0, q4, q8) = (word(0), word(1), word(2));
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    // Sub-blocks 0..4: the low 6 bits of bytes 0..4 (scales) and 4..8 (mins). 4..8: a nibble of
    // bytes 8..12 below the top 2 bits of bytes 0..4 (scales) or 4..8 (mins). The shifts move
    // bits within each byte; what crosses from a neighbour byte is masked off.
    let sc_hi = (q8 & LOW4) | (((q0 >> 6) & LOW2) << 4);
    let m_hi = ((q8 >> 4) & LOW4) | (((q4 >> 6) & LOW2) << 4);
    let join = |lo: u32, hi: u32| (lo as u64 | (hi as u64) << 32).to_le_bytes();
    (join(q0 & LOW6, sc_hi), join(q4 & LOW6, m_hi))
}

impl Block for BlockQ4K {
    const DTYPE: DType = DType::Q4K;
    const LEN: usize = QK_K;
    const BYTES: usize = 2 + 2 + 12 + QK_K / 2;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qs = &b[16..144];
        for (c, (q, y)) in qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * c, scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
            for l in 0..32 {
                y[l] = d1 * (q[l] & 0x0f) as f32 - m1;
                y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

impl Block for BlockQ5K {
    const DTYPE: DType = DType::Q5K;
    const LEN: usize = QK_K;
    const BYTES: usize = 2 + 2 + 12 + QK_K / 8 + QK_K / 2;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[48..176];
        for (c, (q, y)) in qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * c, scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
            // Bit 2c of qh[l] is the fifth bit of the low-nibble value, bit 2c+1 of the high one.
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * ((q[l] & 0x0f) + h1) as f32 - m1;
                y[l + 32] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
            }
        }
    }
}

impl Block for BlockQ6K {
    const DTYPE: DType = DType::Q6K;
    const LEN: usize = QK_K;
    const BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 208);
        for (h, y) in out.chunks_exact_mut(128).enumerate() {
            let ql = &b[64 * h..64 * h + 64];
            let qh = &b[128 + 32 * h..128 + 32 * h + 32];
            let sc = &b[192 + 8 * h..192 + 8 * h + 8];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_scales_unpack_per_ggml() {
        // Sub-blocks 0..4 take the low 6 bits; 4..8 combine a nibble with the top 2 bits.
        let q = [0xc1, 0x02, 0x03, 0x04, 0x45, 0x06, 0x07, 0x08, 0x9a, 0x0b, 0x0c, 0x0d];
        assert_eq!(scale_min_k4(0, &q), (1, 5));
        assert_eq!(scale_min_k4(4, &q), (0x0a | (3 << 4), 0x09 | (1 << 4)));
        assert_eq!(scale_min_k4(5, &q), (0x0b, 0x00));
    }

    #[test]
    fn all_scales_unpack_as_one_at_a_time() {
        let mut s = 0x1234_5678_9abc_def1u64;
        for _ in 0..2000 {
            let q: Vec<u8> = (0..12)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (s >> 56) as u8
                })
                .collect();
            let (sc, m) = scales_mins_k4(&q);
            for j in 0..8 {
                assert_eq!((sc[j], m[j]), scale_min_k4(j, &q), "sub-block {j} of {q:02x?}");
            }
        }
    }
}
