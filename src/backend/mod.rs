//! Kernels behind the [`Backend`] trait, which `model/decoder.rs` runs a layer's description on.
//! `cpu` is the one backend today (a GPU backend on wgpu is the next; see the model-seam notes in
//! docs/architecture.md). The model layer holds weights as [`WeightRef`]s (views of the file's
//! bytes in their on-disk encoding) and activations as plain row-major `f32` slices.

pub mod cpu;
pub mod dtype;
pub mod gpu;
pub mod kv_buf;
pub mod kv_layout;
pub mod math;
pub mod pass;

pub use cpu::CpuBackend;
pub use dtype::DType;
pub use gpu::adapter::{BackendChoice, BackendInfo, GpuError};
pub use kv_buf::KvBuf;
pub use kv_layout::{
    key_index, store_keys, store_values, stored_keys, stored_values, KvFormat, KEY_GROUP, TILE_KEY_GROUP,
};
pub use pass::{Act, AttendSeq, DeviceKv, Glu, LayerPass, Pass, PassShape};
use std::any::Any;
use std::sync::Arc;

/// The backend `choice` asks for, with `threads` CPU threads, and what was chosen and why. An
/// error where `--backend gpu` finds no usable adapter.
pub fn open(
    choice: gpu::adapter::BackendChoice,
    threads: usize,
) -> Result<(Box<dyn Backend + Sync>, BackendInfo), GpuError> {
    match gpu::adapter::pick(choice)? {
        Some((adapter, reason)) => {
            let be = gpu::GpuBackend::new(&adapter, reason, threads)?;
            let info = be.info().clone();
            Ok((Box::new(be), info))
        }
        None => {
            let be = CpuBackend::new(threads);
            let info = BackendInfo {
                backend: "cpu",
                adapter: format!(
                    "CPU at {}, {} thread{}",
                    be.isa().name(),
                    be.threads(),
                    if be.threads() == 1 { "" } else { "s" }
                ),
                driver: String::new(),
                reason: gpu::adapter::cpu_reason(choice),
            };
            Ok((Box::new(be), info))
        }
    }
}

/// A backend's own copy of a weight on its device ([`Backend::upload_device`]), which only that
/// backend reads.
pub type DeviceHandle = Arc<dyn Any + Send + Sync>;

/// A weight matrix: `rows` rows of `cols` values, each row encoded as `dtype` (`cols /
/// block_len` blocks), laid out as `layout` says; and the device's copy, where a device backend
/// made one.
#[derive(Clone, Copy, Debug)]
pub struct WeightRef<'a> {
    pub dtype: DType,
    pub bytes: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
    pub device: Option<&'a DeviceHandle>,
}

/// A vector of weights (a norm, a bias) in f32, and the device's copy where there is one.
#[derive(Clone, Default)]
pub struct Vector {
    pub values: Vec<f32>,
    pub device: Option<DeviceHandle>,
}

impl Vector {
    /// `values`, with the device copy `backend` makes of them (if it makes one).
    pub fn new(values: Vec<f32>, backend: &dyn Backend) -> Vector {
        let device = backend.upload_vector(&values);
        Vector { values, device }
    }

    pub fn as_ref(&self) -> VectorRef<'_> {
        VectorRef { values: &self.values, device: self.device.as_ref() }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl std::fmt::Debug for Vector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vector({} values{})", self.values.len(), if self.device.is_some() { ", on device" } else { "" })
    }
}

/// A borrowed [`Vector`].
#[derive(Clone, Copy)]
pub struct VectorRef<'a> {
    pub values: &'a [f32],
    pub device: Option<&'a DeviceHandle>,
}

/// A weight matrix as a backend holds it ([`Backend::upload`]): the same values, maybe in
/// another type or layout.
pub struct Upload {
    pub dtype: DType,
    pub layout: Layout,
    pub bytes: Vec<u8>,
}

/// How a weight matrix's blocks are ordered in its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// As in the model file: rows back to back.
    #[default]
    Rows,
    /// Made at load time by [`Backend::upload`]: groups of eight rows with their blocks
    /// interleaved, block column by block column (`backend/cpu/repack.rs`). Same byte count.
    Rows8,
}

/// Why bytes cannot be viewed as a weight matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightError {
    /// A row must be a whole number of blocks.
    PartialBlock { dtype: DType, cols: usize, block_len: usize },
    /// The byte length must be exactly `rows * row_bytes`.
    WrongSize { dtype: DType, rows: usize, cols: usize, expected: usize, got: usize },
}

