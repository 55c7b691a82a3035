//! Shared by the end-to-end tests: start the real binary on 127.0.0.1:0 and talk to it over
//! real sockets.
#![allow(dead_code)]

pub mod chats;
pub mod docs;
pub mod fake_hub;
pub mod mmdb;
pub mod reference;
pub mod sse;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest wait for the server's "listening on" line: loading the demo model takes about a
/// second; this only bounds a broken start.
pub const START_DEADLINE: Duration = Duration::from_secs(120);
/// Longest run of a helper process (a Python client, curl, promtool) before the test fails.
pub const CHILD_DEADLINE: Duration = Duration::from_secs(120);

/// The demo model, fetched through the server's own code path if it is not cached yet.
pub fn demo_model() -> PathBuf {
    if let Some(p) = std::env::var_os("MTPLX_DEMO_MODEL") {
        return PathBuf::from(p);
    }
    mtplx_lite::model::fetch::ensure_demo_model(&mut |line| eprintln!("{line}")).expect("demo model")
}

/// The Gemma 3 270M catalogue model, fetched through the server's own code path if it is not
/// cached yet (`tests/setup.sh` fetches it first).
pub fn gemma_model() -> PathBuf {
    let entry = mtplx_lite::model::catalogue::find("gemma3-270m").expect("gemma3-270m is in the catalogue");
    mtplx_lite::model::fetch::ensure(entry, &mut |line| eprintln!("{line}")).expect("gemma3-270m")
}

/// The venv that `tests/setup.sh` installs the Python test tools into (`prometheus_client`,
/// `openai`, `requests`): in the cache directory, beside the demo model, so that a stock
/// Debian Python (PEP 668: no `pip install` outside a venv) works and every checkout shares it.
pub fn test_venv() -> PathBuf {
    mtplx_lite::model::fetch::cache_dir().unwrap_or_else(|e| panic!("{e}")).join("test-venv")
}

/// A command running the Python of the test venv (`MTPLX_TEST_PYTHON` overrides it). Every test
/// that runs Python goes through here.
pub fn python() -> Command {
    if let Some(p) = std::env::var_os("MTPLX_TEST_PYTHON") {
        return Command::new(p);
    }
    let bin = test_venv().join("bin").join("python3");
    assert!(
        bin.exists(),
        "{} is missing: the Python test tools are not installed; run `bash tests/setup.sh` (or set MTPLX_TEST_PYTHON)",
        bin.display()
    );
    Command::new(bin)
}

/// Runs `cmd` (stdin closed) to its end and returns its output; past `limit` it is killed and
/// the test fails with `what` and whatever it printed.
pub fn output_within(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: could not start it: {e}"));
    Watched::new(child, what).finish_within(limit)
}

/// A child process whose stdout and stderr are collected in the background; killed when
/// dropped, so that a failing test leaves nothing running.
pub struct Watched {
    child: Child,
    what: String,
    stdout: mpsc::Receiver<Vec<u8>>,
    stderr: mpsc::Receiver<Vec<u8>>,
}

fn collect(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut p) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}

