// ids[r] = the position of the largest of row r's `n` logits, the lowest on ties (the host's
// `backend::math::argmax`): one workgroup a row, each thread a strided share, then a tree in
// workgroup memory. A greedy step reads back these ids instead of its rows of logits.

struct Params {
    n: u32,
    rows: u32,
    wg_x: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;

var<workgroup> best: array<f32, 256>;
var<workgroup> at: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * p.wg_x;
    let live = r < p.rows;
    var b = bitcast<f32>(0xff800000u);
    var i = 0u;
    if (live) {
        let base = r * p.n;
        // Ascending within a thread and a strict comparison: its first maximum.
        for (var k = t; k < p.n; k += WG) {
            let v = logits[base + k];
            if (v > b) {
                b = v;
                i = k;
            }
        }
    }
    best[t] = b;
    at[t] = i;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            let v = best[t + s];
            let j = at[t + s];
            if (v > best[t] || (v == best[t] && j < at[t])) {
                best[t] = v;
                at[t] = j;
            }
        }
        workgroupBarrier();
    }
    if (live && t == 0u) {
        ids[r] = at[0];
    }
}
