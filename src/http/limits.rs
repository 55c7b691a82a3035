//! The bounds the server puts on a request before any handler sees it. Kept apart so that the
//! parser that enforces them and the errors that name them both read them from here.

/// Largest request head (request line + header fields) accepted; beyond it: 431 (RFC 6585 §5).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields accepted in one request; beyond it: 431 (RFC 6585 §5).
pub const MAX_HEADERS: usize = 64;
/// Longest request target accepted; beyond it: 414 (RFC 9110 §15.5.15).
pub const MAX_TARGET_BYTES: usize = 8 * 1024;
/// Longest chunk-size line (size plus extensions, RFC 9112 §7.1.1) accepted in a chunked body.
pub const MAX_CHUNK_LINE_BYTES: usize = 1024;
/// Largest trailer section (RFC 9112 §7.1.2) accepted after the last chunk; it is discarded.
pub const MAX_TRAILER_BYTES: usize = 8 * 1024;
