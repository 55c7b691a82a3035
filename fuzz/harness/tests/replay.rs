//! Every fuzz target's committed inputs through the target's own body and invariants, under
//! plain `cargo test`: the seed corpus (`fuzz/corpus/<target>/seed-*`) and the crash
//! regressions (`fuzz/regressions/<target>/*`, each a crash input a run found, kept after its
//! fix). A cold AddressSanitizer build of the fuzz crate does not fit in CI's time; this checks
//! the same code against the same inputs without one (see `fuzz/README.md`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed inputs of `target`, sorted: its seeds (at least one, or the target has no
/// start) and its crash regressions, if any.
fn inputs(target: &str) -> Vec<PathBuf> {
    let corpus = fuzz_dir().join("corpus").join(target);
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|e| panic!("{target}: cannot read its seed corpus {}: {e}", corpus.display()))
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("seed-")))
        .collect();
    assert!(!seeds.is_empty(), "{target}: no committed seed-* file in {}", corpus.display());
    // A target with no regression directory has never crashed.
    if let Ok(dir) = std::fs::read_dir(fuzz_dir().join("regressions").join(target)) {
        seeds.extend(dir.map(|e| e.expect("a readable directory entry").path()));
    }
    seeds.sort();
    seeds
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".into(),
    }
}

/// Runs every input of `target`, then fails naming each input that broke an invariant.
fn replay(target: &str, run: fn(&[u8])) {
    let mut failed = Vec::new();
    let inputs = inputs(target);
    for path in &inputs {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{target}: cannot read {}: {e}", path.display()));
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| run(&data))) {
            failed.push(format!("{}: {}", path.display(), panic_text(&*payload)));
        }
    }
    assert!(failed.is_empty(), "{target}: {} of {} inputs failed:\n{}", failed.len(), inputs.len(), failed.join("\n"));
}

macro_rules! replay_each {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), mtplx_fuzz_harness::$target::run);
            }
        )*
        /// The targets replayed here, to check them against the list of targets.
        const REPLAYED: &[&str] = &[$(stringify!($target)),*];
    };
}

replay_each!(
    anthropic_request,
    chat_request,
    chat_template,
    gguf_header,
    http_chunked,
    http_connection,
    http_head,
    label_escape,
    metrics_negotiate,
    openai_request,
    record_stream,
    router,
    safetensors_header,
    tokenizer,
);

/// A new target is replayed here as soon as it exists: its binary, its entry in the harness's
/// list and its test above go together.
#[test]
fn every_target_is_replayed() {
    let mut binaries: Vec<String> = std::fs::read_dir(fuzz_dir().join("fuzz_targets"))
        .expect("fuzz/fuzz_targets is readable")
        .filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(String::from))
        .collect();
    binaries.sort();
    assert_eq!(binaries, mtplx_fuzz_harness::TARGETS, "fuzz/fuzz_targets/ against the harness's TARGETS");
    assert_eq!(REPLAYED, mtplx_fuzz_harness::TARGETS, "the replay tests against the harness's TARGETS");
    // A regression filed under a misspelt target would never be replayed.
    for dir in std::fs::read_dir(fuzz_dir().join("regressions")).into_iter().flatten() {
        let name = dir.expect("a readable directory entry").file_name();
        let name = name.to_string_lossy();
        assert!(mtplx_fuzz_harness::TARGETS.contains(&&*name), "fuzz/regressions/{name} names no target");
    }
}

/// The replay must fail when a target's invariant breaks, naming the input: a target that
/// panics on one of two inputs is reported with that file's name and its message.
#[test]
fn a_broken_invariant_names_the_input() {
    fn picky(data: &[u8]) {
        assert!(!data.starts_with(b"GET"), "this target refuses GET");
    }
    let result = catch_unwind(|| replay("http_head", picky));
    let text = panic_text(&*result.expect_err("http_head's seeds include a GET request"));
    assert!(text.contains("seed-get: this target refuses GET"), "{text}");
    assert!(!text.contains("seed-chunked"), "only the inputs that failed are named: {text}");
}
