//! The demo model's MTP head, made by tools/forge and shipped inside the binary, so that the
//! demo drafts with it out of the box (docs/speculative.md). It is written beside the cached demo
//! model on first use; loading checks it against the model's sha256 like any other sidecar.

use std::path::{Path, PathBuf};

const DEMO_HEAD: &[u8] = include_bytes!("../../models/SmolLM2-135M-Instruct.Q4_1.mtp.safetensors");

/// The demo head's path beside `model`, written there first if missing or different.
pub fn ensure_beside(model: &Path) -> Result<PathBuf, String> {
    let path = model.with_file_name("SmolLM2-135M-Instruct.Q4_1.mtp.safetensors");
    if std::fs::read(&path).map(|b| b == DEMO_HEAD).unwrap_or(false) {
        return Ok(path);
    }
    let tmp = path.with_extension(format!("part-{}", std::process::id()));
    std::fs::write(&tmp, DEMO_HEAD)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("cannot write the demo MTP head to {}: {e}", path.display()))?;
    Ok(path)
}
