// y[n][r] = dot(row r of w, x[n]): a subgroup a weight row, its lanes striding over the row's
// 32-value chunks and meeting in one subgroupAdd, whatever the subgroup's width (8 on
// lavapipe, 32 on NVIDIA, 32-64 elsewhere). For adapters with subgroups.

// Params and the bindings: shaders/matmul_io.wgsl, appended by the Rust side.

const NB: u32 = 8u;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sgs: u32,
) {
    let row = (wid.x + wid.y * p.wg_x) * (64u / sgs) + li / sgs;
    let live = row < p.rows;
    let n0 = wid.z * NB;
    let nn = min(NB, p.n - n0);
    let chunks = p.cols / 32u;
    let first = row * (chunks / CPB);
    // Each block is decoded once for all (up to 8) activation rows.
    var acc: array<f32, 8>;
    if (live) {
        for (var c = lane; c < chunks; c += sgs) {
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
        let total = subgroupAdd(acc[r]);
        if (live && lane == 0u && r < nn) {
            y[(n0 + r) * p.stride + p.row0 + row] = total;
        }
    }
}
