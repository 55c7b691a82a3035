// y[n][r] = dot(row r of w, x[n]) for the pass's rows n. A workgroup of 256 takes 4 weight rows
// (64 threads a row, striding over the row's 32-value chunks) and up to 8 activation rows (its
// z index picks which 8), so that each weight block is decoded once for 8 rows. Each thread's
// partial sums meet in a tree in workgroup memory: no subgroup operations, whose width varies
// (lavapipe's is 8) or which an adapter may lack.

// Params and the bindings: shaders/matmul_io.wgsl, appended by the Rust side.

const ROWS_PER_WG: u32 = 4u;
const TPR: u32 = 64u;
const NB: u32 = 8u;

var<workgroup> red: array<f32, 2048>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let wg = wid.x + wid.y * p.wg_x;
    let t = li % TPR;
    let row = wg * ROWS_PER_WG + li / TPR;
    let n0 = wid.z * NB;
    let nn = min(NB, p.n - n0);
    var acc: array<f32, 8>;
    if (row < p.rows) {
        let chunks = p.cols / 32u;
        let first = row * (chunks / CPB);
        for (var c = t; c < chunks; c += TPR) {
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
    }
    for (var r = 0u; r < NB; r++) {
        red[li * NB + r] = acc[r];
    }
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            for (var r = 0u; r < NB; r++) {
                red[li * NB + r] += red[(li + s) * NB + r];
            }
        }
        workgroupBarrier();
    }
    if (t == 0u && row < p.rows) {
        for (var r = 0u; r < nn; r++) {
            y[(n0 + r) * p.stride + p.row0 + row] = red[li * NB + r];
        }
    }
}
