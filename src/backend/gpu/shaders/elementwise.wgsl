// Element-wise ops over n values, one thread a value: `op` picks which.
//   0: y = x            (copy)
//   1: y += x           (residual add)
//   2: y += x[i % d]    (bias over rows of d)
//   3: y = silu(y) * x  (SwiGLU: y the gate, x the up projection)
//   4: y = gelu_tanh(y) * x (GeGLU)

struct Params {
    n: u32,
    op: u32,
    d: u32,
    wg_x: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

const GELU_SQRT_2_OVER_PI: f32 = {GELU_SQRT_2_OVER_PI};
const GELU_CUBIC: f32 = {GELU_CUBIC};

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wid.x + wid.y * p.wg_x) * 256u + li;
    if (i >= p.n) {
        return;
    }
    switch p.op {
        case 0u: { y[i] = x[i]; }
        case 1u: { y[i] = y[i] + x[i]; }
        case 2u: { y[i] = y[i] + x[i % p.d]; }
        case 3u: {
            let g = y[i];
            y[i] = g / (1.0 + exp(-g)) * x[i];
        }
        default: {
            let g = y[i];
            let z = GELU_SQRT_2_OVER_PI * (g + GELU_CUBIC * g * g * g);
            y[i] = g / (1.0 + exp(min(-2.0 * z, 88.0))) * x[i];
        }
    }
}
