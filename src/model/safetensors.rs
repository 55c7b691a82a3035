//! Hugging Face safetensors: one `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`; each file memory-mapped, its header parsed by the
//! `safetensors` crate, its tensors handed out as zero-copy views. Names stay HF names.

use super::error::ModelError;
use super::tensor::{Storage, Tensor};
use super::tensor_set::TensorSet;
use crate::backend::DType;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// JSON files we read whole (config.json, the shard index): far above any real one (a large
/// index is a few hundred KB), low enough that a wrong path cannot make us read gigabytes.
pub const MAX_JSON_BYTES: u64 = 64 << 20;

fn dtype_of(d: Dtype) -> Option<DType> {
    match d {
        Dtype::F32 => Some(DType::F32),
        Dtype::F16 => Some(DType::F16),
        Dtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}

/// Adds the tensors of one safetensors image to `set`. `file` only names it in errors. Never
/// panics, whatever the bytes.
pub fn add_tensors(storage: &Arc<Storage>, file: &Path, set: &mut TensorSet) -> Result<(), ModelError> {
    let bytes = storage.bytes();
    let (header_len, meta) = SafeTensors::read_metadata(bytes).map_err(|e| ModelError::Corrupt {
        file: file.to_path_buf(),
        offset: 0,
        problem: format!("invalid safetensors header: {e}"),
    })?;
    // read_metadata checked that the offsets tile the data section exactly up to the file's end.
    let data_start = 8 + header_len;
    for name in meta.offset_keys() {
        let Some(info) = meta.info(&name) else {
            continue;
        };
        let Some(dtype) = dtype_of(info.dtype) else {
            return Err(ModelError::UnsupportedTensorType {
                file: file.to_path_buf(),
                tensor: name,
                type_id: format!("{:?}", info.dtype),
            });
        };
        // The crate multiplies the shape in one order; Tensor::numel must not overflow in its
        // own, so the product of the non-zero dimensions has to fit as well.
        if info.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d.max(1))).is_none() {
            return Err(ModelError::Corrupt {
                file: file.to_path_buf(),
                offset: 8,
                problem: format!("shape {:?} of tensor {name:?} overflows", info.shape),
            });
        }
        let (s, e) = info.data_offsets;
        let (start, end) = (data_start.checked_add(s), data_start.checked_add(e));
        match (start, end) {
            (Some(start), Some(end)) if start <= end && end <= bytes.len() => {
                let t = Tensor::new(name, dtype, info.shape.clone(), storage.clone(), start, end - start);
                set.insert(t, file)?;
            }
            _ => {
                return Err(ModelError::DataOutOfBounds {
                    file: file.to_path_buf(),
                    tensor: name,
                    start: start.unwrap_or(usize::MAX) as u64,
                    end: end.unwrap_or(usize::MAX) as u64,
                    file_len: bytes.len() as u64,
                })
            }
        }
    }
    Ok(())
}

pub(crate) fn map_file(path: &Path) -> Result<Arc<Storage>, ModelError> {
    let file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    // SAFETY: read-only map, never exposed mutably; the model files are treated as immutable
    // while served (a concurrent truncation by another process could fault reads, as with any
    // memory-mapped model; llama.cpp and the safetensors crate's own docs make the same call).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
    Ok(Arc::new(Storage::Mmap(map)))
}

/// Reads and parses a JSON file of bounded size.
pub fn read_json(path: &Path) -> Result<serde_json::Value, ModelError> {
    let len = std::fs::metadata(path).map_err(|e| ModelError::io(path, e))?.len();
    if len > MAX_JSON_BYTES {
        return Err(ModelError::TooLarge {
            file: path.to_path_buf(),
            offset: 0,
            what: "JSON file size".into(),
            value: len,
            limit: MAX_JSON_BYTES,
        });
    }
    let text = std::fs::read(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_slice(&text).map_err(|e| ModelError::BadJson { file: path.to_path_buf(), problem: e.to_string() })
}

/// The tensors of a Hugging Face model directory, and the files they came from.
pub struct SafetensorsDir {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub tensors: TensorSet,
}

impl SafetensorsDir {
    /// Loads `dir/model.safetensors.index.json` and its shards if present, else
    /// `dir/model.safetensors`.
    pub fn open(dir: impl AsRef<Path>) -> Result<SafetensorsDir, ModelError> {
        let dir = dir.as_ref();
        let index = dir.join(INDEX_FILE);
        let mut tensors = TensorSet::new();
        let mut files = Vec::new();
        if index.is_file() {
            let json = read_json(&index)?;
            let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| ModelError::BadJson {
                file: index.clone(),
                problem: "no \"weight_map\" object".into(),
            })?;
            let mut shards = BTreeSet::new();
            for (name, shard) in map {
                let shard = shard.as_str().ok_or_else(|| ModelError::BadJson {
                    file: index.clone(),
                    problem: format!("shard of {name:?} is not a string"),
                })?;
                // Shards live beside the index: a path that leaves the directory is refused.
                let p = Path::new(shard);
                if p.components().count() != 1 || p.file_name().is_none() {
                    return Err(ModelError::BadJson {
                        file: index.clone(),
                        problem: format!("shard {shard:?} of {name:?} is not a plain file name"),
                    });
                }
                shards.insert(shard.to_string());
            }
            for shard in &shards {
                let path = dir.join(shard);
                add_tensors(&map_file(&path)?, &path, &mut tensors)?;
                files.push(path);
            }
            for (name, shard) in map {
                let in_shard = tensors.contains(name);
                if !in_shard {
                    let shard = shard.as_str().unwrap_or_default();
                    return Err(ModelError::MissingTensor { file: dir.join(shard), tensor: name.clone() });
                }
            }
        } else {
            let path = dir.join(SINGLE_FILE);
            if !path.is_file() {
                return Err(ModelError::NotAModel {
                    file: dir.to_path_buf(),
                    problem: format!("neither {INDEX_FILE} nor {SINGLE_FILE} is there"),
                });
            }
            add_tensors(&map_file(&path)?, &path, &mut tensors)?;
            files.push(path);
        }
        Ok(SafetensorsDir { dir: dir.to_path_buf(), files, tensors })
    }
}

#[cfg(test)]
#[path = "safetensors_tests.rs"]
mod tests;
