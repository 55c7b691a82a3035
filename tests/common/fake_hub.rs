//! A local stand-in for the Hugging Face Hub, answering the routes the Hub client speaks from
//! files a test made: `GET /api/models/{repo}/revision/{rev}` (the listing), `HEAD
//! /{repo}/resolve/{rev}/{file}` (a 302 to `/cdn/{sha256}` carrying `X-Repo-Commit`,
//! `X-Linked-Etag` and `X-Linked-Size`, as the Hub answers for LFS files) and `GET /cdn/{sha}`
//! (the bytes, with `Range`). It records every request, and can cut a transfer, lie about a
//! hash, or gate a repository behind a token.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub const COMMIT: &str = "c0ffee0000000000000000000000000000000042";

#[derive(Default)]
pub struct Repo {
    /// Path in the repository and its bytes.
    pub files: Vec<(String, Vec<u8>)>,
    /// Requests must carry `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// The ETag (the SHA-256 the Hub reports) is wrong.
    pub lie_about_hash: bool,
    /// The redirect points where the CDN has nothing.
    pub cdn_gone: bool,
}

/// One request as the hub saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

pub struct FakeHub {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeHub {
    /// Serves `repos` (by `owner/name`). The first `cuts` transfers of a file's bytes stop after
    /// half the body, the connection closed.
    pub fn start(repos: HashMap<String, Repo>, cuts: usize) -> FakeHub {
        // The bytes are served from a second port, as the Hub's CDN is another host: a token
        // must not follow the redirect there.
        let (hub, cdn) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
        let (addr, cdn_addr) = (hub.local_addr().unwrap(), cdn.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new((repos, AtomicUsize::new(cuts), seen.clone()));
        for listener in [hub, cdn] {
            let state = state.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming().flatten() {
                    let state = state.clone();
                    std::thread::spawn(move || serve(conn, cdn_addr, &state.0, &state.1, &state.2));
                }
            });
        }
        FakeHub { addr, seen }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut h = mtplx_lite::model::sha256::Sha256::default();
    h.update(bytes);
    mtplx_lite::model::sha256::hex(&h.finish())
}

fn serve(conn: TcpStream, cdn: SocketAddr, repos: &HashMap<String, Repo>, cuts: &AtomicUsize, seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let s = Seen {
            method,
            path,
            range: headers.get("range").cloned(),
            authorization: headers.get("authorization").cloned(),
        };
        seen.lock().unwrap().push(s.clone());
        if !answer(&mut out, cdn, &s, repos, cuts) {
            return;
        }
    }
}

/// Writes the answer; false where the connection was cut.
fn answer(out: &mut TcpStream, cdn: SocketAddr, s: &Seen, repos: &HashMap<String, Repo>, cuts: &AtomicUsize) -> bool {
    let reply = |out: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8], head: bool| {
        let mut r = format!("HTTP/1.1 {status}\r\n");
        for (k, v) in headers {
            r += &format!("{k}: {v}\r\n");
        }
        r += &format!("Content-Length: {}\r\n\r\n", body.len());
        let _ = out.write_all(r.as_bytes());
        if !head {
            let _ = out.write_all(body);
        }
        true
    };
    let err = |out: &mut TcpStream, status: &str, code: &str| {
        reply(out, status, &[("X-Error-Code", code.to_string())], b"{}", s.method == "HEAD")
    };
    if let Some(sha) = s.path.strip_prefix("/cdn/") {
        let Some(bytes) = repos.values().flat_map(|r| &r.files).find(|(_, b)| sha256_hex(b) == sha).map(|(_, b)| b)
        else {
            return err(out, "404 Not Found", "");
        };
        let from: usize =
            s.range.as_deref().and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok()).unwrap_or(0);
        let body = &bytes[from.min(bytes.len())..];
        let status = if s.range.is_some() { "206 Partial Content" } else { "200 OK" };
        if cuts.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1)).is_ok() {
            let head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n", body.len());
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(&body[..body.len() / 2]);
            let _ = out.flush();
            let _ = out.shutdown(std::net::Shutdown::Both);
            return false;
        }
        let range = format!("bytes {from}-{}/{}", bytes.len().saturating_sub(1), bytes.len());
        return reply(out, status, &[("Content-Range", range)], body, false);
    }
    let (repo_name, rest) = match s.path.strip_prefix("/api/models/") {
        Some(p) => split_repo(p),
        None => split_repo(s.path.trim_start_matches('/')),
    };
    let Some(repo) = repos.get(&repo_name) else {
        return err(out, "401 Unauthorized", "RepoNotFound");
    };
    if repo.token.as_ref().is_some_and(|t| s.authorization.as_deref() != Some(&format!("Bearer {t}"))) {
        return err(out, "401 Unauthorized", "GatedRepo");
    }
    if s.path.starts_with("/api/models/") {
        let siblings: Vec<_> = repo.files.iter().map(|(f, _)| serde_json::json!({ "rfilename": f })).collect();
        let body = serde_json::json!({ "id": repo_name, "sha": COMMIT, "siblings": siblings }).to_string();
        return reply(out, "200 OK", &[("Content-Type", "application/json".into())], body.as_bytes(), false);
    }
    let file = rest.strip_prefix("resolve/main/").unwrap_or("");
    let Some((_, bytes)) = repo.files.iter().find(|(f, _)| f == file) else {
        return err(out, "404 Not Found", "EntryNotFound");
    };
    let sha = sha256_hex(bytes);
    let etag = if repo.lie_about_hash { sha256_hex(b"something else") } else { sha.clone() };
    let headers = [
        ("Location", format!("http://{cdn}/cdn/{}", if repo.cdn_gone { "gone" } else { &sha })),
        ("X-Repo-Commit", COMMIT.to_string()),
        ("X-Linked-Etag", format!("\"{etag}\"")),
        ("X-Linked-Size", bytes.len().to_string()),
    ];
    reply(out, "302 Found", &headers, b"", s.method == "HEAD")
}

/// `owner/name` and what follows it.
fn split_repo(p: &str) -> (String, &str) {
    let mut it = p.splitn(3, '/');
    let (o, n, rest) = (it.next().unwrap_or(""), it.next().unwrap_or(""), it.next().unwrap_or(""));
    (format!("{o}/{n}"), rest)
}
