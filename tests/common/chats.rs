//! What the chat tests share: a server on its own database, and the chat routes as calls.

use super::{demo_model, request, Resp, Server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;

/// A fresh directory under the system's temp directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("mtplx-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn join(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The demo model on one kernel thread with `--database DB` and `extra` flags.
pub fn start(database: &str, extra: &[&str]) -> Server {
    let model = demo_model();
    let mut args = vec!["--model", model.to_str().unwrap(), "--threads", "1", "--database", database];
    args.extend_from_slice(extra);
    Server::start(&args)
}

pub fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Resp {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    request(addr, method, path, &[("Content-Type", "application/json")], body.as_bytes())
}

/// Creates a chat and returns its id (the test fails unless it is a 200).
pub fn create(addr: SocketAddr, body: &Value) -> String {
    let r = call(addr, "POST", "/v1/chats", Some(body));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["chat_id"].as_str().unwrap().to_string()
}

/// One whole turn: the stored user and assistant messages (the test fails unless it is a 200).
pub fn turn(addr: SocketAddr, chat_id: &str, content: &str, max_tokens: u64) -> Value {
    let r = call(
        addr,
        "POST",
        &format!("/v1/chats/{chat_id}/messages"),
        Some(&json!({"content": content, "max_tokens": max_tokens})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Every message of a chat, oldest first.
pub fn messages(addr: SocketAddr, chat_id: &str) -> Vec<Value> {
    let r = call(addr, "GET", &format!("/v1/chats/{chat_id}/messages?page_size=100"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"].as_array().unwrap().clone()
}
