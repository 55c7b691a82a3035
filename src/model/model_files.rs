//! One entry point for model files: a GGUF file or a Hugging Face directory, opened into
//! metadata, hyper-parameters, checked weights, and where the tokenizer and chat template are.

use super::config::HParams;
use super::error::ModelError;
use super::gguf::GgufFile;
use super::metadata::{MetaValue, Metadata};
use super::safetensors::{read_json, SafetensorsDir};
use super::tensor_set::TensorSet;
use super::weights::{ModelWeights, Naming};
use super::ModelInfo;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Gguf,
    HuggingFace,
}

/// Where the tokenizer is to be built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenizerSource {
    /// The `tokenizer.ggml.*` keys of [`ModelFiles::metadata`].
    GgufMetadata,
    /// A Hugging Face `tokenizer.json`, with `tokenizer_config.json` when the directory has one.
    HfJson { tokenizer_json: PathBuf, tokenizer_config: Option<PathBuf> },
}

pub struct ModelFiles {
    /// The GGUF file or the model directory.
    pub path: PathBuf,
    pub format: Format,
    /// A human name: GGUF `general.name`, else the file or directory name.
    pub name: String,
    /// GGUF metadata; for a HF directory, `config.json` flattened (`rope_scaling.factor`).
    pub metadata: Metadata,
    pub hparams: HParams,
    /// Every tensor of the model, by its file's name (MTP heads and extras included).
    pub tensors: TensorSet,
    pub weights: ModelWeights,
    /// `None` when the model carries no tokenizer (a weights-only directory).
    pub tokenizer: Option<TokenizerSource>,
    /// The model's own Jinja chat template, if it has one.
    pub chat_template: Option<String>,
    /// Token ids from the model files: `bos` and the ids that end a generation.
    pub bos_token: Option<u32>,
    pub eos_tokens: Vec<u32>,
}

impl ModelFiles {
    /// Opens `path`: a directory is read as a Hugging Face model, a file as GGUF.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelFiles, ModelError> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| ModelError::io(path, e))?;
        if meta.is_dir() {
            ModelFiles::open_hf(path)
        } else {
            ModelFiles::from_gguf(super::gguf_split::open(path)?)
        }
    }

    /// A GGUF file already parsed (also for GGUF images built in memory).
    pub fn from_gguf(f: GgufFile) -> Result<ModelFiles, ModelError> {
        let hparams = HParams::from_gguf(&f.metadata, &f.tensors, &f.path)?;
        let weights = ModelWeights::from_tensors(&f.tensors, Naming::Gguf, &hparams, &f.path)?;
        let m = &f.metadata;
        let name = m.get_str("general.name").map(str::to_string).unwrap_or_else(|| file_name(&f.path));
        let tokenizer = m.get("tokenizer.ggml.model").map(|_| TokenizerSource::GgufMetadata);
        let chat_template = m.get_str("tokenizer.chat_template").map(str::to_string);
        let id = |k: &str| m.get_u64(k).and_then(|v| u32::try_from(v).ok());
        let bos_token = id("tokenizer.ggml.bos_token_id");
        let mut eos_tokens = Vec::new();
        // llama.cpp stops on eos, and also on the end-of-turn / end-of-message tokens.
        for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            if let Some(t) = id(k).filter(|t| !eos_tokens.contains(t)) {
                eos_tokens.push(t);
            }
        }
        Ok(ModelFiles {
            path: f.path,
            format: Format::Gguf,
            name,
            metadata: f.metadata,
            hparams,
            tensors: f.tensors,
            weights,
            tokenizer,
            chat_template,
            bos_token,
            eos_tokens,
        })
    }

    fn open_hf(dir: &Path) -> Result<ModelFiles, ModelError> {
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(ModelError::NotAModel {
                file: dir.to_path_buf(),
                problem: "a directory without config.json".into(),
            });
        }
        let config = read_json(&config_path)?;
        let hparams = HParams::from_hf_config(&config, &config_path)?;
        let st = SafetensorsDir::open(dir)?;
        let weights = ModelWeights::from_tensors(&st.tensors, Naming::HuggingFace, &hparams, dir)?;

        let tokenizer_json = dir.join("tokenizer.json");
        let tokenizer_config_path = dir.join("tokenizer_config.json");
        let tokenizer_config =
            if tokenizer_config_path.is_file() { Some(read_json(&tokenizer_config_path)?) } else { None };
        let tokenizer = tokenizer_json.is_file().then(|| TokenizerSource::HfJson {
            tokenizer_json,
            tokenizer_config: tokenizer_config.is_some().then(|| tokenizer_config_path.clone()),
        });
        let chat_template = hf_chat_template(dir, tokenizer_config.as_ref(), &tokenizer_config_path)?;

        // generation_config.json says what ends a generation when present; config.json otherwise.
        let gen_path = dir.join("generation_config.json");
        let gen = if gen_path.is_file() { Some(read_json(&gen_path)?) } else { None };
        let ids = |key: &str| -> Vec<u32> {
            let v = gen.as_ref().and_then(|g| g.get(key)).filter(|v| !v.is_null()).or_else(|| config.get(key));
            match v {
                Some(serde_json::Value::Array(a)) => a.iter().filter_map(json_u32).collect(),
                Some(v) => json_u32(v).into_iter().collect(),
                None => Vec::new(),
            }
        };
        let bos_token = ids("bos_token_id").first().copied();
        let eos_tokens = ids("eos_token_id");
        Ok(ModelFiles {
            path: dir.to_path_buf(),
            format: Format::HuggingFace,
            name: file_name(dir),
            metadata: json_to_metadata(&config),
            hparams,
            tensors: st.tensors,
            weights,
            tokenizer,
            chat_template,
            bos_token,
            eos_tokens,
        })
    }

    /// What the layers above need to know; `eos_tokens` may be extended by the tokenizer
    /// (e.g. with `<|im_end|>`).
    pub fn info(&self) -> ModelInfo {
        let hp = &self.hparams;
        ModelInfo {
            arch: hp.arch.name().to_string(),
            name: self.name.clone(),
            vocab_size: hp.vocab,
            context_length: hp.context_length,
            n_layers: hp.n_layers,
            n_heads: hp.n_heads,
            n_kv_heads: hp.n_kv_heads,
            head_dim: hp.head_dim,
            hidden: hp.hidden,
            bos_token: self.bos_token,
            eos_tokens: self.eos_tokens.clone(),
        }
    }
}

