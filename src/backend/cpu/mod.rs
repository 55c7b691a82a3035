//! The CPU backend: quantized kernels with runtime SIMD dispatch and a worker pool.

pub mod dequant;
pub mod dequant_k;
pub mod float16;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod q8act;
pub mod quantize;

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod drive;
#[cfg(target_arch = "x86_64")]
mod kern_avx2;
#[cfg(target_arch = "x86_64")]
mod kern_avx512;
mod kern_scalar;
#[cfg(test)]
mod test_util;

use crate::backend::{AttnSeq, Backend, Heads, Rope, WeightRef};
use pool::Pool;
use q8act::QuantRows;
use std::sync::Mutex;

/// The instruction-set level the kernels run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust; the reference the others are tested against.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/VNNI on top of `Avx2`.
    Avx512,
}

impl Isa {
    /// The best level this CPU supports.
    pub fn detect() -> Isa {
        *Isa::available().last().unwrap_or(&Isa::Scalar)
    }

    /// Every level this CPU supports, from `Scalar` up.
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            if avx2 {
                v.push(Isa::Avx2);
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    v.push(Isa::Avx512);
                }
            }
        }
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

/// The CPU implementation of [`Backend`]: owns the worker pool and the scratch buffers.
pub struct CpuBackend {
    pool: Pool,
    isa: Isa,
    /// Quantized activations, reused across calls (only the calling thread quantizes).
    xq: Mutex<QuantRows>,
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
        assert!(
            Isa::available().contains(&isa),
            "this CPU does not support {}",
            isa.name()
        );
        CpuBackend {
            pool: Pool::new(threads),
            isa,
            xq: Mutex::new(QuantRows::new()),
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
}

impl Backend for CpuBackend {
    fn matmul(&self, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32]) {
        let mut xq = self.xq.lock().unwrap_or_else(|e| e.into_inner());
        matmul::matmul(&self.pool, self.isa, w, x, n, out, &mut xq);
    }

    fn matmul_many(&self, ws: &[WeightRef<'_>], x: &[f32], n: usize, outs: &mut [&mut [f32]]) {
        let mut xq = self.xq.lock().unwrap_or_else(|e| e.into_inner());
        matmul::matmul_many(&self.pool, self.isa, ws, x, n, outs, &mut xq);
    }

    fn rms_norm(&self, x: &mut [f32], weight: &[f32], eps: f32) {
        ops::rms_norm(x, weight, eps);
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        positions: &[usize],
        rope: Rope,
    ) {
        ops::rope(x, n_heads, head_dim, positions, rope);
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        ops::swiglu(gate, up);
    }

    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        heads: Heads,
        start_pos: usize,
        n_q: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        ops::attention(
            &self.pool, self.isa, q, keys, values, heads, start_pos, n_q, scale, out,
        );
    }

    fn attention_batch(&self, seqs: &mut [AttnSeq<'_>], heads: Heads, scale: f32) {
        ops::attention_batch(&self.pool, self.isa, seqs, heads, scale);
    }
}
