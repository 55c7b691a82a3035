//! Shared by the end-to-end tests: start the real binary on 127.0.0.1:0 and talk to it over
//! real sockets.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The demo model, fetched through the server's own code path if it is not cached yet.
pub fn demo_model() -> PathBuf {
    if let Some(p) = std::env::var_os("MTPLX_DEMO_MODEL") {
        return PathBuf::from(p);
    }
    mtplx_lite::model::demo::ensure_demo_model(&mut |line| eprintln!("{line}")).expect("demo model")
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
        cmd.args(["--listen", "127.0.0.1:0"]).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start mtplx-lite");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log2.lock().unwrap().push(line);
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.wait();
                panic!("mtplx-lite exited before listening; stderr: {:?}", log.lock().unwrap());
            }
            if let Some(rest) = line.trim().strip_prefix("listening on http://") {
                let addr = rest.parse().expect("address");
                std::thread::spawn(move || for _ in stdout.lines() {});
                return Server { child, addr, log };
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

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = self.child.wait().expect("wait");
        std::mem::forget(self);
        status
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

/// Reads one response from `r` (Content-Length or chunked; no body for HEAD / 1xx / 204 / 304).
pub fn read_response(r: &mut impl BufRead, head_request: bool) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line.split_whitespace().nth(1).unwrap_or_else(|| panic!("bad status line {line:?}")).parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
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
            r.read_line(&mut line).unwrap();
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap(), 16).unwrap();
            if size == 0 {
                line.clear();
                r.read_line(&mut line).unwrap();
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).unwrap();
            resp.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(n) = resp.header("content-length") {
        let mut body = vec![0; n.parse().unwrap()];
        r.read_exact(&mut body).unwrap();
        resp.body = body;
    } else {
        r.read_to_end(&mut resp.body).unwrap();
    }
    resp
}

/// One request on a fresh connection.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
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
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}
