//! Comparing our forward pass with llama.cpp's on the same GGUF file: the reference JSON that
//! `tests/golden/make_*llama_cpp_reference.py` write (tokenizer ids, greedy continuations,
//! teacher-forced top-10 logits), checked the same way for every model.

use mtplx_lite::model::{LogitsWanted, Model, SeqBatch, Tokenizer};
use serde_json::Value;

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

pub fn argmax(xs: &[f32]) -> u32 {
    xs.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

/// Every `tokenize` case of `reference` gives llama.cpp's ids (without BOS).
pub fn check_tokenize(tok: &Tokenizer, reference: &Value) {
    let cases = reference["tokenize"].as_array().unwrap();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tok.encode(text, false).unwrap(), ids(&case["ids"]), "text {text:?}");
    }
    assert!(cases.len() >= 10);
}

/// Each `greedy` case: our greedy continuation of its prompt ids equals llama.cpp's up to its
/// first near-tie (a step whose top-2 margin is below `near_tie`, where either choice is right).
/// Returns how many continuations were identical all the way.
pub fn check_greedy(model: &dyn Model, tok: &Tokenizer, reference: &Value, near_tie: f32) -> usize {
    let mut identical = 0;
    for case in reference["greedy"].as_array().unwrap() {
        let prompt = ids(&case["prompt_ids"]);
        let want = ids(&case["greedy_ids"]);
        let decisive = floats(&case["top2_margins"]).iter().position(|&m| m < near_tie).unwrap_or(want.len());
        let mut cache = model.new_cache(prompt.len() + want.len() + 8);
        let mut tokens = prompt.clone();
        let mut got = Vec::new();
        for _ in 0..want.len() {
            let batch = &mut [SeqBatch { tokens: &tokens, cache: &mut cache, logits: LogitsWanted::Last }];
            let next = argmax(&model.forward(batch).unwrap().remove(0));
            got.push(next);
            tokens = vec![next];
        }
        identical += (got == want) as usize;
        let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        eprintln!(
            "greedy: {same} of {} identical (first near-tie at step {decisive}): {:?}",
            want.len(),
            tok.decode(&got)
        );
        assert_eq!(
            got[..decisive],
            want[..decisive],
            "ours {:?} vs llama.cpp {:?}",
            tok.decode(&got),
            tok.decode(&want)
        );
    }
    identical
}

/// How our teacher-forced logits compare with llama.cpp's top-10 per position.
#[derive(Debug, Default)]
pub struct Agreement {
    pub positions: usize,
    /// Positions whose top-1 is llama.cpp's.
    pub agree: usize,
    /// Positions whose llama.cpp top-2 margin is at least the near-tie bound, and how many of
    /// those agree.
    pub decisive: usize,
    pub decisive_agree: usize,
    /// Largest difference on llama.cpp's top-10 tokens.
    pub worst: f32,
}

/// Our logits for `case` (`ids` and llama.cpp's `top10` per position), computed in prompt
/// chunks of `chunk` tokens so that only a chunk's rows of logits are ever held, compared
/// position by position; `each` also sees every position's row.
pub fn teacher_forced(
    model: &dyn Model,
    case: &Value,
    chunk: usize,
    near_tie: f32,
    mut each: impl FnMut(usize, &[f32]),
) -> Agreement {
    let tokens = ids(&case["ids"]);
    let top10 = case["top10"].as_array().unwrap();
    let vocab = model.info().vocab_size;
    let mut cache = model.new_cache(tokens.len() + 8);
    let mut a = Agreement { positions: top10.len(), ..Agreement::default() };
    for (c, piece) in tokens.chunks(chunk).enumerate() {
        let batch = &mut [SeqBatch { tokens: piece, cache: &mut cache, logits: LogitsWanted::All }];
        let logits = model.forward(batch).unwrap().remove(0);
        for (i, row) in logits.chunks_exact(vocab).enumerate() {
            let pos = c * chunk + i;
            let Some(want) = top10.get(pos) else { continue };
            let (want_ids, want_logits) = (ids(&want["ids"]), floats(&want["logits"]));
            let same = argmax(row) == want_ids[0];
            a.agree += same as usize;
            if want_logits[0] - want_logits[1] >= near_tie {
                a.decisive += 1;
                a.decisive_agree += same as usize;
            }
            for (id, v) in want_ids.iter().zip(&want_logits) {
                a.worst = a.worst.max((row[*id as usize] - v).abs());
            }
            each(pos, row);
        }
    }
    a
}
