//! The streamed answer as the client receives it, driven by hand-fed engine events: an engine
//! error in the middle of a stream, and keep-alive comments while nothing else is sent.

use super::*;
use crate::engine::toy_model::{Gate, ToyModel};
use crate::engine::{Engine, EngineConfig, GenStats, SamplingParams};
use crate::metrics::BuildInfo;
use crate::model::{ChatTemplate, Model, Tokenizer};
use serde_json::Value;
use std::path::Path;

fn llm() -> Arc<Llm> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers/llama2");
    let tokenizer = Arc::new(Tokenizer::from_hf_dir(&dir).unwrap());
    let model = Arc::new(ToyModel::new(Gate::open_gate()));
    let info = model.info().clone();
    let cfg = EngineConfig::for_model(&*model, 4, None, None);
    Arc::new(Llm {
        engine: Engine::start(model, tokenizer.clone(), cfg),
        tokenizer,
        template: ChatTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}", "<s>", "</s>").unwrap(),
        info,
        model_id: "toy".into(),
        created: 0,
        ctx: 1024,
    })
}

fn params() -> GenParams {
    GenParams {
        max_tokens: Some(8),
        sampling: SamplingParams::greedy(),
        stop: Vec::new(),
        logprobs: None,
        stream: true,
        include_usage: false,
    }
}

/// Streams a chat whose engine events are `events`, each sent after its delay; returns the
/// bytes the client would read.
fn run(events: Vec<(Duration, Event)>, keep_alive: Duration) -> (String, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(16, BuildInfo::current("cpu", "toy")));
    let (tx, rx) = async_channel::unbounded();
    let gen = Generation::new(
        llm(),
        metrics.clone(),
        Kind::Chat,
        "chatcmpl-test".into(),
        "/v1/chat/completions",
        3,
        Some(5),
        params(),
        rx,
        Arc::new(AtomicBool::new(false)),
        Instant::now(),
    );
    let feeder = std::thread::spawn(move || {
        for (delay, ev) in events {
            std::thread::sleep(delay);
            tx.send_blocking(ev).unwrap();
        }
    });
    let (out_tx, out_rx) = async_channel::unbounded();
    smol::block_on(stream_every(gen, out_tx, InFlightGuard::new(&metrics), keep_alive));
    feeder.join().unwrap();
    let mut text = Vec::new();
    while let Ok(b) = out_rx.try_recv() {
        text.extend_from_slice(&b);
    }
    (String::from_utf8(text).unwrap(), metrics)
}

fn token(text: &str) -> Event {
    Event::Token { id: 5, text: text.into(), logprob: None, top_logprobs: Vec::new() }
}

fn data_events(text: &str) -> Vec<&str> {
    text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect()
}

#[test]
fn an_engine_error_mid_stream_ends_with_an_error_chunk_then_done() {
    let failed = Event::Done {
        finish: FinishReason::Error("the model failed: a NaN in layer 3".into()),
        text: String::new(),
        stats: GenStats::default(),
    };
    let (text, metrics) = run(vec![(Duration::ZERO, token("Hel")), (Duration::ZERO, token("lo")), (Duration::ZERO, failed)], Duration::from_secs(15));
    let events = data_events(&text);
    assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(content, "Hello");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "error", "{last}");
    assert_eq!(last["error"]["code"], "engine_error");
    assert!(last["error"]["message"].as_str().unwrap().contains("a NaN in layer 3"), "{last}");
    assert_eq!(last["mtplx_stats"]["status"], "errored");
    // The stream is over: nothing stays counted in flight.
    assert_eq!(metrics.http_requests_in_flight.get(), 0);
}

#[test]
fn keep_alive_comments_fill_the_silence_and_only_the_silence() {
    let tick = Duration::from_millis(200);
    let done = Event::Done { finish: FinishReason::Length, text: String::new(), stats: GenStats::default() };
    // Silence for over three ticks (a long prefill), then tokens faster than the tick.
    let events = vec![(tick * 7 / 2, token("a")), (tick / 20, token("b")), (tick / 20, done)];
    let (text, _) = run(events, tick);
    let first_token = text.find("\"content\":\"a\"").unwrap();
    let before = text[..first_token].matches(": keep-alive\n\n").count();
    let after = text[first_token..].matches(": keep-alive\n\n").count();
    // Three are due; a late feeder thread (a loaded machine) only adds more.
    assert!(before >= 3, "{before} keep-alive comments during the silence: {text}");
    assert_eq!(after, 0, "keep-alive comments while tokens flow: {text}");
    assert_eq!(data_events(&text).last(), Some(&"[DONE]"));
}
