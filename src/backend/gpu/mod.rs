//! The GPU backend on wgpu: Metal on macOS, Vulkan on Linux and Windows (and Mesa's lavapipe,
//! Vulkan on the CPU, where the tests run it). A model's pass runs on the device whole
//! (`pass.rs`: one command buffer a step, only logits or hidden rows read back), with the
//! weights (`weights.rs`) and every sequence's KV cache (`kv.rs`) on the device. The slice ops
//! of [`Backend`] (an MTP head's fusion and output rows) run on the CPU beside it.
//!
//! Files: `adapter.rs` (which device, and why), `context.rs` (device, pipelines, submitting),
//! `weights.rs`, `kv.rs`, `pass.rs`, and the kernels in `shaders/`.

pub mod adapter;
pub mod context;
pub mod kv;
pub mod pass;
#[cfg(test)]
mod tests;
pub mod weights;

use crate::backend::{
    AttnSeq, Backend, CpuBackend, DeviceHandle, DeviceStats, Heads, Pass, PassShape, Rope, WeightRef,
};
use adapter::{BackendInfo, GpuError};
use context::Gpu;
use pass::{DeviceActs, GpuPass};
use std::sync::{Arc, Mutex};
use weights::{DeviceWeight, Part};

/// Bytes the bandwidth probe copies, and how many times in one command buffer.
const COPY_PROBE_BYTES: usize = 256 << 20;
const COPY_PROBE_REPS: usize = 10;

pub struct GpuBackend {
    gpu: Gpu,
    /// Runs the slice ops, on host memory.
    cpu: CpuBackend,
    acts: Mutex<DeviceActs>,
    info: BackendInfo,
    /// The largest storage binding, in bytes: the adapter's (tests set a small one to split
    /// small matrices).
    max_binding: u64,
}

impl GpuBackend {
    /// A backend on `adapter`, chosen for `reason`; `threads` for the CPU's share of the work.
    pub fn new(adapter: &wgpu::Adapter, reason: String, threads: usize) -> Result<GpuBackend, GpuError> {
        let i = adapter.get_info();
        let gpu = Gpu::new(adapter)?;
        let info = BackendInfo {
            backend: "gpu",
            adapter: i.name.clone(),
            driver: format!("{:?} {}", i.backend, i.driver_info).trim().to_string(),
            reason,
        };
        let max_binding = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        Ok(GpuBackend { gpu, cpu: CpuBackend::new(threads), acts: Mutex::default(), info, max_binding })
    }

    pub fn info(&self) -> &BackendInfo {
        &self.info
    }
}

impl Backend for GpuBackend {
    fn matmul(&self, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
        self.cpu.matmul(w, x, n, out)
    }

    fn matmul_many(&self, ws: &[WeightRef<'_>], x: &[f32], n: usize, outs: &mut [&mut [f32]]) {
        self.cpu.matmul_many(ws, x, n, outs)
    }

    fn can_hold(&self, w: WeightRef<'_>) -> Result<(), String> {
        weights::check(w.dtype, w.cols, self.max_binding)
    }

    fn upload_device(&self, w: WeightRef<'_>) -> Option<DeviceHandle> {
        Some(Arc::new(weights::upload(&self.gpu, w, self.max_binding)))
    }

    fn upload_vector(&self, v: &[f32]) -> Option<DeviceHandle> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let buffer = self.gpu.storage_init(&bytes, "vector");
        let parts = vec![Part { buffer, row0: 0, rows: 1 }];
        Some(Arc::new(DeviceWeight { parts, dtype: crate::backend::DType::F32, rows: 1, cols: v.len() }))
    }

    fn copy_bandwidth(&self) -> Option<f64> {
        // Large enough that launch costs vanish, within one binding.
        let bytes = (COPY_PROBE_BYTES as u64).min(self.max_binding) / 4 * 4;
        let (a, b) = (self.gpu.storage(bytes, "probe in"), self.gpu.storage(bytes, "probe out"));
        let n = (bytes / 4) as u32;
        let (gx, gy) = context::grid(n.div_ceil(256));
        let copy = || {
            let mut params = [0u32; 16];
            params[..4].copy_from_slice(&[n, 0, 1, gx]);
            context::Dispatch {
                kernel: context::Kernel::Elementwise,
                dtype: None,
                binds: vec![context::Bind::whole(&a), context::Bind::whole(&b)],
                params,
                groups: [gx, gy, 1],
            }
        };
        // One copy to build the pipeline and touch the memory, then the timed ones.
        self.gpu.read(&[copy()], &b, 0, 4).ok()?;
        let ds: Vec<_> = (0..COPY_PROBE_REPS).map(|_| copy()).collect();
        let t = std::time::Instant::now();
        self.gpu.read(&ds, &b, 0, 4).ok()?;
        Some(2.0 * bytes as f64 * COPY_PROBE_REPS as f64 / t.elapsed().as_secs_f64())
    }

    fn device_stats(&self) -> Option<DeviceStats> {
        Some(self.gpu.stats())
    }

    fn begin(&self, shape: PassShape, positions: &[usize]) -> Box<dyn Pass + '_> {
        let acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        Box::new(GpuPass::new(&self.gpu, acts, shape, positions))
    }

    fn rms_norm(&self, x: &mut [f32], weight: &[f32], eps: f32) {
        self.cpu.rms_norm(x, weight, eps)
    }

    fn rope(&self, x: &mut [f32], n_heads: usize, head_dim: usize, positions: &[usize], rope: Rope) {
        self.cpu.rope(x, n_heads, head_dim, positions, rope)
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        self.cpu.swiglu(gate, up)
    }

    fn geglu(&self, gate: &mut [f32], up: &[f32]) {
        self.cpu.geglu(gate, up)
    }

    fn attention(&self, seq: AttnSeq<'_>, heads: Heads, scale: f32) {
        self.cpu.attention(seq, heads, scale)
    }
}
