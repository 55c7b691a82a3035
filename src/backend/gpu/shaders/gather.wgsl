// y[j] = row idx[j] of x (rows of d values): the rows the output head reads.

struct Params {
    d: u32,
    n: u32,
    wg_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.x + wid.y * p.wg_x) * 256u + li;
    if (i >= p.n * p.d) {
        return;
    }
    let j = i / p.d;
    y[i] = x[idx[j] * p.d + i % p.d];
}
