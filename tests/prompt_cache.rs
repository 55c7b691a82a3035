//! The prompt cache's disk tier (`--prompt-cache-dir`), through the server: a long prompt's
//! blocks outlive a restart and are loaded instead of computed, with the same answer as a
//! server without the tier; a corrupt block is detected, deleted and never used; a directory
//! that cannot be made leaves the tier off and the server serving.

mod common;

use common::{demo_model, get, metric, post_json, request, Server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Block size of the disk tier (`engine::prompt_block::BLOCK_TOKENS`).
const BLOCK: u64 = mtplx_lite::engine::prompt_block::BLOCK_TOKENS as u64;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mtplx-pcache-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn start(extra: &[&str]) -> Server {
    let model = demo_model();
    let mut args = vec!["--model", model.to_str().unwrap(), "--threads", "2", "--draft", "none"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn prompt() -> String {
    (0..60).map(|i| format!("Line {i}: the tide came in over the grey stones and went out again. ")).collect()
}

fn complete(addr: SocketAddr) -> Value {
    let body = json!({"prompt": prompt(), "max_tokens": 8, "temperature": 0});
    let r = post_json(addr, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn blocks(dir: &Path) -> Vec<PathBuf> {
    let files = std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();
    files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "kvb")).collect()
}

/// Waits for the writer thread to have written `n` blocks.
fn wait_for_blocks(dir: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while blocks(dir).len() < n {
        assert!(Instant::now() < deadline, "{} of {n} blocks written", blocks(dir).len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cached(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()
}

#[test]
fn a_prompt_on_disk_survives_a_restart_and_answers_as_if_computed() {
    let dir = tmp("restart");
    let flag = ["--prompt-cache-dir", dir.to_str().unwrap()];
    let plain = start(&[]);
    let reference = complete(plain.addr);
    drop(plain);

    let s = start(&flag);
    let first = complete(s.addr);
    let p = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(p > 2 * BLOCK, "the prompt fills two blocks: {p} tokens");
    assert_eq!(cached(&first), 0);
    assert_eq!(first["mtplx_stats"]["session_prompt_prefix_commit"]["disk"], "no_entry", "{first}");
    let status = get(s.addr, "/v1/mtplx/cache").json();
    assert_eq!(status["disk"]["recent_misses"][0]["reason"], "no_entry", "{status}");
    assert_eq!(status["disk"]["recent_misses"][0]["prompt_tokens"], p);
    // The cache holds the prompt and every answer token but the last, which was never fed.
    let held = p + first["usage"]["completion_tokens"].as_u64().unwrap() - 1;
    let stored = (held / BLOCK) as usize;
    wait_for_blocks(&dir, stored);
    drop(s);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "the cache directory is private to the server's user");
    }

    let s = start(&flag);
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains(&format!("prompt cache: {stored} blocks")), "{log}");
    let again = complete(s.addr);
    let from_disk = (p - 1) / BLOCK * BLOCK;
    assert_eq!(cached(&again), from_disk, "{again}");
    assert_eq!(again["mtplx_stats"]["session_prompt_prefix_commit"]["disk_tokens"], from_disk, "{again}");
    assert_eq!(again["mtplx_stats"]["session_prompt_prefix_commit"]["disk"], "hit");
    assert_eq!(again["mtplx_stats"]["session_prompt_prefix_commit"]["prefilled_tokens"], p - from_disk);
    assert_eq!(again["choices"][0]["text"], reference["choices"][0]["text"], "{again}\n{reference}");
    assert_eq!(first["choices"][0]["text"], reference["choices"][0]["text"]);
    let text = get(s.addr, "/metrics").text();
    let tier = |t: &str| metric(&text, &format!("mtplx_prompt_cache_tokens_total{{tier=\"{t}\"}}"));
    assert_eq!(tier("disk"), Some(from_disk as f64), "{text}");
    assert_eq!(tier("computed"), Some((p - from_disk) as f64));
    assert_eq!(tier("memory"), Some(0.0));
    assert_eq!(metric(&text, "mtplx_prompt_cache_disk_lookups_total{outcome=\"hit\"}"), Some(1.0));
    let status = get(s.addr, "/v1/mtplx/cache").json();
    assert_eq!(status["disk"]["blocks"], stored, "{status}");
    assert_eq!(status["disk"]["loaded_blocks"], from_disk / BLOCK, "{status}");
    assert_eq!(status["memory"]["idle_sequences"], 1, "{status}");
    drop(s);

    // Every block damaged by one byte: the first one read is refused, deleted and logged, and
    // the prompt is computed.
    for b in blocks(&dir) {
        let mut bytes = std::fs::read(&b).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&b, bytes).unwrap();
    }
    let s = start(&flag);
    let hurt = complete(s.addr);
    assert_eq!(cached(&hurt), 0, "{hurt}");
    assert_eq!(hurt["choices"][0]["text"], reference["choices"][0]["text"]);
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("corrupt: its checksum does not match its bytes; deleted, not used"), "{log}");
    assert_eq!(hurt["mtplx_stats"]["session_prompt_prefix_commit"]["disk"], "corrupt");
    // The block deleted as corrupt is written again from this run; then DELETE empties the
    // directory.
    wait_for_blocks(&dir, stored);
    let held = blocks(&dir).len();
    let r = request(s.addr, "DELETE", "/v1/mtplx/cache", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["deleted_blocks"], held, "{}", r.text());
    assert!(blocks(&dir).is_empty());
    assert_eq!(get(s.addr, "/v1/mtplx/cache").json()["disk"]["blocks"], 0);
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_directory_that_cannot_be_made_leaves_the_tier_off_and_the_server_serving() {
    let file = tmp("notadir");
    std::fs::write(&file, b"a file, not a directory").unwrap();
    let model = demo_model();
    let args = ["--model", model.to_str().unwrap(), "--threads", "1", "--prompt-cache-dir", file.to_str().unwrap()];
    let s = Server::start_with_env(&args, &[("MTPLX_API_KEY", "k")]);
    let auth = [("Authorization", "Bearer k")];
    let body = json!({"prompt": prompt(), "max_tokens": 8, "temperature": 0}).to_string();
    let v =
        request(s.addr, "POST", "/v1/completions", &[("Content-Type", "application/json"), auth[0]], body.as_bytes())
            .json();
    assert_eq!(cached(&v), 0);
    assert_eq!(v["mtplx_stats"]["session_prompt_prefix_commit"]["disk"], "off", "{v}");
    // The cache's route sits behind the API key.
    assert_eq!(request(s.addr, "GET", "/v1/mtplx/cache", &[], b"").status, 401);
    assert_eq!(request(s.addr, "DELETE", "/v1/mtplx/cache", &[], b"").status, 401);
    let status = request(s.addr, "GET", "/v1/mtplx/cache", &auth, b"").json();
    assert!(status["disk"].is_null() && status["memory"]["idle_sequences"] == 1, "{status}");
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("the disk tier is off, serving goes on"), "{log}");
    drop(s);
    std::fs::remove_file(&file).unwrap();
}
