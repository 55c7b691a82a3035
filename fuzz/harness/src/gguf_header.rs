//! The GGUF header parser and everything that reads a parsed header (hyper-parameters, weight
//! picking) on arbitrary bytes: errors are fine, panics, hangs and huge allocations are not.

use mtplx_lite::model::gguf::{parse_header, GgufFile};
use mtplx_lite::model::weights::{ModelWeights, Naming};
use mtplx_lite::model::HParams;
use std::path::Path;

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    if let Ok(h) = parse_header(data, Path::new("fuzz.gguf")) {
        for t in &h.tensors {
            assert!(t.offset + t.len <= data.len(), "tensor {} escapes the file", t.name);
        }
    }
    if let Ok(f) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()) {
        for t in f.tensors.iter() {
            assert_eq!(Some(t.bytes().len()), t.dtype.bytes_for(t.numel()));
        }
        if let Ok(hp) = HParams::from_gguf(&f.metadata, &f.tensors, &f.path) {
            let _ = ModelWeights::from_tensors(&f.tensors, Naming::Gguf, &hp, &f.path);
        }
    }
}