fn json_u32(v: &serde_json::Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn file_name(p: &Path) -> String {
    let stem = if p.is_dir() { p.file_name() } else { p.file_stem() };
    stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string())
}

/// `chat_template.jinja` (newer transformers save it apart), else `chat_template` in
/// tokenizer_config.json: a string, or a list of named templates of which we take "default".
fn hf_chat_template(
    dir: &Path,
    tokenizer_config: Option<&serde_json::Value>,
    config_path: &Path,
) -> Result<Option<String>, ModelError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja).map(Some).map_err(|e| ModelError::io(jinja, e));
    }
    let Some(t) = tokenizer_config.and_then(|c| c.get("chat_template")).filter(|t| !t.is_null()) else {
        return Ok(None);
    };
    if let Some(s) = t.as_str() {
        return Ok(Some(s.to_string()));
    }
    let named = t.as_array().and_then(|list| {
        let pick = |n: &str| list.iter().find(|e| e.get("name").and_then(|x| x.as_str()) == Some(n));
        pick("default").or(list.first())?.get("template")?.as_str()
    });
    match named {
        Some(s) => Ok(Some(s.to_string())),
        None => Err(ModelError::BadJson {
            file: config_path.to_path_buf(),
            problem: "\"chat_template\" is neither a string nor a list of {name, template}".into(),
        }),
    }
}

/// config.json as metadata: nested objects flattened with dots, nulls left out.
pub fn json_to_metadata(v: &serde_json::Value) -> Metadata {
    fn value(v: &serde_json::Value) -> Option<MetaValue> {
        use serde_json::Value as J;
        Some(match v {
            J::Null | J::Object(_) => return None,
            J::Bool(b) => MetaValue::Bool(*b),
            J::String(s) => MetaValue::String(s.clone()),
            J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => MetaValue::U64(u),
                (_, Some(i), _) => MetaValue::I64(i),
                (_, _, Some(f)) => MetaValue::F64(f),
                _ => return None,
            },
            J::Array(a) => MetaValue::Array(a.iter().filter_map(value).collect()),
        })
    }
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Metadata) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, v, out);
                }
            }
            other => {
                if let Some(m) = value(other) {
                    out.entries.push((prefix.to_string(), m));
                }
            }
        }
    }
    let mut out = Metadata::default();
    walk("", v, &mut out);
    out
}

#[cfg(test)]
#[path = "model_files_tests.rs"]
mod tests;
