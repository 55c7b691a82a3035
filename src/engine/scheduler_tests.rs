//! The scheduler under long prompts: chunked prefill gives the tokens of a whole prefill, a
//! short request is not held behind a long prefill, running streams keep decoding, and a
//! cancelled prefill stops within one chunk.

use super::job::{Event, FinishReason, Job, SamplingParams};
use super::step_budget::StepBudget;
use super::toy_model::*;
use super::{DraftConfig, Engine, EngineConfig};
use crate::engine::detok::tests::ByteDecoder;
use std::sync::Arc;

fn engine(model: &Arc<ToyModel>, max_batch_tokens: usize, prefill_chunk: usize) -> Engine {
    // Unpaced: these tests count tokens per step, which pacing would tie to the clock.
    let budget = StepBudget { max_batch_tokens, prefill_chunk, max_step_ratio: 0.0 };
    let cfg = EngineConfig {
        queue_depth: 8,
        ctx: 1024,
        kv_cache_bytes: 1 << 24,
        budget,
        draft: DraftConfig::default(),
        prior: Default::default(),
        disk: None,
    };
    Engine::start(model.clone(), Arc::new(ByteDecoder), cfg)
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> (Job, async_channel::Receiver<Event>) {
    Job::new(prompt, SamplingParams::greedy(), max_tokens)
}

fn long_prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i * 13 % TOY_VOCAB) as u32).collect()
}

#[test]
fn a_prompt_in_small_chunks_gives_the_tokens_of_one_whole_prefill() {
    let model = Arc::new(ToyModel::new(Gate::open_gate()));
    let e = engine(&model, 5, 7);
    let prompt = long_prompt(600);
    let (j, rx) = greedy(prompt.clone(), 12);
    e.submit(j).unwrap();
    let o = collect(&rx);
    assert_eq!(o.tokens, greedy_alone(&prompt, 12, &[]));
    assert_eq!(o.stats.prefill_chunks, 600usize.div_ceil(7));
    assert!(model.log.lock().unwrap().iter().all(|pass| pass.iter().sum::<usize>() <= 7));
}

#[test]
fn beside_a_long_prefill_streams_keep_decoding_and_a_short_request_goes_first() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let e = engine(&model, 8, 64);
    let _open = OpenOnDrop(model.clone());
    let (a, rx_a) = greedy(vec![1, 2, 3], 400);
    e.submit(a).unwrap();
    model.gate.allow(1);
    assert!(matches!(next_event(&rx_a), Event::Token { .. }));
    // The thread now waits in its next pass; both jobs join right after it.
    let long = long_prompt(900);
    let (l, rx_l) = greedy(long.clone(), 4);
    let (s, rx_s) = greedy(vec![9; 5], 2);
    e.submit(l).unwrap();
    e.submit(s).unwrap();
    model.gate.allow(3);
    assert!(matches!(next_event(&rx_s), Event::Token { .. }), "the short request waits behind the long prefill");
    assert!(rx_l.is_empty(), "the long prompt cannot be prefilled in three steps of 8 tokens");
    model.gate.open();
    let (ol, os) = (collect(&rx_l), collect(&rx_s));
    assert_eq!(os.stats.prefill_chunks, 1);
    assert_eq!(ol.tokens, greedy_alone(&long, 4, &[]));
    assert!(ol.stats.prefill_chunks >= 900 / 8, "{:?}", ol.stats);
    let log = model.log.lock().unwrap();
    // While the long prompt was prefilled, every pass also fed the stream's token (the first
    // entry of a pass is the oldest sequence, the stream) and stayed within the budget.
    let prefilling: Vec<_> = log.iter().filter(|pass| pass.iter().any(|&n| n > 5)).collect();
    assert!(prefilling.len() >= 900 / 8);
    assert!(prefilling.iter().all(|pass| pass[0] == 1 && pass.iter().sum::<usize>() <= 8), "{prefilling:?}");
    drop(log);
    let oa = collect(&rx_a);
    assert_eq!(oa.finish, FinishReason::Length);
}

#[test]
fn a_cancelled_long_prefill_stops_within_one_chunk_and_frees_its_cache() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let e = engine(&model, 8, 16);
    let _open = OpenOnDrop(model.clone());
    let o = cancel_after(&model, &e, greedy(long_prompt(1000), 4), 2);
    assert_eq!(o.finish, FinishReason::Cancelled);
    assert!(o.tokens.is_empty());
    assert!(o.stats.prefill_chunks <= 3, "{} chunks", o.stats.prefill_chunks);
    assert_eq!(o.stats.prefilled_tokens, 16 * o.stats.prefill_chunks);
    assert_eq!((o.stats.kv_after.sequences, o.stats.kv_after.bytes), (0, 0));
    assert_eq!(e.running(), 0);
}
