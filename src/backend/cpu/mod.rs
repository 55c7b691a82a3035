//! The CPU backend: quantized kernels with runtime SIMD dispatch and a worker pool.
//!
//! Files, leaves first: `isa` (the SIMD levels), `float16`, `kernel_io` (what the driver hands
//! the kernels); `block` (the block traits) and the block types in `block_float`, `block_q`
//! and `block_k`; `type_traits` (one table entry per type); `quantized_activations` and
//! `quantized_activations_k` (blocks of 32 and of 256); `repack` (the row-interleaved layout);
//! the kernels `kern_scalar`, `kern_avx2`, `kern_avx2_r8`, `kern_avx2_f32`, `kern_avx2_attn` (with
//! `kern_avx2_attn_few` for decode rows, and `kern_avx512_attn_f32` for its products in 512 bits),
//! `kern_avx512_attn` and `kern_avx512_attn_few` (attention in bf16 pairs), `kern_amx_attn`
//! (attention in AMX tiles) and
//! `kern_avx512` (the row-major integer ones around `tile_driver!`), `kern_avx512_r8` (the
//! interleaved ones, two groups of rows at a time; `kern_avx2_r8`'s run around `r8_driver!`),
//! and for Q4_K/Q6_K
//! `kern_scalar_k` and `kern_avx2_k`; `matmul` (the driver), `ops` (norms, RoPE) and
//! `attention` (the blocks and the portable kernel) and `attention_tasks` (its driver); `pool`.

mod attention;
mod attention_tasks;
mod attention_window;
pub mod block;
pub mod block_float;
pub mod block_k;
pub mod block_q;
pub mod float16;
pub mod host_pass;
pub mod isa;
pub mod kernel_io;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod quantized_activations;
pub mod quantized_activations_k;
pub mod repack;
pub mod repack_k;
pub mod type_traits;

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod tile_driver;
#[cfg(target_arch = "x86_64")]
mod kern_amx_attn;
#[cfg(target_arch = "x86_64")]
mod kern_avx2;
#[cfg(target_arch = "x86_64")]
mod kern_avx2_attn;
#[cfg(target_arch = "x86_64")]
mod kern_avx2_attn_few;
#[cfg(target_arch = "x86_64")]
mod kern_avx2_f32;
#[cfg(target_arch = "x86_64")]
mod kern_avx2_k;
#[cfg(target_arch = "x86_64")]
mod kern_avx2_k_r8;
#[cfg(target_arch = "x86_64")]
mod kern_avx2_r8;
#[cfg(target_arch = "x86_64")]
mod kern_avx512;
#[cfg(target_arch = "x86_64")]
mod kern_avx512_attn;
#[cfg(target_arch = "x86_64")]
mod kern_avx512_attn_f32;
#[cfg(target_arch = "x86_64")]
mod kern_avx512_attn_few;
#[cfg(target_arch = "x86_64")]
mod kern_avx512_r8;
mod kern_scalar;
mod kern_scalar_k;
#[cfg(test)]
pub(crate) mod test_inputs;

pub use isa::{Isa, CAP_ENV as ISA_CAP_ENV};
pub use type_traits::{dequantize_row, quantize_row};

use crate::backend::{AttnSeq, Backend, DType, Heads, KvFormat, Layout, Pass, PassShape, Rope, Upload, WeightRef};
use host_pass::{HostActs, HostPass};
use matmul::{Path, Scratch};
use pool::Pool;
use std::sync::Mutex;

/// The CPU implementation of [`Backend`]: owns the worker pool and the scratch buffers.
pub struct CpuBackend {
    pool: Pool,
    isa: Isa,
    /// Quantized activations, reused across calls (only the calling thread quantizes).
    xq: Mutex<Scratch>,
    /// Sliding windows' copies, reused across calls.
    windows: Mutex<attention_window::WindowScratch>,
    /// A pass's activation buffers, reused across passes.
    acts: Mutex<HostActs>,
}

impl CpuBackend {
    /// A backend using `threads` threads (0: every core) at the best instruction set available.
    pub fn new(threads: usize) -> CpuBackend {
        CpuBackend::with_isa(threads, Isa::detect())
    }

    /// As `new`, at a given instruction-set level (tests and benchmarks compare levels).
    ///
    /// # Panics
    /// When this CPU does not support `isa`.
    pub fn with_isa(threads: usize, isa: Isa) -> CpuBackend {
        assert!(Isa::available().contains(&isa), "this CPU does not support {}", isa.name());
        CpuBackend {
            pool: Pool::new(threads),
            isa,
            xq: Mutex::new(Scratch::default()),
            windows: Mutex::default(),
            acts: Mutex::default(),
        }
    }

