// How each weight type's blocks are read: `load32(block, sub, v)` writes the 32 values of
// sub-block `sub` of block `block` of the bound weights `w` into `v`. Blocks were repacked at
// upload into whole u32 words (gpu/weights.rs says how); each type's section defines CPB (32-value
// sub-blocks a block) and BW (words a block). The Rust side keeps only the section of the type
// a pipeline reads, and the parts (`//@part`) that section shares with others.

//@type F32
const CPB: u32 = 1u;
const BW: u32 = 32u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    for (var i = 0u; i < 32u; i++) {
        (*v)[i] = bitcast<f32>(w[base + i]);
    }
}

//@type F16
const CPB: u32 = 1u;
const BW: u32 = 16u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    for (var i = 0u; i < 16u; i++) {
        let h = unpack2x16float(w[base + i]);
        (*v)[2u * i] = h.x;
        (*v)[2u * i + 1u] = h.y;
    }
}

//@type BF16
const CPB: u32 = 1u;
const BW: u32 = 16u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    for (var i = 0u; i < 16u; i++) {
        let q = w[base + i];
        (*v)[2u * i] = bitcast<f32>(q << 16u);
        (*v)[2u * i + 1u] = bitcast<f32>(q & 0xffff0000u);
    }
}

//@type Q8_0
// Words 0-7: the 32 signed bytes; word 8: the f16 scale (low half).
const CPB: u32 = 1u;
const BW: u32 = 9u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let d = unpack2x16float(w[base + 8u]).x;
    for (var i = 0u; i < 8u; i++) {
        let q = w[base + i];
        for (var k = 0u; k < 4u; k++) {
            (*v)[4u * i + k] = f32(bitcast<i32>(q << (24u - 8u * k)) >> 24u) * d;
        }
    }
}

//@type Q4_0
// Words 0-3: byte j holds value j (low nibble) and value j + 16 (high); word 4: the f16 scale.
const CPB: u32 = 1u;
const BW: u32 = 5u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let d = unpack2x16float(w[base + 4u]).x;
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + i];
        for (var k = 0u; k < 4u; k++) {
            let b = (q >> (8u * k)) & 0xffu;
            (*v)[4u * i + k] = (f32(b & 0xfu) - 8.0) * d;
            (*v)[4u * i + k + 16u] = (f32(b >> 4u) - 8.0) * d;
        }
    }
}

//@type Q4_1
// Word 0: the f16 scale and minimum; words 1-4: nibbles as in Q4_0 (the file's own layout).
const CPB: u32 = 1u;
const BW: u32 = 5u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let dm = unpack2x16float(w[base]);
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + 1u + i];
        for (var k = 0u; k < 4u; k++) {
            let b = (q >> (8u * k)) & 0xffu;
            (*v)[4u * i + k] = f32(b & 0xfu) * dm.x + dm.y;
            (*v)[4u * i + k + 16u] = f32(b >> 4u) * dm.x + dm.y;
        }
    }
}

//@type Q5_0
// Word 0: the fifth bits (bit j for value j); words 1-4: nibbles as in Q4_0; word 5: the scale.
const CPB: u32 = 1u;
const BW: u32 = 6u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let qh = w[base];
    let d = unpack2x16float(w[base + 5u]).x;
    for (var i = 0u; i < 4u; i++) {
        let q = w[base + 1u + i];
        for (var k = 0u; k < 4u; k++) {
            let j = 4u * i + k;
            let b = (q >> (8u * k)) & 0xffu;
            let lo = (b & 0xfu) | (((qh >> j) & 1u) << 4u);
            let hi = (b >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
            (*v)[j] = (f32(lo) - 16.0) * d;
            (*v)[j + 16u] = (f32(hi) - 16.0) * d;
        }
    }
}


