// RMSNorm: each piece of d values (a row, or a head for q/k norms) scaled to unit RMS, then times
// the weights, into x: one workgroup a piece. As on the CPU: (x * scale) * w, scale from the
// mean of squares plus eps. The bindings come from the Rust side (context.rs): in place, where
// `src_at` reads x itself, or from another buffer (a layer's pre-norm of the residual stream,
// the copy fused in).

struct Params {
    d: u32,
    eps: f32,
    wg_x: u32,
    pieces: u32,
}


var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let piece = wid.x + wid.y * p.wg_x;
    let live = piece < p.pieces;
    let base = piece * p.d;
    var s = 0.0;
    if (live) {
        for (var i = t; i < p.d; i += 64u) {
            let v = src_at(base + i);
            s += v * v;
        }
    }
    part[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            part[t] += part[t + k];
        }
        workgroupBarrier();
    }
    if (live) {
        let scale = 1.0 / sqrt(part[0] / f32(p.d) + p.eps);
        for (var i = t; i < p.d; i += 64u) {
            x[base + i] = (src_at(base + i) * scale) * wt[i];
        }
    }
}