impl std::fmt::Display for WeightError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WeightError::PartialBlock { dtype, cols, block_len } => {
                write!(f, "{dtype} rows of {cols} values are not a whole number of {block_len}-value blocks")
            }
            WeightError::WrongSize { dtype, rows, cols, expected, got } => {
                write!(f, "{dtype} matrix {rows}x{cols} needs {expected} bytes, got {got}")
            }
        }
    }
}

impl std::error::Error for WeightError {}

impl<'a> WeightRef<'a> {
    /// Checks that `bytes` is exactly a `rows x cols` matrix of `dtype`.
    pub fn new(dtype: DType, bytes: &'a [u8], rows: usize, cols: usize) -> Result<WeightRef<'a>, WeightError> {
        let row_bytes =
            dtype.bytes_for(cols).ok_or(WeightError::PartialBlock { dtype, cols, block_len: dtype.block_len() })?;
        let expected = row_bytes.saturating_mul(rows);
        if expected != bytes.len() {
            return Err(WeightError::WrongSize { dtype, rows, cols, expected, got: bytes.len() });
        }
        Ok(WeightRef { dtype, bytes, rows, cols, layout: Layout::Rows, device: None })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// The encoded bytes of row `r`; only in the file's layout (`Layout::Rows`).
    pub fn row(&self, r: usize) -> &'a [u8] {
        debug_assert_eq!(self.layout, Layout::Rows, "rows of an interleaved matrix are not contiguous");
        let rb = self.row_bytes();
        &self.bytes[r * rb..(r + 1) * rb]
    }
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Adjacent pairs `(2i, 2i+1)`: llama.cpp's "normal" mode, used for llama GGUF files (whose
    /// Q/K weights the converter permuted to match).
    Interleaved,
    /// Halves `(i, i + head_dim/2)`: GPT-NeoX / Hugging Face `rotate_half`, used by Qwen.
    NeoX,
}

/// Rotary embedding settings of a model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub layout: RopeLayout,
    /// Base of the frequencies (`rope_theta`, 10000 for the original llama).
    pub theta: f32,
    /// Dimensions rotated per head (the whole head for llama and Qwen).
    pub dims: usize,
}

/// Head geometry for attention: `n_heads` query heads share `n_kv_heads` key/value heads (GQA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// What a device backend has done since it started, and whether it still can: the counters
/// behind `bench`'s per-token figures and the `mtplx_gpu_*` series.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Kernel dispatches recorded.
    pub dispatches: u64,
    /// Command buffers submitted.
    pub submits: u64,
    /// Bytes copied back from the device to the host.
    pub read_bytes: u64,
    /// The first fault the device reported (lost, out of memory, a validation error): a device
    /// that failed once computes nothing more.
    pub fault: Option<String>,
}

