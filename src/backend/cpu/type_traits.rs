//! One table entry per weight type, as ggml's `type_traits_cpu`: how to decode a row, how to
//! encode one, and which integer-dot kernels matmul runs on it (those of the 32-value blocks,
//! those of the K-quants, or none). Built from the block
//! markers, so that the sizes and functions come from one place per type.

use super::block::{Block, IntBlock, Quantize};
use super::block_float::{BlockBF16, BlockF16, BlockF32};
use super::block_k::{BlockQ4K, BlockQ5K, BlockQ6K};
use super::block_q::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0};
use super::kern_scalar;
use super::kern_scalar_k;
use super::kernel_io::{KKind, QKind};
use super::quantized_activations::QuantRows;
use super::quantized_activations_k::QuantRowsK;
use crate::backend::DType;

/// Decodes a whole number of blocks into their values (the lengths agree; [`dequantize_row`]
/// checks).
pub type DequantizeFn = fn(&[u8], &mut [f32]);
/// Appends the encoding of a whole number of blocks of values.
pub type QuantizeFn = fn(&[f32], &mut Vec<u8>);

/// What the CPU backend knows of a weight type.
pub struct TypeTraits {
    pub dtype: DType,
    pub dequantize: DequantizeFn,
    /// `None` for the K-quants.
    pub quantize: Option<QuantizeFn>,
    /// The integer-dot path of the 32-value types (activations as `QuantRows`).
    pub int_dot: Option<IntDot>,
    /// The integer-dot path of the K-quants (activations as `QuantRowsK`). With neither, matmul
    /// dequantizes a weight row and dots in f32.
    pub k_dot: Option<KDot>,
}

/// The integer-dot path of a type: its kernel family, and the portable row dot.
#[derive(Clone, Copy)]
pub struct IntDot {
    pub kind: QKind,
    /// The dot of one weight row with activation row `i`.
    pub scalar: fn(&[u8], &QuantRows, usize) -> f32,
}

/// The integer-dot path of a K-quant: its kernel family, and the portable row dot.
#[derive(Clone, Copy)]
pub struct KDot {
    pub kind: KKind,
    /// The dot of one weight row with activation row `i`.
    pub scalar: fn(&[u8], &QuantRowsK, usize) -> f32,
}

impl TypeTraits {
    const fn of<B: Block>() -> TypeTraits {
        assert!(
            B::LEN == B::DTYPE.block_len() && B::BYTES == B::DTYPE.block_bytes(),
            "a block marker disagrees with its DType on the block size"
        );
        TypeTraits { dtype: B::DTYPE, dequantize: dequantize_blocks::<B>, quantize: None, int_dot: None, k_dot: None }
    }

    const fn quantized<B: Quantize>() -> TypeTraits {
        TypeTraits { quantize: Some(quantize_blocks::<B>), ..TypeTraits::of::<B>() }
    }

    const fn int_dot<B: IntBlock + Quantize>() -> TypeTraits {
        TypeTraits {
            int_dot: Some(IntDot { kind: B::KIND, scalar: kern_scalar::vec_dot::<B> }),
            ..TypeTraits::quantized::<B>()
        }
    }

    const fn k_dot<B: Block>(kind: KKind, scalar: fn(&[u8], &QuantRowsK, usize) -> f32) -> TypeTraits {
        TypeTraits { k_dot: Some(KDot { kind, scalar }), ..TypeTraits::of::<B>() }
    }
}

static F32: TypeTraits = TypeTraits::quantized::<BlockF32>();
static F16: TypeTraits = TypeTraits::quantized::<BlockF16>();
static BF16: TypeTraits = TypeTraits::quantized::<BlockBF16>();
static Q4_0: TypeTraits = TypeTraits::int_dot::<BlockQ4_0>();
static Q4_1: TypeTraits = TypeTraits::int_dot::<BlockQ4_1>();
// Matmul reads Q5_0 only as the Q8_0 the backend uploads it as (`block_q::widen_q5_0`).
static Q5_0: TypeTraits = TypeTraits::quantized::<BlockQ5_0>();
static Q8_0: TypeTraits = TypeTraits::int_dot::<BlockQ8_0>();
static Q4K: TypeTraits = TypeTraits::k_dot::<BlockQ4K>(KKind::Q4K, kern_scalar_k::vec_dot_q4k);
static Q5K: TypeTraits = TypeTraits::of::<BlockQ5K>();
static Q6K: TypeTraits = TypeTraits::k_dot::<BlockQ6K>(KKind::Q6K, kern_scalar_k::vec_dot_q6k);

/// The table entry of `dtype`.
pub fn type_traits(dtype: DType) -> &'static TypeTraits {
    match dtype {
        DType::F32 => &F32,
        DType::F16 => &F16,
        DType::BF16 => &BF16,
        DType::Q4_0 => &Q4_0,
        DType::Q4_1 => &Q4_1,
        DType::Q5_0 => &Q5_0,
        DType::Q8_0 => &Q8_0,
        DType::Q4K => &Q4K,
        DType::Q5K => &Q5K,
        DType::Q6K => &Q6K,
    }
}

fn dequantize_blocks<B: Block>(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes.chunks_exact(B::BYTES).zip(out.chunks_exact_mut(B::LEN)) {
        B::dequantize(b, o);
    }
}

fn quantize_blocks<B: Quantize>(x: &[f32], out: &mut Vec<u8>) {
    x.chunks_exact(B::LEN).for_each(|b| B::quantize(b, out));
}

/// Dequantizes `out.len()` values from `bytes`, which must hold exactly that many values of
/// `dtype` (a whole number of blocks). Bit-exact with ggml (and the `gguf` Python package):
/// these are the reference for the fast kernels and the path of the types without them.
///
/// # Panics
/// When `bytes.len()` does not match `out.len()` values of `dtype`: the callers (matmul and the
/// model loader) check shapes against the file once, so a mismatch here is a bug.
pub fn dequantize_row(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let expected = dtype.bytes_for(out.len());
    assert_eq!(expected, Some(bytes.len()), "{dtype}: {} bytes for {} values", bytes.len(), out.len());
    (type_traits(dtype).dequantize)(bytes, out)
}

/// Encodes `x` (a whole number of blocks) as `dtype`, as ggml's `quantize_row_*_ref`: used to
/// make test and benchmark matrices, and to convert small tensors at load time. `None` for the
/// K-quants.
pub fn quantize_row(dtype: DType, x: &[f32]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(dtype.bytes_for(x.len())?);
    (type_traits(dtype).quantize?)(x, &mut out);
    Some(out)
}

#[cfg(test)]
#[path = "type_traits_tests.rs"]
mod tests;
