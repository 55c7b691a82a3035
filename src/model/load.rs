//! From a path to everything needed to serve it: the model on its backend, its tokenizer and
//! its chat template (`model_files.rs` only opens and checks the files). Errors name the file and
//! the problem.

use super::llama::Llama;
use super::mtp::MtpHead;
use super::{ChatTemplate, Model, ModelError, ModelFiles, Tokenizer};
use crate::backend::{Backend, CpuBackend};
use std::path::Path;
use std::sync::Arc;

pub struct Loaded {
    pub model: Arc<dyn Model>,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    /// The id clients see: the file name without `.gguf`, or the directory name.
    pub name: String,
    /// The MTP head the checkpoint itself carries, made fast for the model's backend.
    pub mtp_head: Option<Arc<MtpHead>>,
}

#[derive(Debug)]
pub struct LoadError {
    pub path: std::path::PathBuf,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot load the model {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for LoadError {}

/// Loads a GGUF file or a Hugging Face directory onto the CPU backend with `threads` kernel
/// threads (0: every core).
pub fn load(path: &Path, threads: usize) -> Result<Loaded, LoadError> {
    load_on(path, Box::new(CpuBackend::new(threads)))
}

/// [`load`] onto `backend`.
pub fn load_on(path: &Path, backend: Box<dyn Backend + Sync>) -> Result<Loaded, LoadError> {
    let err = |message: String| LoadError { path: path.to_path_buf(), message };
    let files = ModelFiles::open(path).map_err(|e| err(e.to_string()))?;
    let tokenizer = Tokenizer::from_model_files(&files).map_err(|e| err(e.to_string()))?;
    let arch = files.hparams.arch.name();
    let template = ChatTemplate::from_tokenizer(&tokenizer, arch).map_err(|e| err(e.to_string()))?;
    let model = Llama::on(&files, backend).map_err(|e| err(e.to_string()))?;
    // A checkpoint whose head is broken is refused like one whose trunk is: it is one file set.
    let mtp_head = checkpoint_head(&files, &model).map_err(|e| err(e.to_string()))?.map(Arc::new);
    let name = model_id(path, &files);
    Ok(Loaded { model: Arc::new(model), tokenizer: Arc::new(tokenizer), template, name, mtp_head })
}

/// The MTP head `files` carry in their own checkpoint (`mtp.*`, DeepSeek's extra block, GGUF
/// `nextn`), on `model` (built from the same files), made fast for its backend; `Ok(None)` when
/// they carry none. Missing or misshapen head tensors are an error naming the tensor.
pub fn checkpoint_head(files: &ModelFiles, model: &dyn Model) -> Result<Option<MtpHead>, ModelError> {
    let Some(trunk) = model.mtp_trunk() else { return Ok(None) };
    let head = MtpHead::from_checkpoint(files, trunk)?;
    Ok(head.map(|h| h.quantized(trunk.shared().backend)))
}

/// The id clients see: the file name without `.gguf`, or the directory name.
pub fn model_id(path: &Path, files: &ModelFiles) -> String {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(n) => n.strip_suffix(".gguf").unwrap_or(n).to_string(),
        None => files.name.clone(),
    }
}

/// Loads the MTP head at `head` for the model loaded from `model_path`, refusing one made for
/// another model (the sidecar names its trunk's sha256), and makes it fast for the model's
/// backend ([`MtpHead::quantized`]).
pub fn load_mtp_head(model_path: &Path, head: &Path, model: &dyn Model) -> Result<MtpHead, LoadError> {
    let err = |message: String| LoadError { path: head.to_path_buf(), message };
    let trunk = model.mtp_trunk().ok_or_else(|| err("this model's architecture cannot carry an MTP head".into()))?;
    let sha = super::sha256::file_hex(model_path).map_err(|e| err(format!("cannot hash the model file: {e}")))?;
    let exact = MtpHead::load(head, &sha, trunk).map_err(|e| err(e.to_string()))?;
    Ok(exact.quantized(trunk.shared().backend))
}
