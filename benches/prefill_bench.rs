//! Prefill and decode tokens/s of a real model at chosen prompt lengths and thread counts (run:
//! `cargo bench --bench prefill_bench -- pp=512,4096,8192 tg=64,128 threads=2 reps=2`; add
//! `ubatch=0,256` to also prefill in forward passes of at most 256 tokens, as the server does a
//! lone prompt with its default `--prefill-chunk`).
//!
//! `mtplx-lite bench` always runs one thread beside the chosen count and one prompt length;
//! this measures only what is asked, so that long prompts (issue 11: 4,096 and 8,192 tokens
//! against 512) fit in a measuring session. The model is `model=PATH`, or the demo model in
//! `~/.cache/mtplx-lite`. Each prompt is prefilled in one forward pass, as `bench` does.

use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::{LogitsWanted, Model, ModelFiles, SeqBatch};
use std::path::PathBuf;
use std::time::Instant;

/// Prompt tokens spread over the vocabulary, as `mtplx-lite bench` makes them.
fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % vocab.max(1)) as u32).collect()
}

/// Prefill tokens/s, in forward passes of at most `step` tokens.
fn prefill_tok_s(model: &dyn Model, prompt: usize, reps: usize, step: usize) -> f64 {
    let toks = tokens(prompt, model.info().vocab_size);
    (0..reps)
        .map(|_| {
            let mut cache = model.new_cache(prompt);
            let t = Instant::now();
            for part in toks.chunks(step) {
                let mut batch = [SeqBatch { tokens: part, cache: &mut cache, logits: LogitsWanted::Last }];
                model.forward(&mut batch).expect("prefill");
            }
            prompt as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn decode_tok_s(model: &dyn Model, n: usize) -> f64 {
    let mut cache = model.new_cache(n + 1);
    let vocab = model.info().vocab_size.max(1) as u32;
    let mut tok = model.info().bos_token.unwrap_or(0) % vocab;
    let t = Instant::now();
    for _ in 0..n {
        let mut batch =
            [SeqBatch { tokens: std::slice::from_ref(&tok), cache: &mut cache, logits: LogitsWanted::Last }];
        let logits = model.forward(&mut batch).expect("decode");
        let row = &logits[0];
        tok =
            row.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn list(v: &str) -> Vec<usize> {
    v.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("a number")).collect()
}

fn main() {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut model = PathBuf::from(home).join(".cache/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf");
    let (mut pp, mut tg, mut threads, mut reps, mut ubatch) = (vec![512], vec![64], vec![2], 2, vec![0]);
    for arg in std::env::args().skip(1) {
        match arg.split_once('=') {
            Some(("pp", v)) => pp = list(v),
            Some(("tg", v)) => tg = list(v),
            Some(("threads", v)) => threads = list(v),
            Some(("reps", v)) => reps = v.parse().expect("a number"),
            Some(("ubatch", v)) => ubatch = list(v),
            Some(("model", v)) => model = PathBuf::from(v),
            _ => {} // `cargo bench` passes `--bench`
        }
    }
    let files = ModelFiles::open(&model).expect("the model opens");
    println!("| threads | test | t/s |");
    println!("| ---: | --- | ---: |");
    for &th in &threads {
        let m = Llama::load(&files, th).expect("the model loads");
        decode_tok_s(&m, 8); // warm-up: page in the weights
        for &p in &pp {
            // Passes of at most `u` tokens (0: one pass); a `u` past the prompt is one pass too,
            // measured once.
            let mut steps: Vec<usize> = Vec::new();
            for step in ubatch.iter().map(|&u| if u == 0 { p } else { u.min(p) }) {
                if !steps.contains(&step) {
                    steps.push(step);
                }
            }
            for step in steps {
                let test = if step == p { format!("pp{p}") } else { format!("pp{p} (ubatch {step})") };
                println!("| {th} | {test} | {:.2} |", prefill_tok_s(&m, p, reps, step));
            }
        }
        for &n in &tg {
            println!("| {th} | tg{n} | {:.2} |", decode_tok_s(&m, n));
        }
    }
}
