//! A streamed response read incrementally over a raw socket: chunked framing undone, SSE
//! `data:` payloads out.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Bound on every read of a stream; only a broken server is silent this long.
const READ_DEADLINE: Duration = Duration::from_secs(60);

/// A streamed response read incrementally: chunked framing undone, SSE `data:` payloads out.
pub struct Sse {
    r: BufReader<TcpStream>,
    buf: Vec<u8>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    ended: bool,
}

impl Sse {
    pub fn open(addr: SocketAddr, path: &str, body: &Value) -> Sse {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(READ_DEADLINE)).unwrap();
        // `write!` writes in pieces; Nagle's algorithm would hold the last for the server's
        // delayed ACK (about 40 ms).
        s.set_nodelay(true).unwrap();
        let body = body.to_string();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).expect("reading the stream (bounded by the socket's read timeout)");
        let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            line.clear();
            r.read_line(&mut line).expect("reading the stream (bounded by the socket's read timeout)");
            if line.trim_end().is_empty() {
                break;
            }
            let (n, v) = line.trim_end().split_once(':').unwrap();
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        Sse { r, buf: Vec::new(), status, headers, ended: false }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Reads one chunk of the chunked body into `buf`; false at the last chunk.
    pub fn fill(&mut self) -> bool {
        let mut line = String::new();
        self.r.read_line(&mut line).expect("reading the stream (bounded by the socket's read timeout)");
        let size = usize::from_str_radix(line.trim(), 16).unwrap_or_else(|_| panic!("chunk size {line:?}"));
        let mut chunk = vec![0; size + 2];
        self.r.read_exact(&mut chunk).expect("reading the stream (bounded by the socket's read timeout)");
        self.buf.extend_from_slice(&chunk[..size]);
        size > 0
    }

    /// The next line of the body as it came, comments and blank lines included, without its
    /// newline; `None` at the end.
    pub fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(line[..line.len() - 1].to_vec());
            }
            if self.ended || !self.fill() {
                self.ended = true;
                return None;
            }
        }
    }

    /// The raw bytes of the next `data:` line (comments skipped); `None` at the end.
    pub fn next_data(&mut self) -> Option<Vec<u8>> {
        loop {
            while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                if let Some(d) = line.strip_prefix(b"data: ") {
                    return Some(d[..d.len() - 1].to_vec());
                }
            }
            if self.ended || !self.fill() {
                self.ended = true;
                return None;
            }
        }
    }

    /// The body of a response that is not a stream (its `Content-Length` bytes).
    pub fn plain_body(&mut self) -> Vec<u8> {
        let len: usize = self.header("content-length").expect("Content-Length").parse().unwrap();
        let mut b = vec![0; len];
        self.r.read_exact(&mut b).unwrap();
        b
    }

    /// Every remaining event parsed as JSON (the `[DONE]` sentinel must come last).
    pub fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut done = false;
        while let Some(d) = self.next_data() {
            assert!(!done, "data after [DONE]");
            if d == b"[DONE]" {
                done = true;
                continue;
            }
            // serde_json refuses invalid UTF-8: half a character would fail here.
            out.push(serde_json::from_slice(&d).unwrap_or_else(|e| panic!("not UTF-8 JSON ({e}): {:?}", d)));
        }
        assert!(done, "the stream ended without [DONE]");
        out
    }
}
