//! Sans-IO request parsing: the head (via httparse) and the body framing it declares, plus an
//! incremental chunked-body decoder. Nothing here reads a socket, so all of it can be fuzzed.

use super::error::HttpError;
use super::limits::{MAX_CHUNK_LINE_BYTES, MAX_HEADERS, MAX_HEAD_BYTES, MAX_TARGET_BYTES, MAX_TRAILER_BYTES};

/// How the request body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head with the connection-level facts the server needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub headers: Vec<(String, Vec<u8>)>,
    pub framing: Framing,
    /// Whether the client allows the connection to stay open after this exchange.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
}

/// A head the server refuses, with what it could learn of the request for counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadError {
    pub error: HttpError,
    pub method: String,
    pub path: String,
}

impl HeadError {
    fn bare(error: HttpError) -> HeadError {
        HeadError { error, method: String::new(), path: String::new() }
    }
}

/// Parses a request head from the start of `buf`. `Ok(None)`: not complete yet, read more.
/// `Ok(Some((head, n)))`: the head took `n` bytes; the body (if any) follows.
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > MAX_TARGET_BYTES {
                if let Some(len) = target_len_so_far(buf).filter(|&l| l > MAX_TARGET_BYTES) {
                    return Err(HeadError::bare(HttpError::TargetTooLong { len }));
                }
            }
            if buf.len() > MAX_HEAD_BYTES {
                return Err(HeadError::bare(HttpError::HeadTooLarge));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::bare(HttpError::TooManyHeaders)),
        Err(httparse::Error::Version) if version_is_well_formed(buf) => {
            return Err(HeadError::bare(HttpError::UnsupportedVersion))
        }
        Err(e) => return Err(HeadError::bare(HttpError::Malformed(parse_error_text(e)))),
    };
    // httparse fills every field of a complete request.
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("");
    let version = req.version.unwrap_or(1);
    let fail = |error| HeadError { error, method: method.to_owned(), path: target.to_owned() };
    if target.len() > MAX_TARGET_BYTES {
        return Err(fail(HttpError::TargetTooLong { len: target.len() }));
    }
    if n > MAX_HEAD_BYTES {
        return Err(fail(HttpError::HeadTooLarge));
    }
    let (path, query) = split_target(target).ok_or_else(|| fail(HttpError::Malformed("request target")))?;
    let fail = |error| HeadError { error, method: method.to_owned(), path: path.to_owned() };

    let mut content_length: Option<u64> = None;
    let (mut te_seen, mut chunked_count, mut te_other) = (false, 0, false);
    let (mut close, mut keep_alive_token, mut expect_continue) = (false, false, false);
    let (mut host, mut hosts, mut authorizations) = (&b""[..], 0, 0);
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            for part in h.value.split(|&b| b == b',') {
                let len = parse_decimal(trim(part)).ok_or_else(|| fail(HttpError::InvalidContentLength))?;
                match content_length {
                    Some(prev) if prev != len => return Err(fail(HttpError::ConflictingContentLength)),
                    _ => content_length = Some(len),
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            te_seen = true;
            for token in h.value.split(|&b| b == b',').map(trim).filter(|t| !t.is_empty()) {
                if token.eq_ignore_ascii_case(b"chunked") {
                    chunked_count += 1;
                } else {
                    te_other = true;
                }
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue |= trim(h.value).eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            host = h.value;
        } else if name.eq_ignore_ascii_case("authorization") {
            authorizations += 1;
        }
        headers.push((name.to_owned(), h.value.to_vec()));
    }

    let framing = if te_seen {
        if version == 0 {
            return Err(fail(HttpError::TransferEncodingOnHttp10));
        }
        if content_length.is_some() {
            return Err(fail(HttpError::LengthAndTransferEncoding));
        }
        if te_other || chunked_count != 1 {
            return Err(fail(HttpError::UnsupportedTransferEncoding));
        }
        Framing::Chunked
    } else {
        match content_length {
            Some(0) | None => Framing::None,
            Some(n) => Framing::Length(n),
        }
    };
    // RFC 9112 §3.2; checked last, so that a request with a framing problem is refused for that.
    match hosts {
        0 if version == 1 => return Err(fail(HttpError::MissingHost)),
        0 => {}
        1 if !is_host_value(trim(host)) => return Err(fail(HttpError::InvalidHost)),
        1 => {}
        _ => return Err(fail(HttpError::DuplicateHost)),
    }
    if authorizations > 1 {
        return Err(fail(HttpError::DuplicateAuthorization));
    }
    let keep_alive = !close && (version == 1 || keep_alive_token);
    let head = Head {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.map(str::to_owned),
        version,
        headers,
        framing,
        keep_alive,
        expect_continue,
    };
    Ok(Some((head, n)))
}

/// Splits a request target into path and query. Origin form (`/a?b`), asterisk form (`*`) and
/// absolute form (`http://host/a?b`, RFC 9112 §3.2.2) are accepted; anything else is not.
fn split_target(target: &str) -> Option<(&str, Option<&str>)> {
    let origin = if target.starts_with('/') || target == "*" {
        target
    } else {
        let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
        let rest = if lower.starts_with("http://") {
            &target[7..]
        } else if lower.starts_with("https://") {
            &target[8..]
        } else {
            return None;
        };
        match rest.find('/') {
            Some(i) => &rest[i..],
            None => "/",
        }
    };
    Some(match origin.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (origin, None),
    })
}

