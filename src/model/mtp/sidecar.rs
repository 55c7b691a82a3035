//! The sidecar file of a forged MTP head (tools/forge): its `__metadata__`, checked against the
//! trunk it is about to be used with, and its tensors, memory-mapped.
//!
//! A head trained for one trunk drafts garbage for another, and garbage drafts do not break
//! exactness, they only make decoding silently slower. So the trunk's identity (the sha256 of its
//! weight file) and every shape are checked here, and a mismatch is an error, never a warning.

use crate::backend::DType;
use crate::model::error::ModelError;
use crate::model::safetensors::map_file;
use crate::model::{ModelInfo, Tensor, TensorSet};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The `format` a sidecar's metadata must carry, and the one version this reader knows.
pub const FORMAT: &str = "mtplx-mtp-sidecar";
pub const FORMAT_VERSION: u32 = 1;

/// What the sidecar says about itself and its trunk.
#[derive(Clone, Debug, PartialEq)]
pub struct SidecarMeta {
    pub trunk_sha256: String,
    pub architecture: String,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// The chained depth the head was trained for; deeper drafts still work, with lower acceptance.
    pub depth_trained: usize,
}

pub struct Sidecar {
    pub path: PathBuf,
    pub meta: SidecarMeta,
    /// The head's weights (f32, f16 or bf16).
    pub tensors: TensorSet,
    /// The draft sub-vocabulary: trunk token ids, ascending.
    pub subvocab: Vec<u32>,
}

/// The tensor that lists the sub-vocabulary (i32, the one non-float tensor of a sidecar).
pub const SUBVOCAB: &str = "mtp.subvocab.ids";

fn bad(file: &Path, key: &str, problem: String) -> ModelError {
    ModelError::BadValue { file: file.to_path_buf(), key: key.to_string(), problem }
}

fn get<'a>(md: &'a HashMap<String, String>, file: &Path, key: &str) -> Result<&'a str, ModelError> {
    md.get(key).map(String::as_str).ok_or_else(|| ModelError::MissingKey { file: file.to_path_buf(), key: key.into() })
}

fn num<T: std::str::FromStr>(md: &HashMap<String, String>, file: &Path, key: &str) -> Result<T, ModelError> {
    let v = get(md, file, key)?;
    v.parse().map_err(|_| bad(file, key, format!("{v:?} is not a number")))
}

impl SidecarMeta {
    pub fn parse(md: &HashMap<String, String>, file: &Path) -> Result<SidecarMeta, ModelError> {
        let format = get(md, file, "format")?;
        if format != FORMAT {
            return Err(bad(file, "format", format!("{format:?}; an MTP sidecar says {FORMAT:?}")));
        }
        let version: u32 = num(md, file, "format_version")?;
        if version != FORMAT_VERSION {
            return Err(bad(file, "format_version", format!("{version}; this build reads version {FORMAT_VERSION}")));
        }
        let rope = get(md, file, "rope_layout")?;
        if rope != "interleaved" {
            return Err(bad(
                file,
                "rope_layout",
                format!("{rope:?}; only \"interleaved\" (llama GGUF) heads are read"),
            ));
        }
        Ok(SidecarMeta {
            trunk_sha256: get(md, file, "trunk_sha256")?.to_ascii_lowercase(),
            architecture: get(md, file, "architecture")?.to_string(),
            hidden: num(md, file, "hidden_size")?,
            n_layers: num(md, file, "n_layers")?,
            n_heads: num(md, file, "n_heads")?,
            n_kv_heads: num(md, file, "n_kv_heads")?,
            head_dim: num(md, file, "head_dim")?,
            ffn: num(md, file, "ffn")?,
            vocab: num(md, file, "vocab_size")?,
            rms_eps: num(md, file, "rms_eps")?,
            rope_theta: num(md, file, "rope_theta")?,
            depth_trained: num(md, file, "depth_trained")?,
        })
    }

