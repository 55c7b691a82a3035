//! `mtplx-lite tune`: on this machine, the cost of verify passes of 1 to 9 rows (`bench_rows`),
//! and each available drafter's acceptance by draft position over the fixed prompt set, greedy
//! at the deepest depth through the engine; then the table and verdict (`tune::report`), and the
//! profile saved where the server looks for it (`tune::startup`). Also: the server's side,
//! turning that profile into the prior `--depth auto` starts from.

use super::ModelOpts;
use mtplx_lite::backend::cpu::pool::threads_for;
use mtplx_lite::engine::draft::MAX_DRAFT_DEPTH;
use mtplx_lite::engine::{
    Depth, DraftConfig, DraftMode, Engine, EngineConfig, Event, JobSpec, SamplingParams, SpecPrior,
};
use mtplx_lite::model::load::Loaded;
use mtplx_lite::model::mtp::MtpHead;
use mtplx_lite::model::ChatMessage;
use mtplx_lite::tune::{prompts, report, startup, ClassRun, DrafterRun, FileKey, Profile, PROFILE_VERSION};
use std::path::Path;
use std::sync::Arc;

/// Most tokens `--max-tokens` may ask per prompt: past it a tune run takes many minutes and
/// the acceptance figures no longer change.
pub const MAX_TUNE_TOKENS: usize = 2048;

