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
