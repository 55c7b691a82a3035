//! An MTP head read from the model's own checkpoint (no `--mtp-head`), in each of the three
//! namings (Qwen `mtp.*` and DeepSeek's extra block in a Hugging Face directory, llama.cpp's
//! `nextn` block in GGUF), drives the engine's `mtp` drafter: at temperature 0 and depths 1 to 4
//! the output is token for token the plain greedy output, with drafts both accepted and
//! rejected, so that both caches' rollback runs.

use mtplx_lite::engine::draft::{Depth, DraftConfig, DraftMode};
use mtplx_lite::engine::{Engine, EngineConfig, Event, JobSpec, SamplingParams, SpecCounts, TokenDecoder};
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::load::checkpoint_head;
use mtplx_lite::model::mtp::tiny::{self, TinyMtp};
use mtplx_lite::model::{Model, ModelFiles};
use std::path::PathBuf;
use std::sync::Arc;

const NEW_TOKENS: usize = 48;

/// Token ids as text; the tiny model has no tokenizer.
struct Ids;

impl TokenDecoder for Ids {
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter().map(|i| format!("<{i}>")).collect()
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mtplx-mtp-ckpt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The greedy completion of `prompt` through an engine drafting with `mode` at `depth`, and the
/// request's speculation counts.
fn complete(
    model: &Arc<Llama>,
    head: &Arc<mtplx_lite::model::mtp::MtpHead>,
    mode: DraftMode,
    depth: usize,
    prompt: &[u32],
) -> (Vec<u32>, SpecCounts) {
    let draft = DraftConfig { mode, depth: Depth::Fixed(depth) };
    let cfg = EngineConfig { draft, ..EngineConfig::for_model(&**model, 4, Some(256), None) };
    let engine = Engine::start_with_head(model.clone(), Arc::new(Ids), cfg, Some(head.clone()));
    let (job, rx) = JobSpec::new(prompt.to_vec(), SamplingParams::greedy(), NEW_TOKENS).build();
    engine.submit(job).unwrap();
    let mut out = Vec::new();
    loop {
        match rx.recv_blocking().expect("the job's events") {
            Event::Token { id, .. } => out.push(id),
            Event::Done { stats, .. } => return (out, *stats.spec),
        }
    }
}

#[test]
fn greedy_drafting_with_the_checkpoints_own_head_equals_plain_greedy_in_every_naming() {
    // A trunk that mostly follows a fixed permutation of the vocabulary and a head that drafts
    // it: drafts are accepted often, and rejected where the trunk's blocks make it stray.
    let m = TinyMtp::new(2026, true, 1.5);
    let prompts: [Vec<u32>; 2] =
        [vec![1, 2, 3, 4, 5, 6, 7, 8], (0..20).map(|i| (i * 29 + 11) % tiny::VOCAB as u32).collect()];
    for naming in tiny::ALL {
        let dir = temp_dir(&format!("{naming:?}"));
        let files = ModelFiles::open(m.write(naming, &dir)).unwrap();
        let model = Arc::new(Llama::load(&files, 1).unwrap());
        assert_eq!(model.info().n_layers, tiny::LAYERS, "{naming:?}");
        // The path the server takes: found in the checkpoint, made fast for the backend.
        let head = Arc::new(checkpoint_head(&files, &*model).unwrap().expect("the checkpoint's head"));
        for prompt in &prompts {
            let (plain, none) = complete(&model, &head, DraftMode::None, 1, prompt);
            assert_eq!(plain.len(), NEW_TOKENS);
            assert_eq!(none.drafted, 0);
            let (mut accepted, mut rejected) = (0, 0);
            for depth in 1..=4 {
                let (got, spec) = complete(&model, &head, DraftMode::Mtp, depth, prompt);
                assert_eq!(got, plain, "{naming:?}, depth {depth}: drafting changed the greedy output");
                assert_eq!(spec.drafter, "mtp", "{naming:?}, depth {depth}");
                assert!(spec.drafted > 0 && spec.verify_calls > 0, "{naming:?}, depth {depth}: {spec:?}");
                accepted += spec.accepted;
                rejected += spec.correction;
            }
            eprintln!("{naming:?}, prompt of {}: {accepted} drafts accepted, {rejected} rejections", prompt.len());
            assert!(accepted > 0, "{naming:?}: no draft was ever accepted");
            assert!(rejected > 0, "{naming:?}: no draft was ever rejected, so rollback never ran");
        }
    }
}
