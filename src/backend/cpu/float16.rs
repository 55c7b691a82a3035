//! IEEE half (f16) and bfloat16 conversions, by hand: two small functions do not justify the
//! `half` crate, and ggml's results are the reference for every bit (subnormals, infinities, NaN).

/// f16 bits to f32, exact for every input (f32 represents every f16 value).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man * 2^-24. Shift the leading one up to the implicit-bit position.
            let mut e = 127 - 15 + 1;
            let mut m = man;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((m & 0x3ff) << 13)
        }
        31 => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// f32 to f16 bits, rounding to nearest even like numpy and ggml's `GGML_FP32_TO_FP16`.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        // Infinity stays infinity; NaN stays a (quiet) NaN.
        return sign | 0x7c00 | if man != 0 { 0x200 | (man >> 13) as u16 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal result: shift the full significand (with the implicit one) into place.
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && r & 1 == 1) {
        // A carry out of the mantissa correctly bumps the exponent (up to infinity).
        r += 1;
    }
    sign | r as u16
}

/// f32 values to f16 bits, rounding to nearest even: F16C's conversion where the CPU has it
/// (a key or value cache row at a time), else [`f32_to_f16`]; the two give the same bits for
/// every input but NaN payloads (tested).
///
/// # Panics
/// When the slices differ in length.
pub fn f32s_to_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32s_to_f16: {} values into {}", src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: AVX and F16C were detected; the lengths are equal (asserted).
        unsafe { super::kern_avx2_f32::f32_to_f16_row(src, dst) };
        return;
    }
    f32s_to_f16_portable(src, dst);
}

fn f32s_to_f16_portable(src: &[f32], dst: &mut [u16]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f32_to_f16(s));
}

/// f32 values rounded to f16 and then to bf16 (both to nearest even): what a bf16 cache stores
/// (`backend::KvFormat::Bf16Pairs`). F16C where the CPU has it; the same bits as the scalar
/// conversions for every input but NaN payloads (tested).
///
/// # Panics
/// When the slices differ in length.
pub fn f32s_to_bf16_through_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32s_to_bf16_through_f16: {} values into {}", src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: AVX2 and F16C were detected; the lengths are equal (asserted).
        unsafe { super::kern_avx2_f32::f32_to_bf16_through_f16_row(src, dst) };
        return;
    }
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f32_to_bf16(f16_to_f32(f32_to_f16(s))));
}

/// The little-endian f16 at byte `i` of `b`, as f32 (block scales and mins).
#[inline]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// bf16 bits to f32: bf16 is the top half of an f32.
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 bits, rounding to nearest even; NaN stays a quiet NaN.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_round_trips_through_f32() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "f16 {h:#06x} -> {f}");
            }
        }
    }

    #[test]
    fn f16_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00, "ties round to even");
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02, "ties round to even");
        assert_eq!(f32_to_f16(70000.0), 0x7c00, "overflow is infinity");
    }

    /// The row conversion (F16C where the CPU has it) gives the scalar conversion's bits:
    /// every f32 of a stride through all bit patterns, plus each f16's neighbours and halfway
    /// points (ties, subnormals, the overflow edge), in rows of odd lengths (vector and tail).
    #[test]
    fn row_conversion_matches_the_scalar_one() {
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(65_537).map(f32::from_bits).collect();
        for h in 0..=0x7bffu16 {
            let (a, b) = (f16_to_f32(h), f16_to_f32(h + 1));
            let mid = ((a as f64 + b as f64) / 2.0) as f32;
            for x in [a, mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits().max(1) - 1)] {
                xs.extend([x, -x]);
            }
        }
        xs.retain(|x| !x.is_nan());
        for n in [xs.len(), 13, 7] {
            let src = &xs[..n];
            let (mut fast, mut plain) = (vec![0u16; n], vec![0u16; n]);
            f32s_to_f16(src, &mut fast);
            f32s_to_f16_portable(src, &mut plain);
            if let Some(i) = (0..n).find(|&i| fast[i] != plain[i]) {
                panic!("{} ({:#010x}): {:#06x} against {:#06x}", src[i], src[i].to_bits(), fast[i], plain[i]);
            }
        }
    }

    /// The bf16 cache's row conversion gives the two scalar roundings' bits: a stride through
    /// all f32 bit patterns (NaN only as NaN), in rows of odd lengths (vector and tail).
    #[test]
    fn the_bf16_cache_row_conversion_matches_the_scalar_roundings() {
        let xs: Vec<f32> = (0..=u32::MAX).step_by(4_099).map(f32::from_bits).collect();
        for n in [xs.len(), 13, 7] {
            let mut fast = vec![0u16; n];
            f32s_to_bf16_through_f16(&xs[..n], &mut fast);
            for (i, (&x, &got)) in xs.iter().zip(&fast).enumerate() {
                let want = f32_to_bf16(f16_to_f32(f32_to_f16(x)));
                if x.is_nan() {
                    assert!(bf16_to_f32(got).is_nan(), "NaN at {i} became {got:#06x}");
                } else {
                    assert_eq!(got, want, "{x} ({:#010x})", x.to_bits());
                }
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }
}
