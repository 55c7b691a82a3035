// How each weight type's blocks are read: `load32(block, sub, v)` writes the 32 values of
// sub-block `sub` of block `block` of the bound weights `w` into `v`. Blocks were repacked at
// upload into whole u32 words (gpu/weights.rs says how); each type's section defines CPB (32-value
// sub-blocks a block) and BW (words a block). The Rust side keeps only the section of the type
// a pipeline reads.

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