    /// Refuses a head made for another trunk: by hash first (the one check that cannot be fooled
    /// by a look-alike model), then by architecture and shapes.
    pub fn check_trunk(&self, file: &Path, trunk_sha256: &str, info: &ModelInfo) -> Result<(), ModelError> {
        let found = trunk_sha256.to_ascii_lowercase();
        if self.trunk_sha256 != found {
            return Err(ModelError::WrongTrunk {
                file: file.to_path_buf(),
                expected_sha256: self.trunk_sha256.clone(),
                found_sha256: found,
            });
        }
        let pairs = [
            ("hidden_size", self.hidden, info.hidden),
            ("n_layers", self.n_layers, info.n_layers),
            ("n_heads", self.n_heads, info.n_heads),
            ("n_kv_heads", self.n_kv_heads, info.n_kv_heads),
            ("head_dim", self.head_dim, info.head_dim),
            ("vocab_size", self.vocab, info.vocab_size),
        ];
        for (key, ours, trunk) in pairs {
            if ours != trunk {
                return Err(bad(file, key, format!("{ours} in the sidecar, but the trunk has {trunk}")));
            }
        }
        if self.architecture != info.arch {
            let problem = format!("{:?} in the sidecar, but the trunk is {:?}", self.architecture, info.arch);
            return Err(bad(file, "architecture", problem));
        }
        Ok(())
    }
}

impl Sidecar {
    pub fn open(path: &Path) -> Result<Sidecar, ModelError> {
        let storage = map_file(path)?;
        let (_, header) = SafeTensors::read_metadata(storage.bytes()).map_err(|e| ModelError::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            problem: format!("invalid safetensors header: {e}"),
        })?;
        let md = header.metadata().clone().unwrap_or_default();
        let meta = SidecarMeta::parse(&md, path)?;
        let corrupt = |problem: String| ModelError::Corrupt { file: path.to_path_buf(), offset: 8, problem };
        // read_metadata checked that the offsets tile the data section up to the file's end.
        let st = SafeTensors::deserialize(storage.bytes()).map_err(|e| corrupt(format!("{e}")))?;
        let base = storage.bytes().as_ptr() as usize;
        let (mut tensors, mut subvocab) = (TensorSet::new(), None);
        for (name, view) in st.tensors() {
            let dtype = match view.dtype() {
                Dtype::I32 if name == SUBVOCAB => {
                    let ids: Vec<i64> = view
                        .data()
                        .chunks_exact(4)
                        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
                        .collect();
                    subvocab = Some(ids);
                    continue;
                }
                Dtype::F32 => DType::F32,
                Dtype::F16 => DType::F16,
                Dtype::BF16 => DType::BF16,
                other => {
                    return Err(ModelError::UnsupportedTensorType {
                        file: path.to_path_buf(),
                        tensor: name,
                        type_id: format!("{other:?} (an MTP sidecar holds f32, f16 or bf16 weights)"),
                    })
                }
            };
            let offset = view.data().as_ptr() as usize - base;
            let t = Tensor::new(name, dtype, view.shape().to_vec(), storage.clone(), offset, view.data().len());
            tensors.insert(t, path)?;
        }
        let ids =
            subvocab.ok_or_else(|| ModelError::MissingTensor { file: path.to_path_buf(), tensor: SUBVOCAB.into() })?;
        let vocab = meta.vocab as i64;
        let mut subvocab = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            if id < 0 || id >= vocab || (i > 0 && id <= ids[i - 1]) {
                let problem = format!("entry {i} is {id}: ids must ascend, each below the vocabulary size {vocab}");
                return Err(bad(path, SUBVOCAB, problem));
            }
            subvocab.push(id as u32);
        }
        if subvocab.is_empty() {
            return Err(bad(path, SUBVOCAB, "the sub-vocabulary is empty".into()));
        }
        Ok(Sidecar { path: path.to_path_buf(), meta, tensors, subvocab })
    }

    /// The tensor `name`, which must have exactly `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Tensor, ModelError> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { file: self.path.clone(), tensor: name.into() })?;
        if t.shape != shape {
            return Err(ModelError::WrongShape {
                file: self.path.clone(),
                tensor: name.into(),
                expected: shape.to_vec(),
                found: t.shape.clone(),
            });
        }
        Ok(t.clone())
    }
}