//@part K_SCALES
// Q4_K's and Q5_K's sub-block scale and minimum (twelve bytes of 6-bit values after the two
// f16 super-block scales), appended to either type's section.
fn kbyte(base: u32, at: u32) -> u32 {
    return (w[base + at / 4u] >> (8u * (at % 4u))) & 0xffu;
}
// (scale, minimum) of sub-block `sub` of the block at word `base`.
fn kscale(base: u32, sub: u32) -> vec2<f32> {
    let dm = unpack2x16float(w[base]);
    var sc: u32;
    var mn: u32;
    if (sub < 4u) {
        sc = kbyte(base, 4u + sub) & 63u;
        mn = kbyte(base, 8u + sub) & 63u;
    } else {
        sc = (kbyte(base, 8u + sub) & 0xfu) | ((kbyte(base, sub) >> 6u) << 4u);
        mn = (kbyte(base, 8u + sub) >> 4u) | ((kbyte(base, 4u + sub) >> 6u) << 4u);
    }
    return vec2<f32>(dm.x * f32(sc), dm.y * f32(mn));
}

//@type Q4_K
// 256 values in 8 sub-blocks of 32. Word 0: the f16 scale and minimum of the scales; words 1-3:
// twelve bytes of 6-bit sub-block scales and minimums; words 4-35: 32 bytes a pair of
// sub-blocks, the even one in the low nibbles, the odd one in the high (the file's layout).
const CPB: u32 = 8u;
const BW: u32 = 36u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let dm = kscale(base, sub);
    let q0 = base + 4u + 8u * (sub / 2u);
    let shift = 4u * (sub % 2u);
    for (var i = 0u; i < 8u; i++) {
        let q = w[q0 + i] >> shift;
        for (var k = 0u; k < 4u; k++) {
            (*v)[4u * i + k] = dm.x * f32((q >> (8u * k)) & 0xfu) - dm.y;
        }
    }
}

//@type Q5_K
// As Q4_K, with words 4-11 holding the fifth bits (bit s of byte l for value l of sub-block s)
// and words 12-43 the nibbles.
const CPB: u32 = 8u;
const BW: u32 = 44u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let dm = kscale(base, sub);
    let q0 = base + 12u + 8u * (sub / 2u);
    let shift = 4u * (sub % 2u);
    for (var i = 0u; i < 8u; i++) {
        let q = w[q0 + i] >> shift;
        let h = w[base + 4u + i] >> sub;
        for (var k = 0u; k < 4u; k++) {
            let lo = (q >> (8u * k)) & 0xfu;
            let hi = ((h >> (8u * k)) & 1u) << 4u;
            (*v)[4u * i + k] = dm.x * f32(lo | hi) - dm.y;
        }
    }
}

//@type Q6_K
// 256 values in two halves of 128, each four sub-blocks of 32. Words 0-31: low nibbles (64
// bytes a half: bytes l and l + 32 hold sub-blocks 0 and 1 low, 2 and 3 high); words 32-47: the
// top two bits (32 bytes a half, sub-block k at bit 2k); words 48-51: sixteen signed 8-bit
// scales, one per 16 values; word 52: the f16 scale (padded at upload).
const CPB: u32 = 8u;
const BW: u32 = 53u;
fn load32(blk: u32, sub: u32, v: ptr<function, array<f32, 32>>) {
    let base = blk * BW;
    let d = unpack2x16float(w[base + 52u]).x;
    let half = sub / 4u;
    let k = sub % 4u;
    let ql0 = base + 16u * half + 8u * (k & 1u);
    let lshift = 4u * (k >> 1u);
    let qh0 = base + 32u + 8u * half;
    let s0 = 8u * half + 2u * k;
    var scale: array<f32, 2>;
    for (var j = 0u; j < 2u; j++) {
        let at = s0 + j;
        let b = (w[base + 48u + at / 4u] >> (8u * (at % 4u))) & 0xffu;
        scale[j] = d * f32(bitcast<i32>(b << 24u) >> 24u);
    }
    for (var i = 0u; i < 8u; i++) {
        let lo = w[ql0 + i] >> lshift;
        let hi = w[qh0 + i] >> (2u * k);
        for (var b = 0u; b < 4u; b++) {
            let q = ((lo >> (8u * b)) & 0xfu) | (((hi >> (8u * b)) & 3u) << 4u);
            (*v)[4u * i + b] = scale[i / 4u] * (f32(q) - 32.0);
        }
    }
}
