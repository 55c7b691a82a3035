//! The demo model (SmolLM2-135M-Instruct, Q4_1 GGUF) against llama.cpp on the same file:
//! tokenizer ids, greedy continuations, and teacher-forced logits
//! (reference made by tests/golden/make_llama_cpp_reference.py).

mod common;

use common::reference::{argmax, check_greedy, check_tokenize, ids, teacher_forced};
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::{LogitsWanted, Model, ModelFiles, SeqBatch, Tokenizer};
use serde_json::Value;
use std::sync::OnceLock;

/// Largest difference allowed between our logits and llama.cpp's on its top-10 tokens. Both
/// quantize activations to ggml's Q8_1 blocks before the integer dot products, but llama.cpp
/// also keeps the KV cache, the attention queries and probabilities in f16, and each strays
/// from the exact float64 logits in its own direction: at worst 1.20 for llama.cpp and 1.50
/// for us (2026-11-30), so their difference can approach the sum. Measured: 1.59. (With our
/// earlier AVX-512 kernel the difference was 1.24 but our own worst error was 1.72: being
/// closer to the exact logits moved us further from llama.cpp's errors.)
const LOGIT_TOL: f32 = 2.0;
/// Share of decisive teacher-forced positions (top-2 margin at least NEAR_TIE) whose top-1
/// token must agree with llama.cpp.
const MIN_TOP1_AGREEMENT: f64 = 0.99;
/// A position whose exact top-2 logits are closer than this is a coin flip for any quantized
/// forward: both implementations stray about 0.15 on average and up to 1.2 from the exact
/// logits. On the positions below it, which of us picks the exact top-1 changes with the
/// kernel (AVX2 or AVX-512) without either being more accurate, so only the positions above it
/// are compared with the exact forward.
const EXACT_NEAR_TIE: f64 = 0.5;

struct Demo {
    model: Llama,
    tok: Tokenizer,
    reference: Value,
}

fn demo() -> &'static Demo {
    static DEMO: OnceLock<Demo> = OnceLock::new();
    DEMO.get_or_init(|| {
        let files = ModelFiles::open(common::demo_model()).expect("demo model loads");
        let tok = Tokenizer::from_gguf_metadata(&files.metadata).expect("demo tokenizer");
        let model = Llama::load(&files, 2).expect("demo model builds");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/reference/smollm2_llama_cpp.json");
        let reference = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        Demo { model, tok, reference }
    })
}

#[test]
fn tokenizer_matches_llama_cpp() {
    check_tokenize(&demo().tok, &demo().reference);
}

/// A step whose top-2 logits (llama.cpp's) are closer than this is a near-tie: both
/// implementations stray up to about 0.7 from the exact logits (measured below), so either
/// choice is right and the continuations may part there.
const NEAR_TIE: f32 = 1.0;

#[test]
fn greedy_tokens_match_llama_cpp_up_to_the_first_near_tie() {
    let d = demo();
    let identical = check_greedy(&d.model, &d.tok, &d.reference, NEAR_TIE);
    eprintln!("greedy: {identical} of 3 prompts identical over all 32 tokens");
}

