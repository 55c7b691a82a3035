//! Every way the server itself refuses a request, and the status code each one earns.

use std::fmt;

use super::limits::{MAX_CHUNK_LINE_BYTES, MAX_HEADERS, MAX_HEAD_BYTES, MAX_TARGET_BYTES, MAX_TRAILER_BYTES};

/// A request the server answers itself, without calling the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The head grew past [`MAX_HEAD_BYTES`] without ending.
    HeadTooLarge,
    /// More than [`MAX_HEADERS`] header fields.
    TooManyHeaders,
    /// The request target is longer than [`MAX_TARGET_BYTES`].
    TargetTooLong { len: usize },
    /// A declared or received body larger than the configured cap.
    BodyTooLarge { len: u64, limit: usize },
    /// The head did not arrive within the header timeout (slowloris).
    HeadTimeout { millis: u128 },
    /// The body did not arrive within the body timeout.
    BodyTimeout { millis: u128 },
    /// The head or body could not be parsed; the text says where.
    Malformed(&'static str),
    /// Both `Content-Length` and `Transfer-Encoding` (RFC 9112 §6.1: a smuggling vector).
    LengthAndTransferEncoding,
    /// Two `Content-Length` values that differ (RFC 9112 §6.3, rule 5).
    ConflictingContentLength,
    /// A `Content-Length` that is not a decimal number.
    InvalidContentLength,
    /// A transfer coding other than a single `chunked` (RFC 9112 §6.1).
    UnsupportedTransferEncoding,
    /// `Transfer-Encoding` in an HTTP/1.0 request (RFC 9112 §6.1).
    TransferEncodingOnHttp10,
    /// A well-formed version other than HTTP/1.0 and HTTP/1.1.
    UnsupportedVersion,
    /// A chunk-size line longer than [`MAX_CHUNK_LINE_BYTES`] or not hexadecimal.
    InvalidChunk,
    /// Trailer section longer than [`MAX_TRAILER_BYTES`].
    TrailersTooLarge,
    /// An HTTP/1.1 request without a `Host` header (RFC 9112 §3.2).
    MissingHost,
    /// More than one `Host` header (RFC 9112 §3.2).
    DuplicateHost,
    /// A `Host` value that is not `host[:port]` (RFC 9112 §3.2, RFC 3986 §3.2.2).
    InvalidHost,
    /// More than one `Authorization` header: a proxy and the server could each believe a
    /// different one.
    DuplicateAuthorization,
    /// More connections than `max_connections` are open.
    TooManyConnections { limit: usize },
    /// The handler panicked while making the response.
    HandlerPanicked,
}

impl HttpError {
    pub fn status(&self) -> u16 {
        match self {
            HttpError::HeadTooLarge | HttpError::TooManyHeaders | HttpError::TrailersTooLarge => 431,
            HttpError::TargetTooLong { .. } => 414,
            HttpError::BodyTooLarge { .. } => 413,
            HttpError::HeadTimeout { .. } | HttpError::BodyTimeout { .. } => 408,
            HttpError::Malformed(_)
            | HttpError::LengthAndTransferEncoding
            | HttpError::ConflictingContentLength
            | HttpError::InvalidContentLength
            | HttpError::TransferEncodingOnHttp10
            | HttpError::InvalidChunk
            | HttpError::MissingHost
            | HttpError::DuplicateHost
            | HttpError::InvalidHost
            | HttpError::DuplicateAuthorization => 400,
            HttpError::UnsupportedTransferEncoding => 501,
            HttpError::UnsupportedVersion => 505,
            HttpError::TooManyConnections { .. } => 503,
            HttpError::HandlerPanicked => 500,
        }
    }

