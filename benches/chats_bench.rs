//! Persisted chats: messages stored per second through `Db` (one at a time, and many in
//! flight), and what a chat turn adds over the same turn through `/v1/chat/completions`, on
//! the real binary with the demo model, alternating the two so that both see the same machine.
//!
//!     cargo bench --bench chats_bench [-- --turns N] [-- --postgres]
//!
//! `--postgres` also measures the store on a throwaway PostgreSQL cluster.

use mtplx_lite::store::pg_cluster::PgCluster;
use mtplx_lite::store::url::DatabaseUrl;
use mtplx_lite::store::{random_id, Chat, Db, Message};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Messages each store throughput run writes.
const MESSAGES: usize = 4000;
/// Writes in flight in the concurrent run (about as many turns as a busy server ends at once).
const IN_FLIGHT: usize = 64;

fn message(chat_id: &str, i: usize) -> Message {
    Message {
        message_id: random_id("msg_"),
        chat_id: chat_id.into(),
        role: if i.is_multiple_of(2) { "user" } else { "assistant" }.into(),
        content: "a message of about the length people type into a chat box, give or take".into(),
        created_at: 0,
        finish_reason: None,
        prompt_tokens: Some(40),
        completion_tokens: Some(12),
        request_id: Some("chatcmpl-bench".into()),
    }
}

fn store_throughput(what: &str, url: &DatabaseUrl) {
    let db = Db::open(url, None).unwrap_or_else(|e| panic!("{what}: {e}"));
    let chat = Chat {
        chat_id: random_id("chat_"),
        created_at: 0,
        title: None,
        system: None,
        defaults: "{}".into(),
        client_ip: None,
        country: None,
    };
    let (c, id) = (chat.clone(), chat.chat_id.clone());
    smol::block_on(db.call(true, move |s| s.create_chat(&c))).unwrap();
    let t0 = Instant::now();
    for i in 0..MESSAGES {
        let m = message(&id, i);
        smol::block_on(db.call(true, move |s| s.append_message(&m))).unwrap();
    }
    let one = MESSAGES as f64 / t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    smol::block_on(async {
        let mut pending = std::collections::VecDeque::new();
        for i in 0..MESSAGES {
            let m = message(&id, i);
            pending.push_back(db.call(true, move |s| s.append_message(&m)));
            if pending.len() >= IN_FLIGHT {
                pending.pop_front().unwrap().await.unwrap();
            }
        }
        for p in pending {
            p.await.unwrap();
        }
    });
    let many = MESSAGES as f64 / t0.elapsed().as_secs_f64();
    println!("{what}: {one:.0} messages/s one at a time, {many:.0} messages/s with {IN_FLIGHT} in flight");
    db.close();
}

struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    fn post(&mut self, path: &str, body: &str) -> (u16, Vec<u8>) {
        // One write of the whole request: written in pieces, Nagle's algorithm would hold the
        // last piece for the server's delayed ACK (about 40 ms), noise far above what is measured.
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.r.get_mut().write_all(req.as_bytes()).unwrap();
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut len = 0;
        loop {
            line.clear();
            self.r.read_line(&mut line).unwrap();
            if line.trim_end().is_empty() {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
            }
        }
        let mut b = vec![0; len];
        self.r.read_exact(&mut b).unwrap();
        (status, b)
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn turn_overhead(turns: usize) {
    let dir = std::env::temp_dir().join(random_id("mtplx-chats-bench-"));
    std::fs::create_dir_all(&dir).unwrap();
    let model = mtplx_lite::model::fetch::ensure_demo_model(&mut |l| eprintln!("{l}")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"))
        .args(["--listen", "127.0.0.1:0", "--threads", "1", "--model", model.to_str().unwrap(), "--database"])
        .arg(dir.join("chats.db"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the server exited");
        if let Some(a) = line.trim().strip_prefix("listening on http://") {
            break a.to_string();
        }
    };
    let stream = TcpStream::connect(&addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut conn = Conn { r: BufReader::new(stream) };
    let question = "Name one color.";
    let plain = format!(r#"{{"messages":[{{"role":"user","content":"{question}"}}],"max_tokens":1,"temperature":0}}"#);
    let turn = format!(r#"{{"content":"{question}","max_tokens":1,"temperature":0}}"#);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..turns + 10 {
        // A fresh chat each time, so that both prompts are the very same tokens.
        let (st, body) = conn.post("/v1/chats", "{}");
        assert_eq!(st, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let path = format!("/v1/chats/{}/messages", v["chat_id"].as_str().unwrap());
        let t0 = Instant::now();
        assert_eq!(conn.post("/v1/chat/completions", &plain).0, 200);
        let ta = t0.elapsed();
        let t0 = Instant::now();
        assert_eq!(conn.post(&path, &turn).0, 200);
        let tb = t0.elapsed();
        if i >= 10 {
            a.push(ta.as_secs_f64() * 1e3);
            b.push(tb.as_secs_f64() * 1e3);
        }
    }
    let mut d: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y - x).collect();
    let (a50, a99, b50, b99) =
        (quantile(&mut a, 0.5), quantile(&mut a, 0.99), quantile(&mut b, 0.5), quantile(&mut b, 0.99));
    println!("{turns} turns of max_tokens=1, SQLite, alternating:");
    println!("  /v1/chat/completions      p50 {a50:.3} ms  p99 {a99:.3} ms");
    println!("  /v1/chats/{{id}}/messages   p50 {b50:.3} ms  p99 {b99:.3} ms");
    println!(
        "  added by the chat turn: p50 {:.3} ms, p99 {:.3} ms (paired differences); p99 to p99 {:.3} ms",
        quantile(&mut d, 0.5),
        quantile(&mut d, 0.99),
        b99 - a99
    );
    // The server's own measure of the writes a turn adds (the question, then the answer),
    // free of the client's scheduling noise.
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(s, "GET /v1/mtplx/metrics?limit=0 HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let q = &v["quantiles"]["mtplx_db_write_seconds"];
    println!("  database writes on the server ({} of them): {q}", q["count"]);
    let q = &v["quantiles"]["mtplx_chat_turn_db_wait_seconds"];
    println!("  what each turn waited on the database, on the server ({} turns): {q}", q["count"]);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let turns = args.iter().position(|a| a == "--turns").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(300);
    let dir = std::env::temp_dir().join(random_id("mtplx-store-bench-"));
    store_throughput("SQLite", &DatabaseUrl::Sqlite(dir.join("chats.db")));
    let _ = std::fs::remove_dir_all(&dir);
    if args.iter().any(|a| a == "--postgres") {
        let pg = PgCluster::start().unwrap_or_else(|e| panic!("{e}"));
        store_throughput("PostgreSQL", &DatabaseUrl::Postgres(pg.url()));
    }
    turn_overhead(turns);
}
