//! The streamed answer as the client receives it, driven by hand-fed engine events: an engine
//! error in the middle of a stream, keep-alive comments while nothing else is sent, and the
//! request's deadline (`--request-timeout`), streamed and whole; and a whole answer's calls put
//! together from their pieces.

use super::*;
use crate::api::idle_timer::ManualClock;
use crate::api::state::InFlightGuard;
use crate::api::stream::stream_every;
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
        grammar: Default::default(),
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
        draft: Default::default(),
        ignore_eos: false,
        format: None,
        tools: None,
    }
}

/// A chat generation fed by the returned sender, with `before` already waiting in its channel
/// (an event waiting wins over the deadline, so these are taken before a deadline passes).
fn generation(
    metrics: &Arc<Metrics>,
    params: GenParams,
    timeout: Option<Duration>,
    before: Vec<Event>,
) -> (Generation, async_channel::Sender<Event>, Arc<AtomicBool>) {
    let (events, rx) = async_channel::unbounded();
    for ev in before {
        events.send_blocking(ev).unwrap();
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let gen = Generation::new(
        llm(),
        metrics.clone(),
        Kind::Chat,
        "chatcmpl-test".into(),
        "/v1/chat/completions",
        3,
        Some(5),
        params,
        rx,
        cancel.clone(),
        Instant::now(),
        timeout,
    );
    (gen, events, cancel)
}

/// Longest wait for any one piece of output: only bounds a broken stream, never paces one.
const OUTPUT_DEADLINE: Duration = Duration::from_secs(30);

/// A streamed chat driven by hand: the test sends the engine's events and reads what the client
/// would, piece by piece, so that it can wait for output before sending more. Its keep-alives
/// run on `clock`, which only the test moves.
struct Live {
    clock: Arc<ManualClock>,
    events: async_channel::Sender<Event>,
    out: async_channel::Receiver<Vec<u8>>,
    stream: std::thread::JoinHandle<()>,
    metrics: Arc<Metrics>,
    cancel: Arc<AtomicBool>,
}

impl Live {
    fn start(keep_alive: Duration) -> Live {
        Live::with(keep_alive, params(), None, Vec::new())
    }

    fn with(keep_alive: Duration, params: GenParams, timeout: Option<Duration>, before: Vec<Event>) -> Live {
        let metrics = Arc::new(Metrics::new(16, BuildInfo::current("cpu", "toy")));
        let (gen, events, cancel) = generation(&metrics, params, timeout, before);
        let (out_tx, out) = async_channel::unbounded();
        let guard = InFlightGuard::new(&metrics);
        let clock = ManualClock::new();
        let timer = clock.timer();
        let stream = std::thread::spawn(move || smol::block_on(stream_every(gen, out_tx, guard, keep_alive, timer)));
        Live { clock, events, out, stream, metrics, cancel }
    }

    fn send(&self, ev: Event) {
        self.events.send_blocking(ev).expect("the stream stopped taking events");
    }

    /// The next piece of output, as text.
    fn next(&self) -> String {
        let piece = smol::block_on(smol::future::or(async { self.out.recv().await.ok() }, async {
            async_io::Timer::after(OUTPUT_DEADLINE).await;
            panic!("no output within {OUTPUT_DEADLINE:?}")
        }))
        .expect("the stream ended early");
        String::from_utf8(piece).unwrap()
    }

    /// Waits for the stream to end; returns everything it sent that was not read yet.
    fn finish(self) -> (String, Arc<Metrics>) {
        let (rest, metrics, _) = self.finish_keeping_events();
        (rest, metrics)
    }

    /// [`Live::finish`], keeping the engine's side of the channel open.
    fn finish_keeping_events(self) -> (String, Arc<Metrics>, async_channel::Sender<Event>) {
        let mut rest = String::new();
        while let Ok(b) = smol::block_on(smol::future::or(async { self.out.recv().await.map_err(|_| ()) }, async {
            async_io::Timer::after(OUTPUT_DEADLINE).await;
            panic!("the stream did not end within {OUTPUT_DEADLINE:?}; it sent {rest:?}")
        })) {
            rest.push_str(&String::from_utf8(b).unwrap());
        }
        self.stream.join().unwrap();
        (rest, self.metrics, self.events)
    }
}

/// Streams a chat whose engine events are all queued at once; returns what the client reads.
fn run(events: Vec<Event>) -> (String, Arc<Metrics>) {
    let live = Live::start(Duration::from_secs(15));
    for ev in events {
        live.send(ev);
    }
    live.finish()
}

const KEEP_ALIVE: &str = ": keep-alive\n\n";

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
    let (text, metrics) = run(vec![token("Hel"), token("lo"), failed]);
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

/// Keep-alive comments come while the engine is silent, a tick after the last output and never
/// sooner. The keep-alive clock is moved by the test, and the test reads each piece before it
/// moves the clock again, so what it reads does not depend on how busy the machine is.
#[test]
fn keep_alive_comments_fill_the_silence_and_only_the_silence() {
    let tick = Duration::from_secs(15);
    let live = Live::start(tick);
    assert!(live.next().contains("\"role\":\"assistant\""), "the role chunk comes first");
    // Silence (a long prefill): a keep-alive each tick, and nothing else.
    for _ in 0..3 {
        live.clock.advance(tick);
        assert_eq!(live.next(), KEEP_ALIVE);
    }
    // A token half a tick after a keep-alive: the wait restarts from it, so a whole tick after
    // the keep-alive (half a tick after the token) is still too soon for the next one.
    live.clock.advance(tick / 2);
    live.send(token("a"));
    assert!(live.next().contains("\"content\":\"a\""));
    live.clock.advance(tick / 2);
    live.send(token("b"));
    assert!(live.next().contains("\"content\":\"b\""), "a keep-alive came half a tick after a token");
    // Just short of a tick after a token: still none.
    live.clock.advance(tick - Duration::from_millis(1));
    live.send(token("c"));
    assert!(live.next().contains("\"content\":\"c\""), "a keep-alive came before a tick of silence");
    // A tick after a token: one.
    live.clock.advance(tick);
    assert_eq!(live.next(), KEEP_ALIVE, "silence after a token is filled too");
    live.send(Event::Done { finish: FinishReason::Length, text: String::new(), stats: GenStats::default() });
    // The final chunk and `[DONE]` go out together.
    let end = live.next();
    assert!(end.contains("\"finish_reason\":\"length\"") && end.ends_with("data: [DONE]\n\n"), "{end:?}");
    let (rest, metrics) = live.finish();
    assert_eq!(rest, "", "nothing after [DONE]");
    assert_eq!(metrics.http_requests_in_flight.get(), 0);
}

/// The `data:` events of a whole stream: the JSON chunks, after checking that `[DONE]` ends it.
fn chunks_of(text: &str) -> Vec<Value> {
    let events = data_events(text);
    assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
    events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect()
}

fn content_of(chunks: &[Value]) -> String {
    chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect()
}

/// A deadline that has passed by the time the events waiting before it are taken.
const PAST: Duration = Duration::from_millis(1);

#[test]
fn a_stream_past_its_deadline_ends_with_a_timeout_chunk_then_done() {
    let live = Live::with(Duration::from_secs(15), params(), Some(PAST), vec![token("Hel"), token("lo")]);
    let cancel = live.cancel.clone();
    let (text, metrics, events) = live.finish_keeping_events();
    let chunks = chunks_of(&text);
    assert_eq!(content_of(&chunks), "Hello", "{text}");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "error", "{last}");
    assert_eq!(last["error"]["code"], "request_timeout", "{last}");
    assert_eq!(last["error"]["type"], "server_error", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert_eq!(message, "the request ran past --request-timeout (0.001 s), after 2 tokens");
    let rec = &last["mtplx_stats"];
    assert_eq!(rec["status"], "timed_out", "{rec}");
    assert_eq!(rec["error"], message, "{rec}");
    assert_eq!(rec["completion_tokens"], 2, "{rec}");
    assert!(cancel.load(Ordering::Relaxed), "the engine's job is cancelled");
    assert_eq!(metrics.http_requests_in_flight.get(), 0);
    // The engine saw the cancel one step later, 3 tokens on: they are counted when it reports.
    assert_eq!(metrics.llm_generation_tokens_total.get(), 2);
    let stats = GenStats { completion_tokens: 5, ..GenStats::default() };
    events.send_blocking(Event::Done { finish: FinishReason::Cancelled, text: String::new(), stats }).unwrap();
    let deadline = Instant::now() + OUTPUT_DEADLINE;
    while metrics.llm_generation_tokens_total.get() != 5 {
        assert!(Instant::now() < deadline, "the late tokens were never counted");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_stream_whose_deadline_passes_before_its_first_token_ends_the_same_way() {
    let live = Live::with(Duration::from_secs(15), params(), Some(PAST), Vec::new());
    let (text, metrics) = live.finish();
    let chunks = chunks_of(&text);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(content_of(&chunks), "");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "error", "{last}");
    assert_eq!(last["error"]["code"], "request_timeout", "{last}");
    assert!(last["error"]["message"].as_str().unwrap().ends_with("before its first token"), "{last}");
    assert_eq!(last["mtplx_stats"]["status"], "timed_out");
    assert!(last["mtplx_stats"]["ttft_s"].is_null(), "{last}");
    assert_eq!(metrics.http_requests_in_flight.get(), 0);
}

#[test]
fn a_deadline_after_a_stop_sequence_matched_leaves_a_complete_answer() {
    let stop = GenParams { stop: vec!["lo".into()], ..params() };
    // The stop sequence completed the answer; the deadline passes while the engine's report
    // of its end is awaited.
    let live = Live::with(Duration::from_secs(15), stop, Some(PAST), vec![token("Hel"), token("lo")]);
    let (text, _) = live.finish();
    let chunks = chunks_of(&text);
    assert_eq!(content_of(&chunks), "Hel");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop", "{last}");
    assert!(last["error"].is_null(), "{last}");
    assert_eq!(last["mtplx_stats"]["status"], "stop");
}

fn json_body(r: &crate::http::Response) -> Value {
    let crate::http::Body::Full(bytes) = &r.body else { panic!("a whole answer has a full body") };
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn a_whole_answer_past_its_deadline_is_a_504_without_text_and_a_200_with_it() {
    let whole = |before: Vec<Event>| {
        let metrics = Arc::new(Metrics::new(16, BuildInfo::current("cpu", "toy")));
        let unstreamed = GenParams { stream: false, ..params() };
        let (gen, _events, cancel) = generation(&metrics, unstreamed, Some(PAST), before);
        let answer = smol::block_on(crate::api::openai::whole(gen));
        assert!(cancel.load(Ordering::Relaxed), "the engine's job is cancelled");
        let rec = metrics.requests.latest().expect("one record");
        (answer, rec)
    };
    let (answer, rec) = whole(Vec::new());
    let e = answer.expect_err("no text: an error");
    assert_eq!((e.status, e.kind, e.code), (504, "server_error", Some("request_timeout")));
    assert_eq!(e.message, "the request ran past --request-timeout (0.001 s), before its first token");
    assert_eq!(e.clone().into_response().status, 504);
    assert_eq!(rec.record.status, FinishStatus::TimedOut);
    assert_eq!(rec.record.error.as_deref(), Some(e.message.as_str()));

    let (answer, rec) = whole(vec![token("Hel"), token("lo")]);
    let r = answer.expect("text: a 200 with it");
    assert_eq!(r.status, 200);
    let v = json_body(&r);
    assert_eq!(v["choices"][0]["message"]["content"], "Hello", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    assert_eq!(v["mtplx_stats"]["status"], "timed_out", "{v}");
    assert_eq!(rec.record.status, FinishStatus::TimedOut);
}

#[test]
fn whole_answers_put_each_call_together_from_its_pieces() {
    let mut w = WholeCalls::default();
    w.add("c0".into(), None, "{\"lost\":1}".into());
    w.add("c0".into(), Some("f".into()), String::new());
    w.add("c0".into(), None, "{\"a\":".into());
    w.add("c0".into(), None, "1}".into());
    w.add("c1".into(), Some("g".into()), "{}".into());
    let want =
        [("c0", "f", "{\"a\":1}"), ("c1", "g", "{}")].map(|(i, n, a)| (i.to_string(), n.to_string(), a.to_string()));
    assert_eq!(w.calls, want);
}