fn exact() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/reference/smollm2_exact.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn teacher_forced_logits_agree_with_llama_cpp() {
    let d = demo();
    let tf = &d.reference["teacher_forced"];
    let tokens = ids(&tf["ids"]);
    let top10 = tf["top10"].as_array().unwrap();
    let exact = exact();
    let exact10 = exact["top10"].as_array().unwrap();
    assert_eq!(ids(&exact["ids"]), tokens);
    let (mut ours_err, mut theirs_err, mut n_err) = (0f64, 0f64, 0usize);
    let (mut ours_worst, mut theirs_worst) = (0f64, 0f64);
    // Positions where each implementation's top-1 is the exact forward pass's top-1, among
    // those whose exact top-2 margin is at least EXACT_NEAR_TIE.
    let (mut ours_exact, mut theirs_exact, mut exact_decisive) = (0usize, 0usize, 0usize);
    let a = teacher_forced(&d.model, tf, tokens.len(), NEAR_TIE, |pos, row| {
        let want = &top10[pos];
        let want_ids = ids(&want["ids"]);
        let want_logits: Vec<f32> =
            want["logits"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let exact_top1 = ids(&exact10[pos]["ids"])[0];
        let exact_logits = exact10[pos]["logits"].as_array().unwrap();
        if exact_logits[0].as_f64().unwrap() - exact_logits[1].as_f64().unwrap() >= EXACT_NEAR_TIE {
            exact_decisive += 1;
            ours_exact += (argmax(row) == exact_top1) as usize;
            theirs_exact += (want_ids[0] == exact_top1) as usize;
        }
        // Distance of each implementation from the exact logits, on tokens both top-10s share.
        let ex = &exact10[pos];
        for (id, v) in ids(&ex["ids"]).iter().zip(ex["logits"].as_array().unwrap()) {
            if let Some(j) = want_ids.iter().position(|w| w == id) {
                let v = v.as_f64().unwrap();
                ours_err += (row[*id as usize] as f64 - v).abs();
                theirs_err += (want_logits[j] as f64 - v).abs();
                ours_worst = ours_worst.max((row[*id as usize] as f64 - v).abs());
                theirs_worst = theirs_worst.max((want_logits[j] as f64 - v).abs());
                n_err += 1;
            }
        }
    });
    let (agree, decisive, decisive_agree, worst) = (a.agree, a.decisive, a.decisive_agree, a.worst);
    let (ours_err, theirs_err) = (ours_err / n_err as f64, theirs_err / n_err as f64);
    eprintln!(
        "teacher-forced over {} positions: top-1 agrees with llama.cpp at {agree} ({:.1}%), at {decisive_agree} of {decisive} decisive positions; \
         worst logit difference {worst:.3}; mean distance from exact logits: ours {ours_err:.4}, llama.cpp {theirs_err:.4}; \
         top-1 equal to the exact forward's at {exact_decisive} positions with an exact margin of {EXACT_NEAR_TIE}: ours {ours_exact}, llama.cpp {theirs_exact}; \
         worst distance from the exact logits: ours {ours_worst:.3}, llama.cpp {theirs_worst:.3}",
        top10.len(),
        100.0 * agree as f64 / top10.len() as f64
    );
    assert!(top10.len() >= 200);
    assert!(
        decisive_agree as f64 >= MIN_TOP1_AGREEMENT * decisive as f64,
        "{decisive_agree} of {decisive} decisive positions agree"
    );
    assert!(worst <= LOGIT_TOL, "worst logit difference {worst} > {LOGIT_TOL}");
    assert!(exact_decisive >= 150, "only {exact_decisive} positions have an exact top-2 margin of {EXACT_NEAR_TIE}");
    assert_eq!(ours_exact, exact_decisive, "we miss the exact top-1 where its margin is at least {EXACT_NEAR_TIE}");
    assert!(
        ours_err <= 1.15 * theirs_err,
        "we stray further from the exact logits ({ours_err:.4}) than llama.cpp ({theirs_err:.4})"
    );
}

/// One step of `seqs` (each a context of its own, then one token), as one batched pass or one
/// pass per sequence; the logits per sequence.
fn step(model: &Llama, contexts: &[Vec<u32>], next: &[u32], together: bool) -> Vec<Vec<f32>> {
    let mut caches: Vec<_> = contexts
        .iter()
        .map(|ctx| {
            let mut c = model.new_cache(64);
            model.forward(&mut [SeqBatch { tokens: ctx, cache: &mut c, logits: LogitsWanted::Last }]).unwrap();
            c
        })
        .collect();
    let mut batch: Vec<SeqBatch<'_>> = caches
        .iter_mut()
        .zip(next)
        .map(|(cache, t)| SeqBatch { tokens: std::slice::from_ref(t), cache, logits: LogitsWanted::Last })
        .collect();
    if together {
        model.forward(&mut batch).unwrap()
    } else {
        batch.iter_mut().map(|b| model.forward(std::slice::from_mut(b)).unwrap().remove(0)).collect()
    }
}

#[test]
fn a_sequence_gets_the_same_logits_alone_or_in_a_batch() {
    // On a CPU with AVX2 (and no AVX-512) this runs the repacked weights and their kernels:
    // continuous batching and speculative verification rely on a row's result not depending
    // on the rows beside it.
    let d = demo();
    let contexts: Vec<Vec<u32>> =
        (0..5u32).map(|s| (0..3 + 2 * s).map(|i| (i * 7919 + 13 + s * 101) % 49152).collect()).collect();
    let next: Vec<u32> = (0..5u32).map(|s| 1000 + 17 * s).collect();
    let alone = step(&d.model, &contexts, &next, false);
    for k in [2, 5] {
        let together = step(&d.model, &contexts[..k], &next[..k], true);
        for (s, (a, b)) in alone.iter().zip(&together).enumerate() {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "sequence {s} of {k}: logits differ");
        }
    }
}