    pub fn threads(&self) -> usize {
        self.pool.threads()
    }
    pub fn isa(&self) -> Isa {
        self.isa
    }
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// [`Backend::matmul`] by dequantizing each weight row and dotting in f32, whatever the type:
    /// the path the types without integer kernels take, kept for benchmarks to compare those
    /// kernels with, on a matrix in the file's layout. The model never calls it.
    pub fn matmul_dequantized(&self, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
        let mut xq = self.xq.lock().unwrap_or_else(|e| e.into_inner());
        matmul::matmul_many(&self.pool, self.isa, &[w], x, n, &mut [out], &mut xq, Path::Float);
    }
}

impl Backend for CpuBackend {
    fn matmul(&self, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
        let mut xq = self.xq.lock().unwrap_or_else(|e| e.into_inner());
        matmul::matmul(&self.pool, self.isa, w, x, n, out, &mut xq);
    }

    fn matmul_many(&self, ws: &[WeightRef<'_>], x: &[f32], n: usize, outs: &mut [&mut [f32]]) {
        let mut xq = self.xq.lock().unwrap_or_else(|e| e.into_inner());
        matmul::matmul_many(&self.pool, self.isa, ws, x, n, outs, &mut xq, Path::Best);
    }

    /// Q5_0 as the Q8_0 it widens to exactly (its integer kernels), at every level; then into
    /// [`Layout::Rows8`] where this level has kernels for it: Q4_0, Q4_1, Q8_0, Q4_K and Q6_K
    /// on AVX2 and AVX-512. The portable fallback reads rows as they are.
    fn upload(&self, w: WeightRef<'_>) -> Option<Upload> {
        if w.layout != Layout::Rows {
            return None;
        }
        let widened = (w.dtype == DType::Q5_0).then(|| block_q::widen_q5_0(w.bytes));
        let dtype = if widened.is_some() { DType::Q8_0 } else { w.dtype };
        let bytes = widened.as_deref().unwrap_or(w.bytes);
        if matches!(self.isa, Isa::Avx2 | Isa::Avx512) {
            if let Some(bytes) = repack::repack(dtype, bytes, w.rows, w.cols) {
                return Some(Upload { dtype, layout: Layout::Rows8, bytes });
            }
        }
        widened.map(|bytes| Upload { dtype, layout: Layout::Rows, bytes })
    }

    fn begin(&self, shape: PassShape, positions: &[usize]) -> Box<dyn Pass + '_> {
        let acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        Box::new(HostPass::new(self, acts, shape, positions))
    }

    fn rms_norm(&self, x: &mut [f32], weight: &[f32], eps: f32) {
        ops::rms_norm(x, weight, eps);
    }

    fn rope(&self, x: &mut [f32], n_heads: usize, head_dim: usize, positions: &[usize], rope: Rope) {
        ops::rope(x, n_heads, head_dim, positions, rope);
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "swiglu: gate and up differ in length");
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: both x86 SIMD levels imply AVX2, FMA and F16C (detected); lengths checked.
            Isa::Avx2 | Isa::Avx512 => unsafe { kern_avx2_f32::swiglu(gate, up) },
            _ => ops::swiglu(gate, up),
        }
    }

    fn geglu(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "geglu: gate and up differ in length");
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: both x86 SIMD levels imply AVX2, FMA and F16C (detected); lengths checked.
            Isa::Avx2 | Isa::Avx512 => unsafe { kern_avx2_f32::geglu(gate, up) },
            _ => ops::geglu(gate, up),
        }
    }

    fn attention(&self, mut seq: AttnSeq<'_>, heads: Heads, scale: f32) {
        match seq.window {
            None => attention_tasks::attention(&self.pool, self.isa, seq, heads, scale),
            Some(_) => self.attention_batch(std::slice::from_mut(&mut seq), heads, scale),
        }
    }

    fn kv_format(&self, head_dim: usize) -> KvFormat {
        attention::kv_format(self.isa, head_dim)
    }

    fn attention_batch(&self, seqs: &mut [AttnSeq<'_>], heads: Heads, scale: f32) {
        if seqs.iter().all(|s| s.window.is_none()) {
            return attention_tasks::attention_batch(&self.pool, self.isa, seqs, heads, scale);
        }
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        attention_window::attention_batch(&self.pool, self.isa, seqs, heads, scale, &mut windows);
    }
}
