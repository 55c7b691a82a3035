//! Helpers shared by the model layer's unit tests.

use std::path::PathBuf;

/// The demo GGUF: `MTPLX_DEMO_MODEL`, else the cache path CI downloads it to. Tests that use it
/// fail (not skip) when it is missing.
pub fn demo_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("MTPLX_DEMO_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[allow(dead_code)] // used by the safetensors tests
/// A fresh, empty directory under the system temp dir, unique to this test.
pub fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mtplx-model-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}
