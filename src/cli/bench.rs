//! `mtplx-lite bench` (prefill and decode tokens/s, like llama.cpp's llama-bench) and
//! `mtplx-lite generate` (stream one completion to the terminal).

use super::ModelOpts;
use mtplx_lite::backend::DeviceStats;
use mtplx_lite::engine::{Engine, EngineConfig, Event, Job, JobSpec, SamplingParams, TokenDecoder};
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::{ChatMessage, LogitsWanted, Model, ModelFiles, SeqBatch};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deterministic prompt tokens spread over the vocabulary (what llama-bench does with random
/// tokens: the content does not change the cost).
fn bench_tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab.max(1)) as u32).collect()
}

/// Prefill `prompt` tokens, best of `reps`; tokens per second.
pub fn prefill_tok_s(model: &dyn Model, prompt: usize, reps: usize) -> f64 {
    let toks = bench_tokens(prompt, model.info().vocab_size);
    (0..reps)
        .map(|_| {
            let mut cache = model.new_cache(prompt + 1);
            let t = Instant::now();
            model
                .forward(&mut [SeqBatch { tokens: &toks, cache: &mut cache, logits: LogitsWanted::Last }])
                .expect("prefill");
            prompt as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// Decode `n` tokens one at a time from an empty context (llama-bench's tg); tokens per second.
pub fn decode_tok_s(model: &dyn Model, n: usize) -> f64 {
    decode_batched_tok_s(model, 1, n)
}

/// `seqs` sequences decoding `n` tokens each from empty contexts, in one batched forward pass
/// per step (what continuous batching runs once every sequence is past its prompt): the
/// batched counterpart of [`decode_tok_s`]; aggregate tokens per second.
pub fn decode_batched_tok_s(model: &dyn Model, seqs: usize, n: usize) -> f64 {
    let mut caches: Vec<_> = (0..seqs).map(|_| model.new_cache(n + 1)).collect();
    let vocab = model.info().vocab_size.max(1) as u32;
    let first = model.info().bos_token.unwrap_or(0);
    // Different first tokens, so that the sequences do not all compute the same thing.
    let mut toks: Vec<u32> = (0..seqs as u32).map(|i| (first + i) % vocab).collect();
    let t = Instant::now();
    for _ in 0..n {
        let mut batch: Vec<SeqBatch<'_>> = caches
            .iter_mut()
            .zip(&toks)
            .map(|(cache, tok)| SeqBatch { tokens: std::slice::from_ref(tok), cache, logits: LogitsWanted::Last })
            .collect();
        // A greedy step as the engine runs it: only each row's most likely token comes back.
        let out = model.step(&mut batch, false, true).expect("batched decode");
        drop(batch);
        for (tok, ids) in toks.iter_mut().zip(&out.tokens) {
            *tok = ids[0];
        }
    }
    (seqs * n) as f64 / t.elapsed().as_secs_f64()
}

/// `sequences` greedy generations of `n` tokens each through the engine (continuous batching);
/// aggregate completion tokens per second over the wall time.
pub fn concurrent_tok_s(model: Arc<dyn Model>, decoder: Arc<dyn TokenDecoder>, sequences: usize, n: usize) -> f64 {
    let cfg = EngineConfig::for_model(&*model, sequences.max(1), Some(n + 64), None);
    let vocab = model.info().vocab_size;
    let engine = Engine::start(model, decoder, cfg);
    let t = Instant::now();
    let mut rxs = Vec::new();
    for s in 0..sequences {
        let prompt = bench_tokens(16 + s, vocab);
        let (job, rx) = Job::new(prompt, SamplingParams::greedy(), n);
        engine.submit(job).expect("queue has room for every sequence");
        rxs.push(rx);
    }
    let mut total = 0;
    for rx in rxs {
        while let Ok(ev) = rx.recv_blocking() {
            if let Event::Done { stats, .. } = ev {
                total += stats.completion_tokens;
                break;
            }
        }
    }
    total as f64 / t.elapsed().as_secs_f64()
}

pub fn run(cfg: &ModelOpts, prompt: usize, generate: usize, sequences: usize) -> Result<(), String> {
    let path = cfg.path()?;
    let files = ModelFiles::open(&path).map_err(|e| e.to_string())?;
    let tokenizer = Arc::new(mtplx_lite::model::Tokenizer::from_model_files(&files).map_err(|e| e.to_string())?);
    let name = mtplx_lite::model::load::model_id(&path, &files);
    let mut thread_counts = vec![1, mtplx_lite::backend::cpu::pool::threads_for(cfg.threads)];
    thread_counts.dedup();
    let (probe, chosen) = mtplx_lite::backend::open(cfg.backend, 1).map_err(|e| e.to_string())?;
    let bandwidth = probe.copy_bandwidth();
    drop(probe);
    if chosen.backend == "gpu" {
        // The device does the work: one row of the table, the CPU threads only feed it.
        thread_counts = vec![1];
        println!("backend gpu: {} {}\n", chosen.adapter, chosen.driver);
    } else {
        println!("kernels at {}\n", mtplx_lite::backend::cpu::Isa::detect().name());
    }
    println!("| model | threads | test | t/s |");
    println!("| --- | ---: | --- | ---: |");
    let mut device_work = Vec::new();
    for &threads in &thread_counts {
        let (backend, _) = mtplx_lite::backend::open(cfg.backend, threads).map_err(|e| e.to_string())?;
        let model: Arc<dyn Model> = Arc::new(Llama::on(&files, backend).map_err(|e| e.to_string())?);
        decode_tok_s(&*model, 8); // warm-up: page in the weights
        println!("| {} | {threads} | pp{prompt} | {:.2} |", name, prefill_tok_s(&*model, prompt, 3));
        let before = model.device_stats();
        let tg = decode_tok_s(&*model, generate);
        println!("| {} | {threads} | tg{generate} | {:.2} |", name, tg);
        if let (Some(a), Some(b)) = (before, model.device_stats()) {
            device_work.push(device_per_token(&a, &b, generate));
        }
        if let Some(bw) = bandwidth {
            let read = tg * weights_per_token(&files) as f64;
            device_work.push(format!(
                "bandwidth: copy kernel {:.1} GB/s; decode reads weights at {:.1} GB/s, {:.2} of it",
                bw / 1e9,
                read / 1e9,
                read / bw
            ));
        }
        if threads == *thread_counts.last().unwrap() && sequences > 1 {
            println!(
                "| {} | {threads} | tg{generate} x{sequences} batched forward (aggregate) | {:.2} |",
                name,
                decode_batched_tok_s(&*model, sequences, generate)
            );
            println!(
                "| {} | {threads} | tg{generate} x{sequences} engine, prompts included (aggregate) | {:.2} |",
                name,
                concurrent_tok_s(model.clone(), tokenizer.clone(), sequences, generate)
            );
        }
    }
    for line in device_work {
        println!("\n{line}");
    }
    Ok(())
}

/// Bytes of weights one decode step reads: every matrix of every layer and the output head
/// (the embedding gives one row).
fn weights_per_token(files: &ModelFiles) -> usize {
    let w = &files.weights;
    let layers: usize = w
        .layers
        .iter()
        .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down])
        .map(|t| t.bytes().len())
        .sum();
    layers + w.output.bytes().len()
}

/// What the device did per decoded token between two readings of its counters around a decode
/// run of `tokens` one-row steps.
fn device_per_token(a: &DeviceStats, b: &DeviceStats, tokens: usize) -> String {
    let per = |x: u64, y: u64| (y - x) as f64 / tokens.max(1) as f64;
    format!(
        "device work per decoded token: {:.1} dispatches, {:.2} submits, {:.0} bytes read back",
        per(a.dispatches, b.dispatches),
        per(a.submits, b.submits),
        per(a.read_bytes, b.read_bytes)
    )
}

/// `bench --rows`: the k-row against 1-row table at the configured thread count.
pub fn run_rows(cfg: &ModelOpts, rows: &[usize], reps: usize, context: usize) -> Result<(), String> {
    let path = cfg.path()?;
    let files = ModelFiles::open(&path).map_err(|e| e.to_string())?;
    let name = mtplx_lite::model::load::model_id(&path, &files);
    let threads = mtplx_lite::backend::cpu::pool::threads_for(cfg.threads);
    let t = std::time::Instant::now();
    let (backend, chosen) = mtplx_lite::backend::open(cfg.backend, threads).map_err(|e| e.to_string())?;
    let model = Llama::on(&files, backend).map_err(|e| e.to_string())?;
    // Loading maps the file and repacks the weights the backend has a layout for: on a second
    // run, with the file in the page cache, this is the repacking's (or the upload's) cost.
    let whereto = match chosen.backend {
        "gpu" => format!("uploaded to {}", chosen.adapter),
        _ => format!("repacked for the kernels at {}", mtplx_lite::backend::cpu::Isa::detect().name()),
    };
    println!("model loaded in {:.0} ms (weights {whereto})\n", t.elapsed().as_secs_f64() * 1e3);
    let (context, most) = (context.max(1), rows.iter().copied().max().unwrap_or(1));
    let limit = model.info().context_length;
    if context + most > limit {
        return Err(format!(
            "--context {context}: with a pass of {most} rows it needs {} positions, more than the model's context of {limit}",
            context + most
        ));
    }
    decode_tok_s(&model, 8); // warm-up: page in the weights
    println!("each pass after {context} cached positions per sequence\n");
    print!("{}", super::bench_rows::table(&name, threads, &super::bench_rows::measure(&model, rows, reps, context)));
    Ok(())
}

pub fn generate(
    cfg: &ModelOpts,
    prompt: &str,
    max_tokens: usize,
    temperature: f32,
    seed: Option<u64>,
    chat: bool,
) -> Result<(), String> {
    let path = cfg.path()?;
    let (backend, _) = mtplx_lite::backend::open(cfg.backend, cfg.threads).map_err(|e| e.to_string())?;
    let loaded = mtplx_lite::model::load::load_on(&path, backend).map_err(|e| e.to_string())?;
    let text = if chat {
        loaded
            .template
            .render(&[ChatMessage { role: "user".into(), content: prompt.into() }], true)
            .map_err(|e| e.to_string())?
    } else {
        prompt.to_string()
    };
    let tokens = loaded.tokenizer.encode(&text, !chat && loaded.tokenizer.adds_bos()).map_err(|e| e.to_string())?;
    let ecfg = EngineConfig {
        budget: cfg.budget,
        draft: cfg.draft,
        prior: super::tune::spec_prior(cfg, &path)?,
        ..EngineConfig::for_model(&*loaded.model, 1, cfg.ctx, cfg.kv_cache_bytes)
    };
    let max_tokens = max_tokens.min(ecfg.ctx.saturating_sub(tokens.len()));
    let head = super::load_head(cfg, &path, &loaded)?;
    let engine = Engine::start_with_head(loaded.model.clone(), loaded.tokenizer.clone(), ecfg, head);
    let params = SamplingParams { temperature, seed, ..SamplingParams::greedy() };
    let (job, rx) =
        JobSpec { stop_tokens: loaded.tokenizer.eos_tokens().to_vec(), ..JobSpec::new(tokens, params, max_tokens) }
            .build();
    engine.submit(job).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout();
    while let Ok(ev) = rx.recv_blocking() {
        match ev {
            Event::Token { text, .. } => {
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
            Event::Done { finish, text, stats } => {
                let _ = writeln!(out, "{text}");
                eprintln!(
                    "[{} | prompt {} tokens, {} cached | {} tokens | prefill {:.1} ms | decode {}]",
                    finish.as_str(),
                    stats.prompt_tokens,
                    stats.cached_tokens,
                    stats.completion_tokens,
                    stats.prefill_time.as_secs_f64() * 1e3,
                    decode_rate(stats.completion_tokens, stats.decode_time)
                );
                let spec = &stats.spec;
                if spec.verify_calls > 0 {
                    eprintln!(
                        "[{}: {} of {} drafted tokens accepted in {} verify passes | by depth {:?} of {:?} | draft {:.1} ms, verify {:.1} ms]",
                        spec.drafter,
                        spec.accepted,
                        spec.drafted,
                        spec.verify_calls,
                        spec.accepted_by_depth,
                        spec.drafted_by_depth,
                        spec.draft_time.as_secs_f64() * 1e3,
                        spec.verify_time.as_secs_f64() * 1e3
                    );
                }
                break;
            }
        }
    }
    Ok(())
}

/// Decode speed as `generate` prints it. The first token comes out of the prefill, and the
/// decode clock runs from it to the last one: `n` tokens are `n - 1` decode steps, so with
/// fewer than 2 tokens there is no rate to give.
fn decode_rate(tokens: usize, decode_time: Duration) -> String {
    let secs = decode_time.as_secs_f64();
    if tokens < 2 || secs <= 0.0 {
        return format!("n/a ({tokens} token{}, no decode step timed)", if tokens == 1 { "" } else { "s" });
    }
    format!("{:.1} tok/s", (tokens - 1) as f64 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rate_needs_two_tokens_and_counts_steps() {
        assert!(decode_rate(1, Duration::from_millis(0)).starts_with("n/a"));
        assert!(decode_rate(0, Duration::from_millis(5)).starts_with("n/a"));
        assert_eq!(decode_rate(11, Duration::from_secs(1)), "10.0 tok/s");
    }
}
