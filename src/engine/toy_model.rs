//! Test doubles for the engine: a deterministic toy model that honours the KV cache contract,
//! a gate that lets a test run the decode thread one forward pass at a time, and helpers.

use super::job::{Event, FinishReason, GenStats};
use crate::backend::cpu::float16::f16_to_f32;
use crate::model::{ForwardError, KvCache, LogitsWanted, Model, ModelInfo, SeqBatch};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub(crate) const TOY_VOCAB: usize = 300;
pub(crate) const TOY_LAYERS: usize = 2;
/// A test waiting longer than this for the engine has found a hang.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Lets forward passes through one at a time (or all, once opened).
#[derive(Default)]
pub(crate) struct Gate {
    /// (permits left, or None when open; passes completed)
    state: Mutex<(Option<u64>, u64)>,
    cv: Condvar,
}

impl Gate {
    pub fn closed() -> Gate {
        Gate { state: Mutex::new((Some(0), 0)), cv: Condvar::new() }
    }
    pub fn open_gate() -> Gate {
        Gate { state: Mutex::new((None, 0)), cv: Condvar::new() }
    }
    fn pass(&self) {
        let mut st = self.state.lock().unwrap();
        while st.0 == Some(0) {
            st = self.cv.wait(st).unwrap();
        }
        if let Some(p) = st.0.as_mut() {
            *p -= 1;
        }
        st.1 += 1;
        self.cv.notify_all();
    }
    pub fn allow(&self, n: u64) {
        let mut st = self.state.lock().unwrap();
        if let Some(p) = st.0.as_mut() {
            *p += n;
        }
        self.cv.notify_all();
    }
    pub fn open(&self) {
        self.state.lock().unwrap().0 = None;
        self.cv.notify_all();
    }
    /// Forward passes that have started computing.
    pub fn passed(&self) -> u64 {
        self.state.lock().unwrap().1
    }
}

/// Logits are a pseudo-random function of everything in the sequence's cache (every layer's keys
/// and values up to the position), so any cache mix-up, wrong truncation or misplaced position
/// changes the tokens.
pub(crate) struct ToyModel {
    info: ModelInfo,
    pub gate: Gate,
    /// Tokens fed per sequence, per forward pass.
    pub log: Mutex<Vec<Vec<usize>>>,
    /// While set, every forward pass panics (a model bug the engine must survive).
    pub poison: std::sync::atomic::AtomicBool,
    /// `Some(p)`: the text mostly repeats itself with period p (see [`ToyModel::echoing`]).
    echo: Option<usize>,
}

impl ToyModel {
    pub fn new(gate: Gate) -> ToyModel {
        ToyModel {
            info: ModelInfo {
                arch: "toy".into(),
                name: "toy".into(),
                vocab_size: TOY_VOCAB,
                context_length: 1024,
                n_layers: TOY_LAYERS,
                n_heads: 1,
                n_kv_heads: 1,
                head_dim: 2,
                hidden: 2,
                bos_token: None,
                eos_tokens: Vec::new(),
            },
            gate,
            log: Mutex::new(Vec::new()),
            poison: Default::default(),
            echo: None,
        }
    }

    /// A model whose favourite next token, at three positions in four, is the one `period`
    /// positions back, so n-gram drafts are often right and sometimes wrong; the logits stay a
    /// function of the whole cache.
    pub fn echoing(mut self, period: usize) -> ToyModel {
        self.echo = Some(period);
        self
    }

    pub fn with_eos(mut self, eos: u32) -> ToyModel {
        self.info.eos_tokens = vec![eos];
        self
    }

    fn row(&self, cache: &KvCache, pos: usize, out: &mut Vec<f32>) {
        let start = out.len();
        ToyModel::hashed_row(cache, pos, out);
        if let Some(p) = self.echo.filter(|&p| pos + 1 >= p) {
            let back = f16_to_f32(cache.k[0][2 * (pos + 1 - p)]) as usize;
            let h = mix(out[start].to_bits() as u64);
            if !h.is_multiple_of(4) {
                out[start + back] += 9.0;
            }
        }
    }