impl Watched {
    /// Takes the child's piped stdout and stderr (a pipe not set up reads as empty).
    pub fn new(mut child: Child, what: &str) -> Watched {
        let stdout = collect(child.stdout.take());
        let stderr = collect(child.stderr.take());
        Watched { child, what: what.into(), stdout, stderr }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the exit and the output. Past `limit` the process is killed and the test
    /// fails, showing what it printed until then.
    pub fn finish_within(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for a child process") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The pipes close with the process (or soon after, if it left children holding them).
        let grace = Duration::from_secs(5);
        let stdout = self.stdout.recv_timeout(grace).unwrap_or_default();
        let stderr = self.stderr.recv_timeout(grace).unwrap_or_default();
        let Some(status) = status else {
            panic!(
                "{} did not finish within {limit:?} and was killed\n--- stdout\n{}\n--- stderr\n{}",
                self.what,
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
        };
        Output { status, stdout, stderr }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raises this process's soft limit of open files to at least `needed` (within the hard
/// limit), for a test that holds that many sockets at once: shells commonly start with a soft
/// limit of 1024 under a much higher hard one, and only the process itself (or its parent) can
/// lift it. `prlimit` (util-linux) on our own pid does it without `unsafe` or a libc crate.
/// Fails the test, saying what to do, when the limit stays too low.
pub fn raise_open_files_limit(needed: u64) {
    let (soft, hard) = open_files_limit();
    if soft >= needed {
        return;
    }
    let raised = Command::new("prlimit")
        .args(["--pid", &std::process::id().to_string(), &format!("--nofile={}:", needed.min(hard))])
        .status();
    let (soft, hard) = open_files_limit();
    assert!(
        soft >= needed,
        "this test holds about {needed} descriptors at once, but the soft limit of open files is {soft} (hard {hard}) and prlimit could not raise it ({raised:?}); run it after `ulimit -n {needed}`"
    );
}

/// This process's (soft, hard) limit of open files, from `/proc/self/limits`.
fn open_files_limit() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("reading /proc/self/limits");
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .expect("a 'Max open files' line in /proc/self/limits");
    let mut values = line.split_whitespace().map(|v| {
        if v == "unlimited" {
            u64::MAX
        } else {
            v.parse().unwrap_or_else(|e| panic!("limit {v:?}: {e}"))
        }
    });
    (values.next().unwrap_or(0), values.next().unwrap_or(0))
}

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Lines the server printed to stderr, collected in the background.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `mtplx-lite --listen 127.0.0.1:0 ARGS...` and waits for its "listening on" line.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        Self::start_on("127.0.0.1:0", args, env)
    }

    /// Starts `mtplx-lite --listen LISTEN ARGS...`: a restart on the port of an earlier server.
    pub fn start_on(listen: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
        cmd.args(["--listen", listen]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self::start_command(cmd)
    }

    /// Starts `cmd`, which runs mtplx-lite in the end (perhaps through a shell's `exec`, as
    /// `cargo run` does), and waits for its "listening on" line.
    pub fn start_command(mut cmd: Command) -> Server {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start mtplx-lite");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log2.lock().unwrap().push(line);
            }
        });
        // stdout is read on its own thread, so that the wait for "listening on" has a deadline.
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if let Some(rest) = line.trim().strip_prefix("listening on http://") {
                    let _ = tx.send(rest.to_string());
                }
            }
        });
        match rx.recv_timeout(START_DEADLINE) {
            Ok(addr) => {
                let addr = addr.parse().unwrap_or_else(|e| panic!("listening address {addr:?}: {e}"));
                Server { child, addr, log }
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => {
                        format!("did not print \"listening on\" within {START_DEADLINE:?}")
                    }
                    mpsc::RecvTimeoutError::Disconnected => "exited before listening".to_string(),
                };
                panic!("mtplx-lite {why}; stderr: {:?}", log.lock().unwrap());
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }

    /// Sends SIGTERM and waits for the exit status (failing the test if the server is still
    /// running after its shutdown grace and a margin).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        const EXIT_DEADLINE: Duration = Duration::from_secs(60);
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + EXIT_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for mtplx-lite") {
                return status;
            }
            // Drop kills the server when this fails.
            assert!(
                Instant::now() < deadline,
                "mtplx-lite still running {EXIT_DEADLINE:?} after SIGTERM; stderr: {:?}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed HTTP/1.1 response (body de-chunked).
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// What a failed read says: every socket of these tests has a read timeout, so a server that
/// never answers fails the read instead of hanging the test.
const READ_FAILED: &str = "reading the response (bounded by the socket's read timeout)";

/// Reads one response from `r` (Content-Length or chunked; no body for HEAD / 1xx / 204 / 304).
pub fn read_response(r: &mut impl BufRead, head_request: bool) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).expect(READ_FAILED);
    let status: u16 =
        line.split_whitespace().nth(1).unwrap_or_else(|| panic!("bad status line {line:?}")).parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).expect(READ_FAILED);
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').unwrap();
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let mut resp = Resp { status, headers, body: Vec::new() };
    if head_request || status < 200 || status == 204 || status == 304 {
        return resp;
    }
    if resp.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            r.read_line(&mut line).expect(READ_FAILED);
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap(), 16).unwrap();
            if size == 0 {
                line.clear();
                r.read_line(&mut line).expect(READ_FAILED);
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).expect(READ_FAILED);
            resp.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(n) = resp.header("content-length") {
        let mut body = vec![0; n.parse().unwrap()];
        r.read_exact(&mut body).expect(READ_FAILED);
        resp.body = body;
    } else {
        r.read_to_end(&mut resp.body).expect(READ_FAILED);
    }
    resp
}

/// How long a test waits for a response, unless it says otherwise.
const RESPONSE_DEADLINE: Duration = Duration::from_secs(120);

/// One request on a fresh connection.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    request_within(addr, (method, path), headers, body, RESPONSE_DEADLINE)
}

/// [`request`] with its own deadline, for answers that take longer (prefills of thousands of
/// tokens on a loaded machine).
pub fn request_within(
    addr: SocketAddr,
    (method, path): (&str, &str),
    headers: &[(&str, &str)],
    body: &[u8],
    deadline: Duration,
) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(deadline)).unwrap();
    // Head and body go in two writes: without this, Nagle's algorithm holds the body for the
    // server's delayed ACK, about 40 ms on every POST.
    s.set_nodelay(true).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    read_response(&mut BufReader::new(s), method == "HEAD")
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

pub fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Resp {
    request(addr, "POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
}

/// Reads a response head (status line and headers) and returns it as text.
pub fn read_head(r: &mut impl BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).expect(READ_FAILED) == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}

/// The value of an unlabelled sample `name` in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Sends `body` to `path` as a request whose answer is gathered whole (no `stream`) on a raw
/// socket, waits until the decode thread runs it (`llm_requests_running` reads 1, within
/// `limit`), then a moment more, and leaves: the client that does not wait for its answer.
pub fn post_then_leave(s: &Server, path: &str, body: &serde_json::Value, limit: Duration) {
    let body = body.to_string();
    let mut c = s.connect();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let deadline = Instant::now() + limit;
    while metric(&get(s.addr, "/metrics").text(), "llm_requests_running") != Some(1.0) {
        assert!(Instant::now() < deadline, "the request to {path} never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    drop(c);
}
