// RoPE in place: every head of row r rotated by the (cos, sin) pairs of row r's position, which
// the host computed as the CPU does (f64 angles, rounded once). One thread a pair.

struct Params {
    rows: u32,
    heads: u32,
    head_dim: u32,
    half: u32,
    neox: u32,
    wg_x: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.x + wid.y * p.wg_x) * 256u + li;
    if (i >= p.rows * p.heads * p.half) {
        return;
    }
    let pair = i % p.half;
    let head = (i / p.half) % p.heads;
    let r = i / (p.half * p.heads);
    let base = (r * p.heads + head) * p.head_dim;
    var a = base + 2u * pair;
    var b = a + 1u;
    if (p.neox != 0u) {
        a = base + pair;
        b = a + p.half;
    }
    let c = cs[r * p.half + pair];
    let x0 = x[a];
    let x1 = x[b];
    x[a] = x0 * c.x - x1 * c.y;
    x[b] = x0 * c.y + x1 * c.x;
}
