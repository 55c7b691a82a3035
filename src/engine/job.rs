//! What the API layer hands the decode thread (a [`Job`]) and what it gets back ([`Event`]s).

use super::constraint::Constraint;
use super::draft::DraftRequest;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most alternatives a token may list (`top_logprobs`); OpenAI's bound.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// How the next token is chosen. The defaults sample the model's distribution unchanged.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax); otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 is off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to at least `top_p`;
    /// 1.0 is off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; 0.0 is off.
    pub min_p: f32,
    /// Subtracted once from the logit of every token already generated (OpenAI's definition).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it was already generated.
    pub frequency_penalty: f32,
    /// Same seed and prompt give the same tokens; `None` seeds from the clock.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Default::default() }
    }
}

/// One generation request, as the decode thread sees it.
pub struct Job {
    /// The prompt, already templated and tokenized.
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Most tokens to generate (the context may end the sequence sooner, also as `Length`).
    pub max_tokens: usize,
    /// Token ids that end the generation (besides the model's own eos tokens); a stop token is
    /// not sent as a [`Event::Token`].
    pub stop_tokens: Vec<u32>,
    /// Send each token's logprob.
    pub logprobs: bool,
    /// Send this many most likely alternatives per token (at most [`MAX_TOP_LOGPROBS`]).
    pub top_logprobs: usize,
    /// Set it to end the sequence at the next decode step.
    pub cancel: Arc<AtomicBool>,
    /// Where the events go. Dropping the receiver cancels the job too.
    pub reply: async_channel::Sender<Event>,
    /// When the request arrived (the start of its clock: TTFT and queue time count from here).
    pub submitted: Instant,
    /// The request's own drafting choices, within the server's.
    pub draft: DraftRequest,
    /// Neither the model's eos tokens nor `stop_tokens` end the generation: only its length.
    pub ignore_eos: bool,
    /// The grammar the answer must follow (compiled off the decode thread), if any.
    pub constraint: Option<Constraint>,
}

impl Job {
    /// A job with default options and the receiver of its events.
    pub fn new(prompt: Vec<u32>, params: SamplingParams, max_tokens: usize) -> (Job, async_channel::Receiver<Event>) {
        JobSpec::new(prompt, params, max_tokens).build()
    }
}

/// Everything a job is made of but its channels: fill it, then [`JobSpec::build`] it once.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub max_tokens: usize,
    pub stop_tokens: Vec<u32>,
    /// `None`: no logprobs; `Some(n)`: each token's logprob and its `n` best alternatives.
    pub logprobs: Option<usize>,
    pub submitted: Instant,
    pub draft: DraftRequest,
    pub ignore_eos: bool,
    pub constraint: Option<Constraint>,
}

impl JobSpec {
    pub fn new(prompt: Vec<u32>, params: SamplingParams, max_tokens: usize) -> JobSpec {
        JobSpec {
            prompt,
            params,
            max_tokens,
            stop_tokens: Vec::new(),
            logprobs: None,
            submitted: Instant::now(),
            draft: DraftRequest::default(),
            ignore_eos: false,
            constraint: None,
        }
    }

    /// The job and the receiver of its events.
    pub fn build(self) -> (Job, async_channel::Receiver<Event>) {
        let (tx, rx) = async_channel::unbounded();
        let job = Job {
            prompt: self.prompt,
            params: self.params,
            max_tokens: self.max_tokens,
            stop_tokens: self.stop_tokens,
            logprobs: self.logprobs.is_some(),
            top_logprobs: self.logprobs.unwrap_or(0).min(MAX_TOP_LOGPROBS),
            cancel: Arc::new(AtomicBool::new(false)),
            reply: tx,
            submitted: self.submitted,
            draft: self.draft,
            ignore_eos: self.ignore_eos,
            constraint: self.constraint,
        };
        (job, rx)
    }
}