/// A prompt prefilled in chunks, each chunk's rows beside its cache so far.
fn prefill(model: &Llama, prompt: &[u32], chunks: &[usize]) -> (mtplx_lite::model::KvCache, Vec<f32>) {
    let mut cache = model.new_cache(prompt.len() + 32);
    let (mut at, mut logits) = (0, Vec::new());
    for &n in chunks.iter().cycle() {
        if at == prompt.len() {
            break;
        }
        let end = (at + n).min(prompt.len());
        let mut batch = [SeqBatch { tokens: &prompt[at..end], cache: &mut cache, logits: LogitsWanted::All }];
        logits.extend(model.forward(&mut batch).unwrap().remove(0));
        at = end;
    }
    (cache, logits)
}

fn greedy(model: &Llama, cache: &mut mtplx_lite::model::KvCache, last: &[f32], n: usize) -> Vec<u32> {
    let mut out = vec![argmax(last)];
    while out.len() < n {
        let t = [*out.last().unwrap()];
        let row = model.forward(&mut [SeqBatch { tokens: &t, cache, logits: LogitsWanted::Last }]).unwrap().remove(0);
        out.push(argmax(&row));
    }
    out
}

#[test]
fn chunked_prefill_gives_the_logits_and_the_greedy_answer_of_a_whole_one() {
    // Chunked prefill (the scheduler's step budget) must not change what a prompt produces:
    // every row goes through the same tiled attention whatever its batch, so the bits agree.
    let d = demo();
    let text = "The quick brown fox jumps over the lazy dog; it then writes a careful report. ".repeat(12);
    let prompt: Vec<u32> = d.tok.encode(&text, true).unwrap();
    assert!(prompt.len() > 200, "{} tokens", prompt.len());
    let vocab = d.model.info().vocab_size;
    let (mut whole_cache, whole) = prefill(&d.model, &prompt, &[prompt.len()]);
    let whole_answer = greedy(&d.model, &mut whole_cache, &whole[whole.len() - vocab..], 12);
    for chunks in [&[64][..], &[37, 5, 1, 100]] {
        let (mut cache, chunked) = prefill(&d.model, &prompt, chunks);
        assert_eq!(chunked.len(), whole.len());
        for (row, (a, b)) in whole.chunks(vocab).zip(chunked.chunks(vocab)).enumerate() {
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "chunks {chunks:?}: the logits of position {row} differ"
            );
        }
        let answer = greedy(&d.model, &mut cache, &chunked[chunked.len() - vocab..], 12);
        assert_eq!(answer, whole_answer, "chunks {chunks:?}");
    }
}