    /// A stable machine-readable name for the refusal (the `code` of an OpenAI error).
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::HeadTooLarge => "header_section_too_large",
            HttpError::TooManyHeaders => "too_many_headers",
            HttpError::TargetTooLong { .. } => "request_target_too_long",
            HttpError::BodyTooLarge { .. } => "body_too_large",
            HttpError::HeadTimeout { .. } => "header_timeout",
            HttpError::BodyTimeout { .. } => "body_timeout",
            HttpError::Malformed(_) => "malformed_request",
            HttpError::LengthAndTransferEncoding => "content_length_with_transfer_encoding",
            HttpError::ConflictingContentLength => "conflicting_content_length",
            HttpError::InvalidContentLength => "invalid_content_length",
            HttpError::UnsupportedTransferEncoding => "unsupported_transfer_encoding",
            HttpError::TransferEncodingOnHttp10 => "transfer_encoding_on_http10",
            HttpError::UnsupportedVersion => "http_version_not_supported",
            HttpError::InvalidChunk => "invalid_chunk",
            HttpError::TrailersTooLarge => "trailers_too_large",
            HttpError::MissingHost => "missing_host",
            HttpError::DuplicateHost => "duplicate_host",
            HttpError::InvalidHost => "invalid_host",
            HttpError::DuplicateAuthorization => "duplicate_authorization",
            HttpError::TooManyConnections { .. } => "too_many_connections",
            HttpError::HandlerPanicked => "internal_error",
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::HeadTooLarge => {
                write!(f, "request header section exceeds {MAX_HEAD_BYTES} bytes")
            }
            HttpError::TooManyHeaders => {
                write!(f, "request has more than {MAX_HEADERS} header fields")
            }
            HttpError::TargetTooLong { len } => {
                write!(f, "request target of {len} bytes exceeds {MAX_TARGET_BYTES} bytes")
            }
            HttpError::BodyTooLarge { len, limit } => {
                write!(f, "request body of {len} bytes exceeds the limit of {limit} bytes")
            }
            HttpError::HeadTimeout { millis } => {
                write!(f, "request header not complete within {millis} ms")
            }
            HttpError::BodyTimeout { millis } => {
                write!(f, "request body not complete within {millis} ms")
            }
            HttpError::Malformed(what) => write!(f, "malformed request: {what}"),
            HttpError::LengthAndTransferEncoding => {
                write!(f, "request has both Content-Length and Transfer-Encoding")
            }
            HttpError::ConflictingContentLength => {
                write!(f, "request has Content-Length values that differ")
            }
            HttpError::InvalidContentLength => {
                write!(f, "Content-Length is not a decimal number of at most 19 digits")
            }
            HttpError::UnsupportedTransferEncoding => {
                write!(f, "Transfer-Encoding other than a single 'chunked' is not implemented")
            }
            HttpError::TransferEncodingOnHttp10 => {
                write!(f, "Transfer-Encoding is not allowed in an HTTP/1.0 request")
            }
            HttpError::UnsupportedVersion => {
                write!(f, "HTTP version not supported; only HTTP/1.0 and HTTP/1.1 are")
            }
            HttpError::InvalidChunk => write!(
                f,
                "invalid chunk: size line not hexadecimal, over {MAX_CHUNK_LINE_BYTES} bytes, \
                 or chunk data not followed by CRLF"
            ),
            HttpError::TrailersTooLarge => {
                write!(f, "chunked trailer section exceeds {MAX_TRAILER_BYTES} bytes")
            }
            HttpError::MissingHost => {
                write!(f, "HTTP/1.1 request has no Host header (RFC 9112 §3.2)")
            }
            HttpError::DuplicateHost => {
                write!(f, "request has more than one Host header (RFC 9112 §3.2)")
            }
            HttpError::InvalidHost => {
                write!(f, "Host header is not a host name or address with an optional port (RFC 9112 §3.2)")
            }
            HttpError::DuplicateAuthorization => {
                write!(f, "request has more than one Authorization header; send one")
            }
            HttpError::TooManyConnections { limit } => {
                write!(f, "server has {limit} connections open, the maximum; retry later")
            }
            HttpError::HandlerPanicked => write!(f, "internal error while handling the request"),
        }
    }
}

impl std::error::Error for HttpError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_a_status_a_code_and_names_the_bound() {
        let e = HttpError::BodyTooLarge { len: 10, limit: 5 };
        assert_eq!((e.status(), e.code()), (413, "body_too_large"));
        assert!(e.to_string().contains("limit of 5 bytes"), "{e}");
        assert_eq!(HttpError::UnsupportedVersion.status(), 505);
        assert_eq!(HttpError::UnsupportedTransferEncoding.status(), 501);
    }
}