fn key_of(path: &Path) -> Result<FileKey, String> {
    FileKey::of(path).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(opts: &ModelOpts, out: Option<&Path>, max_tokens: usize, reps: usize) -> Result<(), String> {
    if !(1..=MAX_TUNE_TOKENS).contains(&max_tokens) {
        return Err(format!("tune --max-tokens must be from 1 to {MAX_TUNE_TOKENS}, got {max_tokens}"));
    }
    let path = opts.path()?;
    let threads = threads_for(opts.threads);
    let loaded = mtplx_lite::model::load::load(&path, threads).map_err(|e| e.to_string())?;
    let head = super::load_head(opts, &path, &loaded)?;
    let head_key = opts.head_path(&path)?.map(|p| key_of(&p)).transpose()?;
    let rows: Vec<usize> = (1..=MAX_DRAFT_DEPTH + 1).collect();
    eprintln!("mtplx-lite: tune: timing passes of 1 to {} rows, {reps} of each", rows.len());
    super::bench::decode_tok_s(&*loaded.model, 8); // warm-up: page in the weights
    let costs = super::bench_rows::measure(&*loaded.model, &rows, reps, super::bench_rows::DEFAULT_CONTEXT);
    println!("Verify pass costs:\n");
    print!("{}", super::bench_rows::table(&loaded.name, threads, &costs));
    let mut modes = vec![DraftMode::Ngram];
    if head.is_some() {
        modes.push(DraftMode::Mtp);
    }
    let mut drafters = Vec::new();
    for mode in modes {
        eprintln!("mtplx-lite: tune: {} drafts at depth {MAX_DRAFT_DEPTH} over the prompt set", mode.as_str());
        drafters.push(run_drafter(&loaded, head.clone(), mode, max_tokens)?);
    }
    let profile = Profile {
        version: PROFILE_VERSION,
        model: key_of(&path)?,
        threads,
        mtp_head: head_key,
        max_tokens,
        pass_secs: costs.one_seq,
        batch_secs: costs.k_seqs,
        drafters,
    };
    println!("\nAcceptance by draft position and expected speed-up (greedy, at most {max_tokens} tokens a prompt):\n");
    print!("{}", report::table(&profile));
    let out = match out {
        Some(p) => p.to_path_buf(),
        None => startup::default_path(&profile.model, threads)
            .ok_or("there is no cache directory (neither XDG_CACHE_HOME nor HOME is set): pass --out PATH")?,
    };
    profile.save(&out).map_err(|e| e.to_string())?;
    println!("\nprofile saved to {} (the server's --depth auto starts from it)", out.display());
    Ok(())
}

/// Every prompt of the set, greedy, with `mode` drafting at the deepest depth; its counts by
/// class. One engine per drafter, so that no drafter starts from a cache another one filled
/// (an MTP head has no hidden rows for a reused prefix).
fn run_drafter(
    loaded: &Loaded,
    head: Option<Arc<MtpHead>>,
    mode: DraftMode,
    max_tokens: usize,
) -> Result<DrafterRun, String> {
    let cfg = EngineConfig {
        draft: DraftConfig { mode, depth: Depth::Fixed(MAX_DRAFT_DEPTH) },
        ..EngineConfig::for_model(&*loaded.model, 4, None, None)
    };
    let engine = Engine::start_with_head(loaded.model.clone(), loaded.tokenizer.clone(), cfg, head);
    let (mut name, mut draft_secs, mut drafted) = (mode.as_str(), 0.0, 0usize);
    let mut classes = Vec::new();
    for class in prompts::CLASSES {
        let mut run = ClassRun {
            class: class.name.into(),
            tokens: 0,
            verified_by_depth: vec![0; MAX_DRAFT_DEPTH],
            accepted_by_depth: vec![0; MAX_DRAFT_DEPTH],
        };
        for prompt in class.prompts {
            let text = loaded
                .template
                .render(&[ChatMessage { role: "user".into(), content: (*prompt).into() }], true)
                .map_err(|e| e.to_string())?;
            let tokens = loaded.tokenizer.encode(&text, false).map_err(|e| e.to_string())?;
            let stop_tokens = loaded.tokenizer.eos_tokens().to_vec();
            let (job, rx) =
                JobSpec { stop_tokens, ..JobSpec::new(tokens, SamplingParams::greedy(), max_tokens) }.build();
            engine.submit(job).map_err(|e| e.to_string())?;
            let stats = loop {
                match rx.recv_blocking() {
                    Ok(Event::Done { stats, .. }) => break stats,
                    Ok(_) => {}
                    Err(_) => return Err("the engine stopped during tune".into()),
                }
            };
            let spec = &stats.spec;
            if !spec.drafter.is_empty() {
                name = spec.drafter;
            }
            run.tokens += stats.completion_tokens as u64;
            for (o, x) in run.verified_by_depth.iter_mut().zip(&spec.drafted_by_depth) {
                *o += x;
            }
            for (o, x) in run.accepted_by_depth.iter_mut().zip(&spec.accepted_by_depth) {
                *o += x;
            }
            draft_secs += spec.draft_time.as_secs_f64();
            drafted += spec.drafted;
        }
        classes.push(run);
    }
    engine.shutdown();
    let draft_secs_per_token = if drafted > 0 { draft_secs / drafted as f64 } else { 0.0 };
    Ok(DrafterRun { name: name.into(), draft_secs_per_token, classes })
}

/// The prior the server's `--depth auto` starts from: `--tune-profile`, else this model's and
/// thread count's profile in the cache directory if there is one (docs/speculative.md, "Tune").
/// A fixed `--depth` never consults it.
pub fn spec_prior(opts: &ModelOpts, path: &Path) -> Result<SpecPrior, String> {
    if opts.draft.depth != Depth::Auto {
        return Ok(SpecPrior::default());
    }
    let key = key_of(path)?;
    let threads = threads_for(opts.threads);
    let head = opts.head_path(path)?.map(|p| key_of(&p)).transpose()?;
    let default = startup::default_path(&key, threads);
    let (prior, note) =
        startup::prior_for(opts.tune_profile.as_deref(), default.as_deref(), &key, threads, head.as_ref())
            .map_err(|e| e.to_string())?;
    if let Some(note) = note {
        eprintln!("mtplx-lite: {note}");
    }
    Ok(prior)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command, Settings};
    use argh::FromArgs;

    #[test]
    fn tune_parses_its_flags_and_refuses_a_token_count_out_of_bounds_before_loading_anything() {
        let args = ["--tune-profile", "p.json", "--threads", "3", "tune", "--max-tokens", "0", "--out", "o.json"];
        let cli = Cli::from_args(&["mtplx-lite"], &args).unwrap();
        let Some(Command::Tune(t)) = &cli.command else { panic!("tune is a subcommand") };
        assert_eq!((t.max_tokens, t.reps, t.out.as_deref()), (0, 20, Some(Path::new("o.json"))));
        let s = Settings::from_cli(&cli).unwrap();
        assert_eq!(s.model.tune_profile.as_deref(), Some(Path::new("p.json")));
        // A model path that does not exist: the bound is checked first, so this never loads it.
        let opts = ModelOpts { model: Some("/nonexistent.gguf".into()), ..s.model };
        for n in [0, MAX_TUNE_TOKENS + 1] {
            let e = run(&opts, None, n, 1).unwrap_err();
            assert!(e.contains(&format!("from 1 to {MAX_TUNE_TOKENS}, got {n}")), "{e}");
        }
    }

    #[test]
    fn a_fixed_depth_never_reads_a_profile() {
        let cli = Cli::from_args(&["mtplx-lite"], &["--depth", "2", "--tune-profile", "/nonexistent.json"]).unwrap();
        let s = Settings::from_cli(&cli).unwrap();
        assert!(spec_prior(&s.model, Path::new("/nonexistent.gguf")).unwrap().is_empty());
    }
}
