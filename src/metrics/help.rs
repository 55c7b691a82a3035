//! HELP texts: the meanings `docs/metrics.md` gives each series (the contract dashboards are
//! built on).

pub const HTTP_REQUESTS: &str =
    "Requests received, labelled by method, route, status; excludes /metrics itself.";
pub const IN_FLIGHT: &str = "Requests currently being handled.";
pub const ERRORS: &str = "Requests that ended in a 5xx response or an unhandled exception.";
pub const TTFT: &str =
    "Time from the start of a generation to its first token reaching the client.";
pub const TTLT: &str = "Time from the start of a generation to it reaching a terminal state (done, timed out, errored, or interrupted).";
pub const QUESTION: &str = "Length of each accepted user message, in characters.";
pub const ANSWER: &str =
    "Length of each persisted (completed) assistant message, in characters.";
pub const REJECTED: &str = "Requests rejected by rate limiting: every 429 the limiter raised.";
pub const PER_IP: &str = "Requests seen by the rate limiter, labelled by route (not by client IP, to keep cardinality bounded).";
pub const START: &str = "Start time of the process since unix epoch in seconds.";
pub const RSS: &str = "Resident memory size in bytes.";
pub const CPU: &str = "Total user and system CPU time spent in seconds.";
pub const FDS: &str = "Number of open file descriptors.";
pub const BUILD: &str =
    "Build of the running server: version, compute backend and loaded model (always 1).";
pub const PROMPT_TOKENS: &str =
    "Prompt tokens of finished generations (cached plus newly prefilled).";
pub const GEN_TOKENS: &str = "Tokens generated.";
pub const RUNNING: &str = "Generations being decoded.";
pub const WAITING: &str = "Generations queued for the decode thread.";
pub const DRAFTS: &str = "Speculative decoding rounds (drafts verified by the target model).";
pub const DRAFT_TOKENS: &str = "Tokens proposed by the draft (MTP) head.";
pub const ACCEPTED: &str = "Draft tokens accepted by verification.";
pub const PER_POS: &str =
    "Draft tokens accepted, by position in the draft (0 is the first drafted token).";
pub const DECODE_TOK_S: &str =
    "Decode speed of each generation: tokens after the first over the time after the first.";
pub const ITL: &str = "Time between consecutive token deliveries of a generation.";
pub const DROPPED: &str =
    "Records dropped (oldest first) from the queues of slow live-stream subscribers.";
