//! GGUF (llama.cpp's model format) v2 and v3: the header parser over plain bytes (fuzzable, and
//! used on the memory map) and [`GgufFile`], which maps a file and hands out zero-copy tensors.
//!
//! Layout (little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata count, the
//! metadata key/values, the tensor infos, padding to `general.alignment`, then the tensor data,
//! where each tensor info's offset points (relative to the start of the data section).
//!
//! Every count and length is checked against the bytes that remain before anything is
//! allocated for it, so a corrupt header costs at most a small multiple of the file's size.

use super::error::ModelError;
use super::metadata::{MetaValue, Metadata};
use super::tensor::{Storage, Tensor};
use super::tensor_set::TensorSet;
use crate::backend::DType;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Tensor data alignment when the file does not set `general.alignment` (GGUF spec).
pub const DEFAULT_ALIGNMENT: usize = 32;
/// ggml tensors have at most 4 dimensions (GGML_MAX_DIMS).
pub const MAX_DIMS: u32 = 4;
/// Nesting depth of arrays of arrays; bounds the parser's recursion on a crafted file.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Metadata values in the whole file, array elements included. A real model has about 1M
/// (vocabulary, scores, token types, merges of a 256k vocabulary); each value costs ~32 bytes
/// in memory, so this caps metadata memory near 256 MiB whatever the file claims.
pub const MAX_METADATA_VALUES: u64 = 1 << 23;
/// Metadata keys are at most 65535 bytes (GGUF spec, "gguf_string_t" for keys).
pub const MAX_KEY_LEN: u64 = 65_535;

// Value type ids of GGUF metadata (GGUF spec, `gguf_metadata_value_type`).
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// The smallest encoding of one value of a type: what an array of `n` such values must at
/// least occupy in the file. `None` for an unknown type.
fn min_value_size(ty: u32) -> Option<u64> {
    Some(match ty {
        T_U8 | T_I8 | T_BOOL => 1,
        T_U16 | T_I16 => 2,
        T_U32 | T_I32 | T_F32 => 4,
        T_U64 | T_I64 | T_F64 => 8,
        T_STRING => 8,
        T_ARRAY => 12,
        _ => return None,
    })
}

/// One tensor as the header describes it, checked against the bytes it was parsed from.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Outermost first (GGUF stores innermost first; reversed here).
    pub shape: Vec<usize>,
    /// Absolute byte offset of the data in the file.
    pub offset: usize,
    pub len: usize,
}

