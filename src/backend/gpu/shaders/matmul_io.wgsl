// The matrix kernels' parameters and bindings (matmul.wgsl, matmul_rows.wgsl, matmul_sub.wgsl):
// y[n][row0 + r] = dot(row r of this part of w, x[n]) for the pass's n rows.

struct Params {
    rows: u32,
    cols: u32,
    n: u32,
    wg_x: u32,
    // The first of this part's rows in the whole matrix, and the whole matrix's rows (y's
    // row length).
    row0: u32,
    stride: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
