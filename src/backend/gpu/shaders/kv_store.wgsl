// Appends n rows of new keys and values (f32, kv_dim a row, from row `row0` of the pass's K and V)
// to a cache layer at positions start.., as f16 pairs: one thread a pair, the grid's z index
// picking keys (0) or values (1).

struct Params {
    kv_dim: u32,
    n: u32,
    start: u32,
    row0: u32,
    wg_x: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<storage, read> k_src: array<f32>;
@group(0) @binding(1) var<storage, read> v_src: array<f32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.x + wid.y * p.wg_x) * 256u + li;
    let half = p.kv_dim / 2u;
    if (i >= p.n * half) {
        return;
    }
    let r = i / half;
    let c = 2u * (i % half);
    let s = (p.row0 + r) * p.kv_dim + c;
    let at = (p.start + r) * half + i % half;
    if (wid.z == 0u) {
        k_cache[at] = pack2x16float(vec2<f32>(k_src[s], k_src[s + 1u]));
    } else {
        v_cache[at] = pack2x16float(vec2<f32>(v_src[s], v_src[s + 1u]));
    }
}