#[derive(Clone, Debug)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: Metadata,
    pub alignment: usize,
    /// Absolute offset of the tensor data section.
    pub data_offset: usize,
    pub tensors: Vec<TensorInfo>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    file: &'a Path,
    /// Metadata values still allowed (see [`MAX_METADATA_VALUES`]).
    budget: u64,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn truncated(&self, expected: String) -> ModelError {
        ModelError::Truncated { file: self.file.to_path_buf(), offset: self.pos as u64, expected }
    }

    fn corrupt(&self, offset: usize, problem: String) -> ModelError {
        ModelError::Corrupt { file: self.file.to_path_buf(), offset: offset as u64, problem }
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], ModelError> {
        if (n as u64) > self.remaining() {
            return Err(self.truncated(format!("{} ({n} bytes)", what())));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], ModelError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes.
    fn string(&mut self, max: u64, what: &dyn Fn() -> String) -> Result<String, ModelError> {
        let at = self.pos;
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > max {
            return Err(self.too_large(at, format!("length of {}", what()), len, max));
        }
        if len > self.remaining() {
            return Err(self.truncated(format!("{} ({len} bytes)", what())));
        }
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| self.corrupt(at + 8, format!("{} is not valid UTF-8 ({e})", what())))
    }

    fn too_large(&self, at: usize, what: String, value: u64, limit: u64) -> ModelError {
        ModelError::TooLarge { file: self.file.to_path_buf(), offset: at as u64, what, value, limit }
    }

    fn check_budget(&self, n: u64, at: usize) -> Result<(), ModelError> {
        if n > self.budget {
            let wanted = (MAX_METADATA_VALUES - self.budget).saturating_add(n);
            return Err(self.too_large(
                at,
                "number of metadata values in the file".into(),
                wanted,
                MAX_METADATA_VALUES,
            ));
        }
        Ok(())
    }

    fn spend(&mut self, n: u64, at: usize) -> Result<(), ModelError> {
        self.check_budget(n, at)?;
        self.budget -= n;
        Ok(())
    }

    fn value(&mut self, ty: u32, depth: u32, key: &str) -> Result<MetaValue, ModelError> {
        let at = self.pos;
        let what = || format!("value of metadata key {key:?}");
        self.spend(1, at)?;
        Ok(match ty {
            T_U8 => MetaValue::U8(self.array::<1>(&what)?[0]),
            T_I8 => MetaValue::I8(self.array::<1>(&what)?[0] as i8),
            T_U16 => MetaValue::U16(u16::from_le_bytes(self.array(&what)?)),
            T_I16 => MetaValue::I16(i16::from_le_bytes(self.array(&what)?)),
            T_U32 => MetaValue::U32(u32::from_le_bytes(self.array(&what)?)),
            T_I32 => MetaValue::I32(i32::from_le_bytes(self.array(&what)?)),
            T_F32 => MetaValue::F32(f32::from_le_bytes(self.array(&what)?)),
            T_U64 => MetaValue::U64(u64::from_le_bytes(self.array(&what)?)),
            T_I64 => MetaValue::I64(i64::from_le_bytes(self.array(&what)?)),
            T_F64 => MetaValue::F64(f64::from_le_bytes(self.array(&what)?)),
            T_BOOL => match self.array::<1>(&what)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(
                        self.corrupt(at, format!("boolean value of metadata key {key:?} is {b}, expected 0 or 1"))
                    )
                }
            },
            T_STRING => MetaValue::String(self.string(u64::MAX, &what)?),
            T_ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.too_large(
                        at,
                        format!("array nesting depth of metadata key {key:?}"),
                        depth as u64 + 1,
                        MAX_ARRAY_DEPTH as u64,
                    ));
                }
                let elem_ty = self.u32(&|| format!("element type of array {key:?}"))?;
                let Some(min) = min_value_size(elem_ty) else {
                    return Err(self.corrupt(at, format!("array {key:?} has unknown element type {elem_ty}")));
                };
                let count_at = self.pos;
                let count = self.u64(&|| format!("length of array {key:?}"))?;
                // Checked before allocating: `count` elements need at least `count * min` bytes.
                let fits = self.remaining() / min;
                if count > fits {
                    return Err(self.too_large(
                        count_at,
                        format!(
                            "length of array {key:?} (elements of at least {min} bytes in the {} bytes left)",
                            self.remaining()
                        ),
                        count,
                        fits,
                    ));
                }
                self.check_budget(count, count_at)?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem_ty, depth + 1, key)?);
                }
                MetaValue::Array(items)
            }
            other => return Err(self.corrupt(at, format!("metadata key {key:?} has unknown value type {other}"))),
        })
    }
}

