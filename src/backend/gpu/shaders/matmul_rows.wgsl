// y[n][r] = dot(row r of w, x[n]), a thread a weight row (and up to 8 activation rows, picked by
// the z index): no workgroup memory and no barriers. This is the kernel for software adapters
// (lavapipe), where a barrier costs a switch between every invocation of the workgroup; on a
// GPU, neighbouring threads reading different rows waste its memory bandwidth, and
// `matmul.wgsl` runs instead.

// Params and the bindings: shaders/matmul_io.wgsl, appended by the Rust side.

const NB: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = (wid.x + wid.y * p.wg_x) * 64u + li;
    if (row >= p.rows) {
        return;
    }
    let n0 = wid.z * NB;
    let nn = min(NB, p.n - n0);
    let chunks = p.cols / 32u;
    let first = row * (chunks / CPB);
    var acc: array<f32, 8>;
    for (var c = 0u; c < chunks; c++) {
        var v: array<f32, 32>;
        load32(first + c / CPB, c % CPB, &v);
        for (var r = 0u; r < nn; r++) {
            let xb = (n0 + r) * p.cols + c * 32u;
            var s = 0.0;
            for (var i = 0u; i < 32u; i++) {
                s += v[i] * x[xb + i];
            }
            acc[r] += s;
        }
    }
    for (var r = 0u; r < nn; r++) {
        y[(n0 + r) * p.stride + p.row0 + row] = acc[r];
    }
}
