//! Shared by the HTTP end-to-end tests: an in-process server on 127.0.0.1:0 with a small test
//! handler, and a raw-bytes client that reads one response at a time.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mtplx_lite::http::{serve, Handler, HttpConfig, Rejected, Request, Response, Shutdown};

/// Upper bound on any single blocking read in a test, so that a bug fails instead of hanging.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);

/// Echo, streams, a panic and a slow route; remembers every rejection it hears of.
#[derive(Default)]
pub struct TestHandler {
    pub rejected: Mutex<Vec<(String, String, u16)>>,
    /// Told when a `/forever` producer finds its receiver dropped (the client went away).
    pub gone_tx: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    /// Told when `/slow` starts, so a test can act while the request is in flight.
    pub started_tx: Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

impl Handler for TestHandler {
    fn handle(&self, req: Request) -> Pin<Box<dyn std::future::Future<Output = Response> + Send + '_>> {
        Box::pin(async move {
            match req.path.as_str() {
                "/health" => Response::new(200, "application/json", &b"{\"status\":\"ok\"}"[..]),
                "/echo" => {
                    let mut r = Response::new(200, "application/octet-stream", req.body.clone())
                        .with_header("X-Method", req.method.clone());
                    if let Some(q) = &req.query {
                        r = r.with_header("X-Query", q.clone());
                    }
                    r
                }
                "/panic" => panic!("test handler panics on purpose"),
                "/stream" => {
                    let n: usize = req.query_param("n").and_then(|n| n.parse().ok()).unwrap_or(3);
                    let (tx, rx) = async_channel::unbounded();
                    for i in 0..n {
                        tx.try_send(format!("data: {i}\n\n").into_bytes()).unwrap();
                    }
                    Response::sse(rx)
                }
                "/forever" => {
                    let (tx, rx) = async_channel::bounded(1);
                    let gone = self.gone_tx.lock().unwrap().clone();
                    std::thread::spawn(move || {
                        let mut i = 0u64;
                        while smol::block_on(tx.send(format!("data: {i}\n\n").into_bytes())).is_ok() {
                            i += 1;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        if let Some(g) = gone {
                            let _ = g.send(());
                        }
                    });
                    Response::sse(rx)
                }
                "/quiet" => {
                    // One event, then silence: only watching the socket can tell the client left.
                    let (tx, rx) = async_channel::bounded(1);
                    tx.try_send(b"data: only\n\n".to_vec()).unwrap();
                    let gone = self.gone_tx.lock().unwrap().clone();
                    std::thread::spawn(move || {
                        while !tx.is_closed() {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        if let Some(g) = gone {
                            let _ = g.send(());
                        }
                    });
                    Response::sse(rx)
                }
                "/slow" => {
                    if let Some(tx) = self.started_tx.lock().unwrap().as_ref() {
                        let _ = tx.send(());
                    }
                    let ms: u64 = req.query_param("ms").and_then(|n| n.parse().ok()).unwrap_or(300);
                    smol::Timer::after(Duration::from_millis(ms)).await;
                    Response::new(200, "text/plain", &b"slow done"[..])
                }
                "/nocontent" => {
                    Response { status: 204, headers: vec![], body: mtplx_lite::http::Body::Full(Vec::new().into()) }
                }
                _ => Response::new(404, "text/plain", &b"not found"[..]),
            }
        })
    }

    /// The API's own rendering, so that these tests see the OpenAI error shape the server sends.
    fn rejection(&self, r: &Rejected<'_>) -> Response {
        mtplx_lite::api::error::ApiError::from(r.error).into_response()
    }

    fn on_rejected(&self, r: &Rejected<'_>) {
        self.rejected.lock().unwrap().push((r.method.to_owned(), r.path.to_owned(), r.status));
    }

    fn is_probe(&self, _method: &str, path: &str) -> bool {
        path == "/health"
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub shutdown: Shutdown,
    pub handler: Arc<TestHandler>,
    join: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start(cfg: HttpConfig) -> TestServer {
        Self::start_with(cfg, TestHandler::default())
    }

    pub fn start_with(cfg: HttpConfig, handler: TestHandler) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let handler = Arc::new(handler);
        let (h, s) = (handler.clone() as Arc<dyn Handler>, shutdown.clone());
        let join = std::thread::spawn(move || serve(listener, h, cfg, s));
        TestServer { addr, shutdown, handler, join: Some(join) }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        s
    }

    /// Sends raw bytes on a new connection and returns everything until the server closes it.
    pub fn roundtrip(&self, bytes: &[u8]) -> String {
        let mut s = self.connect();
        s.write_all(bytes).unwrap();
        read_to_close(&mut s)
    }

    pub fn rejected(&self) -> Vec<(String, String, u16)> {
        self.handler.rejected.lock().unwrap().clone()
    }

    /// Triggers shutdown and waits for `serve` to return.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.shutdown.trigger();
        self.join.take().unwrap().join().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(j) = self.join.take() {
            self.shutdown.force();
            let _ = j.join();
        }
    }
}

pub fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    // A reset after the response is fine: what arrived before it is what we check.
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// One parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The chunks as sent, for chunked responses.
    pub chunks: Vec<Vec<u8>>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// Reads one response head from `r` (no body).
pub fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 "), "status line: {line:?}");
    let status = line[9..12].parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        let l = l.trim_end_matches("\r\n");
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(": ").expect("header line");
        headers.push((n.to_owned(), v.to_owned()));
    }
    (status, headers)
}

