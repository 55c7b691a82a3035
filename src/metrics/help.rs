//! HELP texts: the meanings `docs/metrics.md` gives each series (the contract dashboards are
//! built on).

pub const HTTP_REQUESTS: &str = "Requests received, labelled by method, route, status; excludes /metrics itself.";
pub const IN_FLIGHT: &str =
    "Requests currently being handled; open metrics streams are counted in mtplx_metrics_stream_subscribers instead.";
pub const ERRORS: &str = "Requests that ended in a 5xx response or an unhandled exception.";
pub const TTFT: &str = "Time from the start of a generation to its first token reaching the client.";
pub const TTLT: &str =
    "Time from the start of a generation to it reaching a terminal state (done, timed out, errored, or interrupted).";
pub const QUESTION: &str = "Length of each accepted user message, in characters.";
pub const ANSWER: &str = "Length of each persisted (completed) assistant message, in characters.";
pub const REJECTED: &str = "Requests rejected by rate limiting: every 429 the limiter raised.";
pub const PER_IP: &str =
    "Requests the rate limiter counted (generation routes, chat turns, refused API keys), labelled by route (not by client IP, to keep cardinality bounded).";
pub const START: &str = "Start time of the process since unix epoch in seconds.";
pub const RSS: &str = "Resident memory size in bytes.";
pub const CPU: &str = "Total user and system CPU time spent in seconds.";
pub const FDS: &str = "Number of open file descriptors.";
pub const BUILD: &str = "Build of the running server: version, compute backend and loaded model (always 1).";
pub const BACKEND: &str =
    "Where the model runs: cpu or gpu, the adapter (device or CPU level) and its driver (always 1).";
pub const PROMPT_TOKENS: &str = "Prompt tokens of finished generations (cached plus newly prefilled).";
pub const GEN_TOKENS: &str =
    "Tokens decoded: every token sampled, the end-of-sequence token included, also after a client left.";
pub const GEN_TOKENS_DELIVERED: &str =
    "Tokens delivered: the generated tokens the API took from the decode thread for its clients.";
pub const RUNNING: &str = "Generations being decoded.";
pub const WAITING: &str = "Generations queued for the decode thread.";
pub const DRAFTS: &str = "Speculative decoding rounds (drafts verified by the target model).";
pub const DRAFT_TOKENS: &str = "Tokens proposed by the draft (MTP) head.";
pub const ACCEPTED: &str = "Draft tokens accepted by verification.";
pub const PER_POS: &str = "Draft tokens accepted, by position in the draft (0 is the first drafted token).";
pub const DECODE_TOK_S: &str = "Decode speed of each generation the decode thread ended, from at least two tokens: tokens after the first over the time from the first to the last, on the decode thread's clock.";
pub const ITL: &str = "Time between consecutive token deliveries of a generation.";
pub const DROPPED: &str = "Records dropped (oldest first) from the queues of slow live-stream subscribers.";
pub const SUBSCRIBERS: &str = "Open subscriptions to the live record stream (not counted in http_requests_in_flight).";
pub const CHATS: &str = "Chats created.";
pub const PROMPT_CACHE_TOKENS: &str =
    "Prompt tokens by where their keys and values came from: memory (an idle cache), disk (the prompt cache's disk tier) or computed.";
pub const PROMPT_CACHE_DISK_LOOKUPS: &str =
    "Lookups of the prompt cache's disk tier by outcome: hit, or why it supplied nothing (off, held_in_memory, too_short, no_entry, evicted, corrupt).";
pub const MESSAGES: &str = "Chat messages persisted, labelled by role (user, assistant).";
pub const DB_WRITE: &str = "Time of each write transaction of the chat database, measured on its thread.";
pub const TURN_DB_WAIT: &str = "Time each chat turn waited on the chat database (storing its question and reading the history, then storing its answer: round trips to the database's thread, summed); what a turn adds over the same generation on /v1/chat/completions.";
pub const KV_USED_BYTES: &str = "Bytes the KV caches hold now (active sequences and idle ones kept for prefix reuse).";
pub const KV_CAPACITY_BYTES: &str =
    "Bytes the KV cache budget holds (--kv-cache-bytes, or what the model's context needs).";
pub const KV_USED_TOKENS: &str = "Positions (tokens) the KV caches hold now.";
pub const KV_CAPACITY_TOKENS: &str = "Positions (tokens) the whole KV cache budget holds.";
pub const KV_SEQUENCES: &str = "Sequences holding a KV cache now (active and idle).";
pub const GPU_DISPATCHES: &str = "Kernel dispatches the GPU backend recorded (only with --backend gpu).";
pub const GPU_SUBMITS: &str = "Command buffers the GPU backend submitted: one per forward pass, plus cache growth.";
pub const GPU_READ: &str = "Bytes read back from the GPU to the host (logits rows, hidden rows for an MTP head).";
pub const GPU_HEALTHY: &str =
    "1 while the GPU works; 0 once it reported a fault (lost, out of memory): restart the server.";