/// Whether a `Host` value is `uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2): the
/// characters of a reg-name, an IPv4 address or a bracketed IP literal, and the colon of a port.
/// Empty is allowed (a target without an authority).
fn is_host_value(v: &[u8]) -> bool {
    v.iter().all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b))
}

/// Length of the request target seen so far in an incomplete head, if the method has ended.
fn target_len_so_far(buf: &[u8]) -> Option<usize> {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let line = &buf[start..];
    let sp = line.iter().position(|&b| b == b' ')?;
    let rest = &line[sp + 1..];
    Some(rest.iter().position(|&b| b == b' ' || b == b'\r' || b == b'\n').unwrap_or(rest.len()))
}

/// Whether the request line ends in a syntactically valid `HTTP/x.y` (then the version is merely
/// unsupported: 505) rather than garbage (400).
fn version_is_well_formed(buf: &[u8]) -> bool {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(0);
    let line = &buf[start..];
    let end = line.iter().position(|&b| b == b'\r' || b == b'\n').unwrap_or(line.len());
    let mut parts = line[..end].split(|&b| b == b' ');
    let (Some(_), Some(_), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    match version.strip_prefix(b"HTTP/") {
        Some(&[major, b'.', minor]) => major.is_ascii_digit() && minor.is_ascii_digit(),
        Some(&[major]) => major.is_ascii_digit(),
        _ => false,
    }
}

fn parse_error_text(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name (obs-fold is not accepted)",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Token => "invalid method or request target",
        httparse::Error::Version => "invalid HTTP version",
        _ => "invalid request head",
    }
}

/// A non-empty run of at most 19 ASCII digits (fits u64; RFC 9110 §8.6 forbids signs etc.).
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0')))
}

fn trim(s: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// Incremental decoder of a chunked body (RFC 9112 §7.1). Feed it whatever bytes have arrived;
/// it consumes what it can and appends chunk data to the output.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    trailer_bytes: usize,
    max_body: usize,
}

impl ChunkedDecoder {
    /// A decoder that refuses bodies longer than `max_body` bytes (413).
    pub fn new(max_body: usize) -> ChunkedDecoder {
        ChunkedDecoder { state: ChunkState::Size, trailer_bytes: 0, max_body }
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes a prefix of `input`, appending body bytes to `out`. Returns how many bytes were
    /// consumed; the caller keeps the rest and calls again with more. Stops after the final CRLF.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size => {
                    let Some(&first) = rest.first() else {
                        return Ok(pos);
                    };
                    if !first.is_ascii_hexdigit() {
                        return Err(HttpError::InvalidChunk);
                    }
                    match httparse::parse_chunk_size(rest) {
                        Ok(httparse::Status::Complete((n, size))) => {
                            if n > MAX_CHUNK_LINE_BYTES {
                                return Err(HttpError::InvalidChunk);
                            }
                            pos += n;
                            if size == 0 {
                                self.state = ChunkState::Trailers;
                            } else {
                                let total = (out.len() as u64).saturating_add(size);
                                if total > self.max_body as u64 {
                                    return Err(HttpError::BodyTooLarge { len: total, limit: self.max_body });
                                }
                                self.state = ChunkState::Data(size);
                            }
                        }
                        Ok(httparse::Status::Partial) if rest.len() <= MAX_CHUNK_LINE_BYTES => return Ok(pos),
                        _ => return Err(HttpError::InvalidChunk),
                    }
                }
                ChunkState::Data(remaining) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let take = remaining.min(rest.len() as u64) as usize;
                    out.extend_from_slice(&rest[..take]);
                    pos += take;
                    self.state = match remaining - take as u64 {
                        0 => ChunkState::DataEnd,
                        left => ChunkState::Data(left),
                    };
                }
                ChunkState::DataEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        pos += 2;
                        self.state = ChunkState::Size;
                    }
                    [] | [b'\r'] => return Ok(pos),
                    _ => return Err(HttpError::InvalidChunk),
                },
                ChunkState::Trailers => {
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if self.trailer_bytes + rest.len() > MAX_TRAILER_BYTES {
                            return Err(HttpError::TrailersTooLarge);
                        }
                        return Ok(pos);
                    };
                    let line = &rest[..=nl];
                    self.trailer_bytes += line.len();
                    if self.trailer_bytes > MAX_TRAILER_BYTES {
                        return Err(HttpError::TrailersTooLarge);
                    }
                    pos += line.len();
                    if line == b"\r\n" {
                        self.state = ChunkState::Done;
                    } else if !is_trailer_field(line) {
                        return Err(HttpError::Malformed("trailer field"));
                    }
                }
            }
        }
    }
}

/// A trailer line `name: value\r\n`: a token name, no obs-fold, no bare LF, no NUL.
fn is_trailer_field(line: &[u8]) -> bool {
    let Some(body) = line.strip_suffix(b"\r\n") else {
        return false;
    };
    let Some(colon) = body.iter().position(|&b| b == b':') else {
        return false;
    };
    let name = &body[..colon];
    let is_tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    !name.is_empty()
        && name.iter().all(is_tchar)
        && body[colon + 1..].iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