/// Reads one complete response; `head_request` means no body follows whatever the headers say.
pub fn read_response(r: &mut impl BufRead, head_request: bool) -> Resp {
    let (status, headers) = read_head(r);
    let mut resp = Resp { status, headers, body: Vec::new(), chunks: Vec::new() };
    if head_request || status == 204 || status == 304 {
        return resp;
    }
    if let Some(len) = resp.header("Content-Length") {
        let mut body = vec![0; len.parse().unwrap()];
        r.read_exact(&mut body).unwrap();
        resp.body = body;
    } else if resp.header("Transfer-Encoding") == Some("chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim_end(), 16).expect("chunk size");
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            assert!(chunk.ends_with(b"\r\n"));
            chunk.truncate(n);
            if n == 0 {
                break;
            }
            resp.body.extend_from_slice(&chunk);
            resp.chunks.push(chunk);
        }
    } else {
        r.read_to_end(&mut resp.body).unwrap();
    }
    resp
}

/// A connection with a buffered reader over it.
pub struct Client {
    pub reader: BufReader<TcpStream>,
}

impl Client {
    pub fn new(server: &TestServer) -> Client {
        Client { reader: BufReader::new(server.connect()) }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).unwrap();
    }

    pub fn response(&mut self) -> Resp {
        read_response(&mut self.reader, false)
    }

    pub fn head_response(&mut self) -> Resp {
        read_response(&mut self.reader, true)
    }

    /// True if the server has closed the connection (EOF with nothing more to read).
    pub fn at_eof(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(_) => rest.is_empty(),
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// Status code of the first response in a raw reply.
pub fn status_of(raw: &str) -> u16 {
    assert!(raw.starts_with("HTTP/1.1 "), "reply: {raw:?}");
    raw[9..12].parse().unwrap()
}

/// The JSON body of an error reply read to the close.
pub fn error_body(raw: &str) -> serde_json::Value {
    let body = &raw[raw.find("\r\n\r\n").expect("head end") + 4..];
    serde_json::from_str(body).unwrap_or_else(|e| panic!("error body {body:?}: {e}"))
}

pub fn quick_cfg() -> HttpConfig {
    HttpConfig { shutdown_grace: Duration::from_secs(2), ..HttpConfig::default() }
}