/// What a job's receiver gets: zero or more tokens, then exactly one `Done`.
#[derive(Clone, Debug)]
pub enum Event {
    Token {
        id: u32,
        /// The new text this token completes; may be empty while a UTF-8 character is still
        /// incomplete (the bytes come with a later token).
        text: String,
        /// Natural log of the token's probability under the model's raw distribution (see
        /// `sampler.rs`); `None` unless the job asked for logprobs.
        logprob: Option<f32>,
        /// The most likely tokens at this position with their logprobs, most likely first.
        top_logprobs: Vec<(u32, f32)>,
    },
    Done {
        finish: FinishReason,
        /// Text the detokenizer still held back at the end (an incomplete character, shown as
        /// U+FFFD); usually empty.
        text: String,
        stats: GenStats,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum FinishReason {
    /// A stop or eos token was generated.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// The cancel flag was set or the receiver dropped.
    Cancelled,
    /// The engine shut down (server shutdown) before the generation ended.
    Shutdown,
    /// The job could not run or the model failed; the message says why.
    Error(String),
}

impl FinishReason {
    /// The OpenAI `finish_reason` word.
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Shutdown => "error",
            FinishReason::Error(_) => "error",
        }
    }
}

/// The KV cache manager's state, as seen right after a request ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvSnapshot {
    /// Sequences holding a cache (active ones and idle ones kept for prefix reuse).
    pub sequences: usize,
    pub active: usize,
    pub idle: usize,
    /// Bytes the caches hold now.
    pub bytes: usize,
    /// Bytes the active sequences may grow to (what admission reserved).
    pub reserved_bytes: usize,
    pub budget_bytes: usize,
    /// Bytes one position of one sequence takes (keys and values of every layer).
    pub bytes_per_position: usize,
}

impl KvSnapshot {
    /// Positions the caches hold now.
    pub fn positions(&self) -> usize {
        self.bytes / self.bytes_per_position.max(1)
    }

    /// Positions the whole budget holds.
    pub fn capacity_positions(&self) -> usize {
        self.budget_bytes / self.bytes_per_position.max(1)
    }
}

/// What a request's speculation did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecCounts {
    /// The drafter's name (`ngram`), or empty when the request decoded plainly.
    pub drafter: &'static str,
    pub drafted: usize,
    pub accepted: usize,
    /// Verify passes: steps whose pass checked a draft of this request.
    pub verify_calls: usize,
    /// Draft tokens verified per position in the draft (0 is the first drafted token).
    pub drafted_by_depth: Vec<u64>,
    /// Draft tokens accepted per position.
    pub accepted_by_depth: Vec<u64>,
    /// Tokens sampled from the last row of a fully accepted draft.
    pub bonus: usize,
    /// Tokens drawn from the residual distribution after a rejection.
    pub correction: usize,
    /// Time spent drafting.
    pub draft_time: Duration,
    /// Time of the forward passes that verified this request's drafts (shared with the batch).
    pub verify_time: Duration,
    /// Time spent dropping the cache positions of rejected draft tokens.
    pub rollback_time: Duration,
}

/// Per-request numbers for the metrics record.
#[derive(Clone, Debug, Default)]
pub struct GenStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values came from an idle cache (prefix reuse) or the disk
    /// tier.
    pub cached_tokens: usize,
    /// Of `cached_tokens`, those the disk tier supplied.
    pub disk_tokens: usize,
    /// What the disk tier's lookup found; `None` without a disk tier or a lookup.
    pub disk_lookup: Option<super::prompt_disk::Lookup>,
    /// Prompt tokens run through the model (`prompt_tokens - cached_tokens`).
    pub prefilled_tokens: usize,
    /// Scheduler steps that fed part of the prompt.
    pub prefill_chunks: usize,
    /// Tokens sampled, a final stop token included.
    pub completion_tokens: usize,
    /// Submission to admission.
    pub queue_time: Duration,
    /// Admission to the first token.
    pub prefill_time: Duration,
    /// First token to the last.
    pub decode_time: Duration,
    /// Submission to the first token; `None` when no token was produced.
    pub ttft: Option<Duration>,
    /// Submission to the end.
    pub total_time: Duration,
    /// Most sequences that shared a forward pass with this one.
    pub max_batch: usize,
    /// Speculative decoding's account (all zero when nothing was drafted); boxed, so that a
    /// token event stays small.
    pub spec: Box<SpecCounts>,
    /// The cache manager after this request ended.
    pub kv_after: KvSnapshot,
}