/// The operations a forward pass needs. Activations are row-major `f32`, one row per token.
/// Methods panic when slice lengths disagree with the stated shapes: the model checks shapes
/// against the file once at load time, so a mismatch here is a bug, not bad input.
pub trait Backend: Send {
    /// `out[i * w.rows + r] = dot(row r of w, x[i * w.cols..])` for the `n` rows of `x`.
    fn matmul(&self, w: WeightRef<'_>, x: &[f32], n: usize, out: &mut [f32]);

    /// `matmul` of several matrices with the same `cols` on the same `x` (fused Q/K/V, or
    /// gate/up): `outs[m]` gets `n` rows of `ws[m].rows`. Cheaper than separate calls (one
    /// activation quantization, one dispatch of the worker pool).
    fn matmul_many(&self, ws: &[WeightRef<'_>], x: &[f32], n: usize, outs: &mut [&mut [f32]]) {
        assert_eq!(ws.len(), outs.len(), "matmul_many: {} matrices but {} outputs", ws.len(), outs.len());
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.matmul(*w, x, n, out);
        }
    }

    /// `w` (in the file's layout) as this backend's kernels read it best, when that is not the
    /// file's encoding: another layout, or another type that holds the same values. `None`
    /// keeps the file's bytes. Called once per matrix at load time.
    fn upload(&self, w: WeightRef<'_>) -> Option<Upload> {
        let _ = w;
        None
    }

    /// A device backend's own copy of `w` (after [`Backend::upload`]), which its passes read;
    /// `None` for a backend that reads host memory.
    fn upload_device(&self, w: WeightRef<'_>) -> Option<DeviceHandle> {
        let _ = w;
        None
    }

    /// Whether this backend can hold and read `w` (its type, its size); the error says why not.
    fn can_hold(&self, w: WeightRef<'_>) -> Result<(), String> {
        let _ = w;
        Ok(())
    }

    /// [`Backend::upload_device`] for a vector of weights.
    fn upload_vector(&self, v: &[f32]) -> Option<DeviceHandle> {
        let _ = v;
        None
    }

    /// The device's memory bandwidth in bytes a second, measured now by a copy kernel (bytes
    /// read plus bytes written), for `bench` to set decode speed against; `None` on the CPU.
    fn copy_bandwidth(&self) -> Option<f64> {
        None
    }

    /// A device backend's counters and fault; `None` for a backend on host memory.
    fn device_stats(&self) -> Option<DeviceStats> {
        None
    }

    /// Begins a forward pass of `shape.rows` rows, row `i` at `positions[i]`. One pass runs at a
    /// time: a second `begin` waits for the first pass to be dropped.
    fn begin(&self, shape: PassShape, positions: &[usize]) -> Box<dyn Pass + '_>;

    /// Each row of `x` (rows of `weight.len()` values) scaled to unit RMS, times `weight`.
    fn rms_norm(&self, x: &mut [f32], weight: &[f32], eps: f32);

    /// Rotates the heads of every row of `x` (rows of `n_heads * head_dim` values); row `i` is
    /// the token at `positions[i]`.
    fn rope(&self, x: &mut [f32], n_heads: usize, head_dim: usize, positions: &[usize], rope: Rope);

    /// `gate[k] = silu(gate[k]) * up[k]`.
    fn swiglu(&self, gate: &mut [f32], up: &[f32]);

    /// `gate[k] = gelu(gate[k]) * up[k]`, GELU in its tanh form (Gemma's `gelu_pytorch_tanh`).
    fn geglu(&self, gate: &mut [f32], up: &[f32]);

    /// Causal GQA attention of one sequence (see [`AttnSeq`], and its `window`) with `heads`,
    /// scores scaled by `scale`.
    fn attention(&self, seq: AttnSeq<'_>, heads: Heads, scale: f32);

    /// The cache format this backend's attention reads fastest for heads of `head_dim` (every
    /// backend reads [`KvFormat::F16`]).
    fn kv_format(&self, head_dim: usize) -> KvFormat {
        let _ = head_dim;
        KvFormat::F16
    }

    /// [`Backend::attention`] for every sequence of a batched step at once, so that a backend
    /// can spread all of them over its threads in one go. The default runs them one by one.
    fn attention_batch(&self, seqs: &mut [AttnSeq<'_>], heads: Heads, scale: f32) {
        for s in seqs.iter_mut() {
            self.attention(s.reborrow(), heads, scale);
        }
    }
}

/// One sequence's attention: `q` holds `n_q` rows of `heads.q_dim()`, the tokens at positions
/// `start_pos..start_pos + n_q`; `keys` and `values` (of `heads.kv_dim()` per position) are laid
/// out as `format` says ([`store_keys`], [`store_values`]: half the bytes of f32 for attention
/// to read), both holding at least positions `0..start_pos + n_q` (keys in whole groups, values
/// in whole pairs in bf16); `n_q` rows of `heads.q_dim()` are written to `out`.
pub struct AttnSeq<'a> {
    pub q: &'a [f32],
    pub keys: &'a [u16],
    pub values: &'a [u16],
    pub format: KvFormat,
    pub start_pos: usize,
    pub n_q: usize,
    pub out: &'a mut [f32],
    /// A sliding window's width: the row at position `p` sees keys `p + 1 - window..=p` only
    /// (every key from 0 when `None`).
    pub window: Option<usize>,
}

impl AttnSeq<'_> {
    /// The same sequence with a shorter borrow of `out`, to pass on while keeping this one.
    pub fn reborrow(&mut self) -> AttnSeq<'_> {
        AttnSeq {
            q: self.q,
            keys: self.keys,
            values: self.values,
            format: self.format,
            start_pos: self.start_pos,
            n_q: self.n_q,
            out: self.out,
            window: self.window,
        }
    }
}
