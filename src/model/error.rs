//! Errors of reading model files. Every message names the file and what was wrong with it, so
//! that a user who points the server at a bad file learns which file and why without a debugger.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum ModelError {
    /// The file or directory could not be opened, read or mapped.
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    /// The file ends before a structure it announces.
    Truncated {
        file: PathBuf,
        offset: u64,
        expected: String,
    },
    /// A structure is present but its content is impossible.
    Corrupt {
        file: PathBuf,
        offset: u64,
        problem: String,
    },
    BadMagic {
        file: PathBuf,
        found: [u8; 4],
    },
    UnsupportedVersion {
        file: PathBuf,
        version: u32,
    },
    /// A count or length exceeds a limit (ours, or what the rest of the file could hold).
    TooLarge {
        file: PathBuf,
        offset: u64,
        what: String,
        value: u64,
        limit: u64,
    },
    UnknownArchitecture {
        file: PathBuf,
        arch: String,
    },
    UnsupportedTensorType {
        file: PathBuf,
        tensor: String,
        type_id: String,
    },
    MissingTensor {
        file: PathBuf,
        tensor: String,
    },
    /// The chosen backend cannot hold a tensor (its type, or its size).
    Backend {
        tensor: String,
        message: String,
    },
    WrongShape {
        file: PathBuf,
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    DuplicateTensor {
        file: PathBuf,
        tensor: String,
    },
    /// The MTP head a checkpoint carries beside its trunk is incomplete or misshapen (`problem`
    /// names the tensor, and its shape against the expected one); `naming` says which of the
    /// checkpoint namings the head was found in.
    BadMtpHead {
        naming: &'static str,
        problem: Box<ModelError>,
    },
    /// An MTP sidecar trained for another trunk than the one loaded.
    WrongTrunk {
        file: PathBuf,
        expected_sha256: String,
        found_sha256: String,
    },
    /// A tensor's bytes lie (partly) outside its file.
    DataOutOfBounds {
        file: PathBuf,
        tensor: String,
        start: u64,
        end: u64,
        file_len: u64,
    },
    /// A hyper-parameter is absent, or out of its valid range.
    MissingKey {
        file: PathBuf,
        key: String,
    },
    BadValue {
        file: PathBuf,
        key: String,
        problem: String,
    },
    BadJson {
        file: PathBuf,
        problem: String,
    },
    /// A split GGUF's part is not beside the first.
    MissingSplitPart {
        file: PathBuf,
        part: PathBuf,
        index: u64,
        count: u64,
    },
    /// A path that is neither a GGUF file nor a Hugging Face model directory.
    NotAModel {
        file: PathBuf,
        problem: String,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ModelError::*;
        match self {
            Io { file, source } => write!(f, "{}: cannot read: {source}", file.display()),
            Truncated { file, offset, expected } => {
                write!(
                    f,
                    "{}: truncated or corrupt file: expected {expected} at offset {offset}, but the file ends first",
                    file.display()
                )
            }
            Corrupt { file, offset, problem } => {
                write!(f, "{}: corrupt file at offset {offset}: {problem}", file.display())
            }
            BadMagic { file, found } => {
                write!(
                    f,
                    "{}: not a GGUF file: magic bytes {:?} (expected \"GGUF\")",
                    file.display(),
                    String::from_utf8_lossy(found)
                )
            }
            UnsupportedVersion { file, version } => {
                let hint = if version.swap_bytes() <= 3 {
                    " (a big-endian GGUF file? only little-endian is supported)"
                } else {
                    ""
                };
                write!(
                    f,
                    "{}: unsupported GGUF version {version}; versions 2 and 3 are supported{hint}",
                    file.display()
                )
            }
            TooLarge { file, offset, what, value, limit } => {
                write!(f, "{}: {what} at offset {offset} is {value}, more than the limit of {limit}", file.display())
            }
            UnknownArchitecture { file, arch } => {
                write!(f, "{}: unknown architecture {arch:?}; supported: llama, qwen2, qwen3, gemma3", file.display())
            }
            Backend { tensor, message } => write!(f, "tensor {tensor:?}: {message}"),
            UnsupportedTensorType { file, tensor, type_id } => {
                let supported: Vec<&str> = crate::backend::DType::ALL.iter().map(|d| d.name()).collect();
                write!(
                    f,
                    "{}: tensor {tensor:?} has unsupported type {type_id}; supported: {}",
                    file.display(),
                    supported.join(", ")
                )
            }
            MissingTensor { file, tensor } => {
                write!(f, "{}: missing tensor {tensor:?}", file.display())
            }
            WrongShape { file, tensor, expected, found } => {
                write!(f, "{}: tensor {tensor:?} has shape {found:?}, expected {expected:?}", file.display())
            }
            DuplicateTensor { file, tensor } => {
                write!(f, "{}: tensor {tensor:?} appears twice", file.display())
            }
            BadMtpHead { naming, problem } => {
                write!(f, "the MTP head in the checkpoint ({naming}) is incomplete or misshapen: {problem}")
            }
            WrongTrunk { file, expected_sha256, found_sha256 } => {
                write!(
                    f,
                    "{}: this MTP head was trained for the trunk with sha256 {expected_sha256}, but the loaded model file has sha256 {found_sha256}; forge a head for this model (tools/forge/forge.py) or load the model it was made for",
                    file.display()
                )
            }
            DataOutOfBounds { file, tensor, start, end, file_len } => {
                write!(
                    f,
                    "{}: data of tensor {tensor:?} spans bytes {start}..{end}, beyond the end of the file ({file_len} bytes)",
                    file.display()
                )
            }
            MissingKey { file, key } => {
                write!(f, "{}: missing hyper-parameter {key:?}", file.display())
            }
            BadValue { file, key, problem } => {
                write!(f, "{}: bad value for {key:?}: {problem}", file.display())
            }
            BadJson { file, problem } => write!(f, "{}: bad JSON: {problem}", file.display()),
            NotAModel { file, problem } => write!(f, "{}: not a model: {problem}", file.display()),
            MissingSplitPart { file, part, index, count } => write!(
                f,
                "{}: the model is split in {count} parts, and part {index} of {count} ({}) is missing; fetch every part into the same directory",
                file.display(),
                part.display()
            ),
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelError::Io { source, .. } => Some(source),
            ModelError::BadMtpHead { problem, .. } => Some(problem.as_ref()),
            _ => None,
        }
    }
}

impl ModelError {
    pub fn io(file: impl Into<PathBuf>, source: std::io::Error) -> ModelError {
        ModelError::Io { file: file.into(), source }
    }
}
