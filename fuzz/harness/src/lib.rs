//! The bodies of the fuzz targets, with their invariants, as plain functions: `run(data)`
//! panics when an invariant breaks. The libFuzzer binaries in `fuzz/fuzz_targets/` call them in
//! one line (with AddressSanitizer, `fuzz/run-all.sh`), and `tests/replay.rs` runs every
//! committed seed and crash regression through them under plain `cargo test`, so that CI checks
//! the very same code without a sanitizer build (see `fuzz/README.md`).

pub mod anthropic_request;
pub mod chat_request;
pub mod chat_template;
pub mod gguf_header;
pub mod http_chunked;
pub mod http_connection;
pub mod http_head;
pub mod label_escape;
pub mod metrics_negotiate;
pub mod openai_request;
pub mod record_stream;
pub mod router;
pub mod safetensors_header;
pub mod tokenizer;

/// Every target, by the name of its corpus directory and its binary.
pub const TARGETS: [&str; 14] = [
    "anthropic_request",
    "chat_request",
    "chat_template",
    "gguf_header",
    "http_chunked",
    "http_connection",
    "http_head",
    "label_escape",
    "metrics_negotiate",
    "openai_request",
    "record_stream",
    "router",
    "safetensors_header",
    "tokenizer",
];
