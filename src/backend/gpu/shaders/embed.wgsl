// x[r] = row tokens[r] of the table w, times scale: one workgroup a token. A table split across
// bindings runs once per part, each part writing the rows it holds.

struct Params {
    cols: u32,
    scale: f32,
    wg_x: u32,
    n: u32,
    // The rows of the table this part holds.
    row0: u32,
    rows: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wid.x + wid.y * p.wg_x;
    if (r >= p.n || tokens[r] < p.row0 || tokens[r] >= p.row0 + p.rows) {
        return;
    }
    let chunks = p.cols / 32u;
    let first = (tokens[r] - p.row0) * (chunks / CPB);
    for (var c = t; c < chunks; c += 64u) {
        var v: array<f32, 32>;
        load32(first + c / CPB, c % CPB, &v);
        for (var i = 0u; i < 32u; i++) {
            y[r * p.cols + c * 32u + i] = v[i] * p.scale;
        }
    }
}
