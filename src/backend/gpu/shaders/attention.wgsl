// Causal GQA attention of one sequence's rows over its cache (f16 pairs), optionally within a
// sliding window: one workgroup of 64 per (row, query head). Keys are taken 64 at a time, a
// thread a key for the scores, then an online softmax (running maximum and sum) over the tiles,
// each thread owning up to 4 of the head's output dimensions (heads of at most 256).

struct Params {
    n: u32,
    row0: u32,
    start: u32,
    n_heads: u32,
    kv_heads: u32,
    head_dim: u32,
    window: u32,
    scale: f32,
    wg_x: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<u32>;
@group(0) @binding(2) var<storage, read> vc: array<u32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const NEG: f32 = -3.0e38;

var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

fn half_at(buf_word: u32, odd: bool) -> f32 {
    let h = unpack2x16float(buf_word);
    return select(h.x, h.y, odd);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let g = wid.x + wid.y * p.wg_x;
    if (g >= p.n * p.n_heads) {
        return;
    }
    let h = g % p.n_heads;
    let i = g / p.n_heads;
    let pos = p.start + i;
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    let hd = p.head_dim;
    let kvh = h / (p.n_heads / p.kv_heads);
    let kv_dim = p.kv_heads * hd;
    let qbase = (p.row0 + i) * p.n_heads * hd + h * hd;
    for (var d = t; d < hd; d += 64u) {
        qs[d] = q[qbase + d];
    }
    workgroupBarrier();
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, 4>;
    for (var tile = lo; tile <= pos; tile += 64u) {
        let kp = tile + t;
        var s = NEG;
        if (kp <= pos) {
            let kb = kp * kv_dim + kvh * hd;
            var dot = 0.0;
            for (var d = 0u; d < hd; d += 2u) {
                let kk = unpack2x16float(kc[(kb + d) / 2u]);
                dot += qs[d] * kk.x + qs[d + 1u] * kk.y;
            }
            s = dot * p.scale;
        }
        sc[t] = s;
        red[t] = s;
        workgroupBarrier();
        for (var k = 32u; k > 0u; k >>= 1u) {
            if (t < k) {
                red[t] = max(red[t], red[t + k]);
            }
            workgroupBarrier();
        }
        let m_new = max(m, red[0]);
        let corr = exp(m - m_new);
        l *= corr;
        for (var k = 0u; k < 4u; k++) {
            acc[k] *= corr;
        }
        let count = min(64u, pos + 1u - tile);
        for (var j = 0u; j < count; j++) {
            let e = exp(sc[j] - m_new);
            l += e;
            let vb = (tile + j) * kv_dim + kvh * hd;
            for (var k = 0u; k < 4u; k++) {
                let d = t + 64u * k;
                if (d < hd) {
                    acc[k] += e * half_at(vc[(vb + d) / 2u], (d & 1u) == 1u);
                }
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    let obase = (p.row0 + i) * p.n_heads * hd + h * hd;
    for (var k = 0u; k < 4u; k++) {
        let d = t + 64u * k;
        if (d < hd) {
            o[obase + d] = acc[k] / l;
        }
    }
}