    fn hashed_row(cache: &KvCache, pos: usize, out: &mut Vec<f32>) {
        let mut h = 0x5EED_u64;
        for q in 0..=pos {
            for l in 0..cache.k.len() {
                for x in [&cache.k[l][2 * q..2 * q + 2], &cache.v[l][2 * q..2 * q + 2]] {
                    h = mix(h ^ (x[0] as u64) << 32 ^ x[1] as u64);
                }
            }
        }
        out.extend((0..TOY_VOCAB as u64).map(|j| {
            let x = mix(h ^ j.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            (x >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
        }));
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Model for ToyModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The toy reads its cache itself, row by row: keys position-major.
    fn new_cache(&self, capacity: usize) -> KvCache {
        let i = &self.info;
        KvCache::position_major(i.n_layers, i.n_kv_heads * i.head_dim, capacity)
    }

    fn forward(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>, ForwardError> {
        self.gate.pass();
        assert!(!self.poison.load(std::sync::atomic::Ordering::Relaxed), "poisoned toy model");
        self.log.lock().unwrap().push(batch.iter().map(|b| b.tokens.len()).collect());
        for b in batch.iter() {
            if b.cache.len() + b.tokens.len() > b.cache.capacity() {
                return Err(ForwardError::ContextFull {
                    needed: b.cache.len() + b.tokens.len(),
                    capacity: b.cache.capacity(),
                });
            }
            if let Some(&t) = b.tokens.iter().find(|&&t| t as usize >= TOY_VOCAB) {
                return Err(ForwardError::BadToken { token: t, vocab_size: TOY_VOCAB });
            }
        }
        let mut out = Vec::with_capacity(batch.len());
        for b in batch.iter_mut() {
            let start = b.cache.len();
            // Token ids (below 300) are exact in the cache's f16; positions past 2,048 round,
            // which only changes the hash.
            for l in 0..TOY_LAYERS {
                let (mut k, mut v) = (Vec::new(), Vec::new());
                for (i, &t) in b.tokens.iter().enumerate() {
                    let (t, pos) = (t as f32, (start + i) as f32);
                    k.extend([t, pos]);
                    v.extend([t + l as f32, -pos]);
                }
                b.cache.append(l, &k, &v);
            }
            b.cache.advance(b.tokens.len());
            let first = match b.logits {
                LogitsWanted::Last => b.cache.len() - 1,
                LogitsWanted::All => start,
            };
            let mut rows = Vec::with_capacity((b.cache.len() - first) * TOY_VOCAB);
            for p in first..b.cache.len() {
                self.row(b.cache, p, &mut rows);
            }
            out.push(rows);
        }
        Ok(out)
    }
}

/// Opens the model's gate when dropped, so that a failing test unwinds instead of leaving the
/// decode thread (and the engine's drop, which joins it) waiting at a closed gate.
pub(crate) struct OpenOnDrop(pub std::sync::Arc<ToyModel>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.gate.open();
    }
}

/// Submits `job` to an engine over `model` (whose gate is closed), lets `passes` forward passes
/// through, sets the job's cancel flag, and returns what the client received to the end.
pub(crate) fn cancel_after(
    model: &ToyModel,
    e: &super::Engine,
    (job, rx): (super::job::Job, async_channel::Receiver<Event>),
    passes: u64,
) -> Outcome {
    let cancel = job.cancel.clone();
    e.submit(job).unwrap();
    model.gate.allow(passes);
    wait_until(&format!("{passes} passes went through"), || model.gate.passed() == passes);
    cancel.store(true, std::sync::atomic::Ordering::Relaxed);
    model.gate.allow(1); // the pass the thread may already be waiting in
    collect(&rx)
}

/// What a sequence generates alone, greedily: one fresh cache, full prefill, argmax each step.
pub(crate) fn greedy_alone(prompt: &[u32], n: usize, stop: &[u32]) -> Vec<u32> {
    greedy_on(&ToyModel::new(Gate::open_gate()), prompt, n, stop)
}

/// [`greedy_alone`] on a given model (its gate must be open).
pub(crate) fn greedy_on(m: &ToyModel, prompt: &[u32], n: usize, stop: &[u32]) -> Vec<u32> {
    let mut cache = m.new_cache(m.info().context_length);
    let mut feed = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < n {
        let mut batch = [SeqBatch { tokens: &feed, cache: &mut cache, logits: LogitsWanted::Last }];
        let row = m.forward(&mut batch).unwrap().remove(0);
        let best = (0..row.len()).fold(0, |b, j| if row[j] > row[b] { j } else { b }) as u32;
        out.push(best);
        if stop.contains(&best) {
            break;
        }
        feed = vec![best];
    }
    out
}

/// Everything a job's receiver got.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub tokens: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<Option<f32>>,
    pub tops: Vec<Vec<(u32, f32)>>,
    pub finish: FinishReason,
    pub stats: GenStats,
}

/// The next event, or a panic if the engine hangs.
pub(crate) fn next_event(rx: &async_channel::Receiver<Event>) -> Event {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        match rx.try_recv() {
            Ok(ev) => return ev,
            Err(async_channel::TryRecvError::Closed) => panic!("event channel closed without Done"),
            Err(async_channel::TryRecvError::Empty) => {
                assert!(Instant::now() < deadline, "engine hung: no event");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Reads events until `Done`.
pub(crate) fn collect(rx: &async_channel::Receiver<Event>) -> Outcome {
    let mut o = Outcome {
        tokens: vec![],
        text: String::new(),
        logprobs: vec![],
        tops: vec![],
        finish: FinishReason::Stop,
        stats: GenStats::default(),
    };
    loop {
        match next_event(rx) {
            Event::Token { id, text, logprob, top_logprobs } => {
                o.tokens.push(id);
                o.text += &text;
                o.logprobs.push(logprob);
                o.tops.push(top_logprobs);
            }
            Event::Done { finish, text, stats } => {
                o.text += &text;
                o.finish = finish;
                o.stats = stats;
                return o;
            }
        }
    }
}

/// Waits (bounded by the hang guard) until `cond` holds.
pub(crate) fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + HANG_GUARD;
    while !cond() {
        assert!(Instant::now() < deadline, "engine hung waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