/// Rounds `x` up to a multiple of `align` (a power of two); `None` on overflow.
fn align_up(x: usize, align: usize) -> Option<usize> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// Parses and checks a whole GGUF header against `bytes`, the complete file. `file` only names
/// the file in errors. Never panics, whatever the bytes.
pub fn parse_header(bytes: &[u8], file: &Path) -> Result<GgufHeader, ModelError> {
    let mut r = Reader { buf: bytes, pos: 0, file, budget: MAX_METADATA_VALUES };
    let magic: [u8; 4] = r.array(&|| "the GGUF magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(ModelError::BadMagic { file: file.to_path_buf(), found: magic });
    }
    let version = r.u32(&|| "the GGUF version".into())?;
    if version != 2 && version != 3 {
        return Err(ModelError::UnsupportedVersion { file: file.to_path_buf(), version });
    }
    let at = r.pos;
    let n_tensors = r.u64(&|| "the tensor count".into())?;
    let n_kv = r.u64(&|| "the metadata count".into())?;
    // Each key/value takes at least 13 bytes (key length, type, one byte of value), each tensor
    // info at least 24 (name length, dimension count, type, offset).
    let room = r.remaining();
    if n_kv > room / 13 {
        return Err(r.too_large(at + 8, "metadata count".into(), n_kv, room / 13));
    }
    if n_tensors > room / 24 {
        return Err(r.too_large(at, "tensor count".into(), n_tensors, room / 24));
    }

    let mut metadata = Metadata::default();
    for i in 0..n_kv {
        let key = r.string(MAX_KEY_LEN, &|| format!("key of metadata entry {i}"))?;
        let ty = r.u32(&|| format!("value type of metadata key {key:?}"))?;
        let value = r.value(ty, 0, &key)?;
        metadata.entries.push((key, value));
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= u32::MAX as u64 => a as usize,
            _ => {
                return Err(ModelError::BadValue {
                    file: file.to_path_buf(),
                    key: "general.alignment".into(),
                    problem: format!("{v:?} is not a power of two"),
                });
            }
        },
    };

    let mut raw = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = r.string(u64::MAX, &|| format!("name of tensor {i}"))?;
        let dims_at = r.pos;
        let n_dims = r.u32(&|| format!("dimension count of tensor {name:?}"))?;
        if n_dims > MAX_DIMS {
            return Err(r.too_large(
                dims_at,
                format!("dimension count of tensor {name:?}"),
                n_dims as u64,
                MAX_DIMS as u64,
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(r.u64(&|| format!("dimension {d} of tensor {name:?}"))?);
        }
        let type_id = r.u32(&|| format!("type of tensor {name:?}"))?;
        let offset_at = r.pos;
        let offset = r.u64(&|| format!("data offset of tensor {name:?}"))?;
        raw.push((name, dims, dims_at, type_id, offset, offset_at));
    }

    let data_offset =
        align_up(r.pos, alignment).ok_or_else(|| r.corrupt(r.pos, "data section offset overflows".into()))?;
    let mut tensors = Vec::with_capacity(raw.len());
    for (name, dims, dims_at, type_id, offset, offset_at) in raw {
        let Some(dtype) = DType::from_ggml_id(type_id) else {
            return Err(ModelError::UnsupportedTensorType {
                file: file.to_path_buf(),
                tensor: name,
                type_id: match DType::ggml_name(type_id) {
                    Some(n) => format!("{n} (ggml type {type_id})"),
                    None => format!("id {type_id}"),
                },
            });
        };
        // The product of the non-zero dimensions must fit: then no partial product, in any
        // order (Tensor::numel multiplies outermost first), can overflow, even with a zero.
        let overflow = || r.corrupt(dims_at, format!("dimensions {dims:?} of tensor {name:?} overflow"));
        let mut nonzero: usize = 1;
        for &d in &dims {
            let d = usize::try_from(d).map_err(|_| overflow())?;
            nonzero = nonzero.checked_mul(d.max(1)).filter(|&n| n <= i64::MAX as usize).ok_or_else(overflow)?;
        }
        let numel = if dims.contains(&0) { 0 } else { nonzero };
        let inner = dims.first().copied().unwrap_or(1) as usize;
        if !inner.is_multiple_of(dtype.block_len()) {
            return Err(r.corrupt(
                dims_at,
                format!(
                    "tensor {name:?} of type {dtype} has rows of {inner} values, not a multiple of its block size {}",
                    dtype.block_len()
                ),
            ));
        }
        let len = (numel / dtype.block_len())
            .checked_mul(dtype.block_bytes())
            .ok_or_else(|| r.corrupt(dims_at, format!("size of tensor {name:?} overflows")))?;
        if !offset.is_multiple_of(alignment as u64) {
            return Err(r.corrupt(
                offset_at,
                format!("data offset {offset} of tensor {name:?} is not a multiple of the alignment {alignment}"),
            ));
        }
        let start = (data_offset as u64).checked_add(offset);
        let end = start.and_then(|s| s.checked_add(len as u64));
        match (start, end) {
            (Some(s), Some(e)) if e <= bytes.len() as u64 => {
                let shape = dims.iter().rev().map(|&d| d as usize).collect();
                tensors.push(TensorInfo { name, dtype, shape, offset: s as usize, len });
            }
            _ => {
                return Err(ModelError::DataOutOfBounds {
                    file: file.to_path_buf(),
                    tensor: name,
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len: bytes.len() as u64,
                });
            }
        }
    }
    Ok(GgufHeader { version, metadata, alignment, data_offset, tensors })
}

/// A GGUF file, mapped into memory; its tensors are views into the map.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: Metadata,
    pub alignment: usize,
    pub data_offset: usize,
    pub tensors: TensorSet,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, ModelError> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
        // SAFETY: the map is read-only and we never hand out a mutable view. Model files are
        // treated as immutable while served: if another process truncated or rewrote the file
        // under us, reads could fault or see new bytes; that is the documented contract of
        // serving from a memory map (llama.cpp makes the same assumption).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
        GgufFile::from_storage(path.to_path_buf(), Arc::new(Storage::Mmap(map)))
    }

    /// Parses a GGUF image held in memory (tests, fuzzing); `path` only names it in errors.
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, ModelError> {
        GgufFile::from_storage(path.into(), Arc::new(Storage::Owned(bytes)))
    }

    fn from_storage(path: PathBuf, storage: Arc<Storage>) -> Result<GgufFile, ModelError> {
        let header = parse_header(storage.bytes(), &path)?;
        let mut tensors = TensorSet::new();
        for t in header.tensors {
            let tensor = Tensor::new(t.name, t.dtype, t.shape, storage.clone(), t.offset, t.len);
            tensors.insert(tensor, &path)?;
        }
        Ok(GgufFile {
            path,
            version: header.version,
            metadata: header.metadata,
            alignment: header.alignment,
            data_offset: header.data_offset,
            tensors,
        })
    }

    /// `general.architecture`, e.g. `llama`.
    pub fn architecture(&self) -> Option<&str> {
        self.metadata.get_str("general.architecture")
    }
}

#[cfg(test)]
#[path = "gguf_tests.rs"]
mod tests;
