//! The block types as marker types that carry their layout (as candle's `GgmlType` does with
//! `BlockQ4_0`): [`Block`] for every weight type, [`Quantize`] for those we can encode, and
//! [`IntBlock`] for those the integer kernels read directly.
//!
//! The types themselves are in `block_float.rs`, `block_q.rs` and `block_k.rs`; `type_traits.rs`
//! turns them into one table entry per [`DType`], as ggml's `type_traits_cpu` does. Adding a
//! type: its marker and impls in a `block_*` file, its line in the table, its `DType` variant.
//! An integer-dot type also needs a [`QKind`] variant, its arm in `tile_driver!`, and, when its
//! layout is not one that [`IntBlock`]'s constants describe, a branch in each SIMD kernel.

use super::kernel_io::QKind;
use crate::backend::DType;

/// Values per block of the 32-wide ggml types (and of the quantized activations).
pub const QK: usize = 32;

/// A weight type's block: `LEN` values in `BYTES` bytes, laid out as ggml-common.h says.
pub trait Block {
    const DTYPE: DType;
    /// Values per block (1 for plain float types).
    const LEN: usize;
    /// Bytes per block.
    const BYTES: usize;

    /// Decodes one block (`BYTES` bytes) into `LEN` values, bit-exact with ggml's
    /// `dequantize_row_*` (the same operations in the same order).
    fn dequantize(block: &[u8], out: &mut [f32]);
}

/// A type we can encode, as ggml's reference `quantize_row_*_ref` does (the same rounding as the
/// `gguf` Python package). The K-quants need ggml's iterative search and have no encoder here.
pub trait Quantize: Block {
    /// Appends the encoding of `LEN` values (one block) to `out`.
    fn quantize(x: &[f32], out: &mut Vec<u8>);
}

/// How a block of an integer-dot type stores its weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Weights {
    /// Unsigned 4-bit values: value `j` in the low nibble of byte `j`, value `j + 16` in its
    /// high nibble.
    Nibbles,
    /// Signed 8-bit values, in order.
    Int8,
}

/// The term a block adds to each of its values beyond `d * q`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Offset {
    None,
    /// `c * d` (Q4_0 centres its nibbles with `c = -8`).
    TimesScale(f32),
    /// An f16 `m` stored right after the f16 scale `d` (Q4_1).
    Min,
}

/// A 32-value block that starts with its f16 scale `d` and whose rows the integer kernels dot
/// with the quantized activations directly. The constants describe the layout the SIMD
/// kernels unpack; `block_dot` is the portable reference they are tested against.
pub trait IntBlock: Block {
    const KIND: QKind;
    /// Byte offset of the weights in a block.
    const QS_AT: usize;
    const WEIGHTS: Weights;
    const OFFSET: Offset;

    /// The dot of one weight block with one block of quantized activations (`xq` the 32 int8
    /// values, `xd` their scale, `xs = xd * sum(xq)`).
    fn block_dot(block: &[u8], xq: &[i8], xd: f32, xs: f32) -> f32;
}
