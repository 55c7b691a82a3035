//! The official `openai` Python package (and the MTPLX client examples, the two `requests`
//! snippets of the MTPLX metrics guide, unchanged) against the real binary over real sockets.
//! The check scripts live in `tests/py/` (see its README); each asserts what it sees and exits
//! non-zero on the first mismatch. The examples of `docs/api.md` and `docs/metrics.md` are run
//! as the Markdown prints them (`common::docs`), with only the server's address swapped in.

mod common;

use common::{demo_model, docs, get, output_within, post_json, python, Server, Watched, CHILD_DEADLINE};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest wait for a line from a long-running Python client (a chat of a few tokens takes well
/// under a second; this only bounds a broken run).
const LINE_WAIT: Duration = Duration::from_secs(30);
/// The address the doc's examples use; the tests swap in the test server's.
const DOC_ADDR: &str = "127.0.0.1:8100";

fn py(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(name)
}

fn start(extra: &[&str]) -> Server {
    let model = demo_model();
    let mut args = vec!["--model", model.to_str().unwrap(), "--threads", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn explain(what: &str, out: &Output, server: &Server) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}\n--- server log\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log.lock().unwrap().join("\n")
    )
}

/// Runs `tests/py/<script>` with `MTPLX_BASE_URL` pointing at `server`; returns its stdout.
fn run_check(server: &Server, script: &str, env: &[(&str, &str)]) -> String {
    let out = output_within(
        python().arg(py(script)).env("MTPLX_BASE_URL", format!("http://{}", server.addr)).envs(env.iter().copied()),
        CHILD_DEADLINE,
        script,
    );
    assert!(out.status.success(), "{}", explain(script, &out, server));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The doc's MTPLX client example `name` (in `docs/metrics.md`) with only its `BASE_URL = ...`
/// line changed.
fn mtplx_example(name: &str, base_url: &str) -> String {
    with_base_url(&docs::example("metrics.md", name), base_url)
}

/// An MTPLX client example with only its `BASE_URL = ...` line changed.
fn with_base_url(code: &str, base_url: &str) -> String {
    let line = "BASE_URL = \"http://localhost:8100\"";
    assert_eq!(code.matches(line).count(), 1, "the MTPLX client example sets BASE_URL once");
    code.replace(line, &format!("BASE_URL = \"{base_url}\""))
}

fn chat(server: &Server, max_tokens: u32) -> serde_json::Value {
    let r = post_json(
        server.addr,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "Tell me about the moon."}], "max_tokens": max_tokens}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn openai_package_chat() {
    let s = start(&[]);
    let out = run_check(&s, "check_chat.py", &[]);
    assert!(out.contains("chat ok"), "{out}");
}

#[test]
fn openai_package_streamed_chat() {
    let s = start(&[]);
    let out = run_check(&s, "check_stream.py", &[]);
    assert!(out.contains("stream ok"), "{out}");
}

#[test]
fn openai_package_completions() {
    let s = start(&[]);
    let out = run_check(&s, "check_completions.py", &[]);
    assert!(out.contains("completions ok"), "{out}");
}

#[test]
fn openai_package_logprobs() {
    let s = start(&[]);
    let out = run_check(&s, "check_logprobs.py", &[]);
    assert!(out.contains("logprobs ok"), "{out}");
}

#[test]
fn openai_package_sees_errors_in_openai_shape() {
    let s = start(&[]);
    let out = run_check(&s, "check_errors.py", &[]);
    assert!(out.contains("errors ok"), "{out}");
}

#[test]
fn openai_package_context_overflow() {
    let s = start(&["--ctx", "64"]);
    let out = run_check(&s, "check_context.py", &[("MTPLX_CTX", "64")]);
    assert!(out.contains("context ok"), "{out}");
}

/// The MTPLX stream reader example, unchanged but for BASE_URL, prints one `tok_s=` line per chat
/// that finishes while it listens, with the values of that chat's record.
#[test]
fn mtplx_stream_reader_example_prints_live_records() {
    let s = start(&[]);
    let code = mtplx_example("mtplx-stream", &format!("http://{}", s.addr));
    let mut child = python()
        .args(["-c", &code])
        .env("PYTHONUNBUFFERED", "1") // its prints reach us as they happen, not at exit
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the test venv's python");
    let stdout = child.stdout.take().unwrap();
    // Killed when the test ends, however it ends; its stderr is kept for the failure messages.
    let _child = Watched::new(child, "the stream reader example");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The subscription exists once the stream request has been answered (and counted).
    let deadline = Instant::now() + LINE_WAIT;
    loop {
        let text = get(s.addr, "/metrics").text();
        if text.lines().any(|l| {
            l.starts_with("http_requests_total{method=\"GET\",route=\"/v1/mtplx/metrics/stream\",status=\"200\"} 1")
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "the stream reader example did not connect within {LINE_WAIT:?}:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..2 {
        let stats = chat(&s, 6)["mtplx_stats"].clone();
        let line = rx
            .recv_timeout(LINE_WAIT)
            .unwrap_or_else(|e| panic!("no line from the stream reader example within {LINE_WAIT:?}: {e}"));
        let (tok, acc) = line
            .strip_prefix("tok_s=")
            .and_then(|r| r.split_once(", accept_rate="))
            .unwrap_or_else(|| panic!("unexpected line {line:?}"));
        let tok: f64 = tok.parse().unwrap();
        let want = stats["tok_s"].as_f64().unwrap();
        assert!(want > 0.0 && (tok - want).abs() <= 0.051, "printed {tok}, the record says {want}");
        assert_eq!(acc, format!("{:.2}", stats["accept_rate"].as_f64().unwrap()));
    }
}

/// The MTPLX snapshot example, unchanged but for BASE_URL, prints the latest record while a chat
/// is being generated.
///
/// The snippet reads `{BASE_URL}/metrics` as JSON. Our `/metrics` answers Prometheus text by
/// default (DESIGN.md: the Prometheus text wins on `/metrics`) and serves the same JSON envelope
/// on `/v1/mtplx/metrics`, so BASE_URL is set to `http://ADDR/v1/mtplx`: the snippet's own
/// `f"{BASE_URL}/metrics"` then names the JSON snapshot route, and its code stays as written.
#[test]
fn mtplx_snapshot_example_prints_the_latest_record() {
    // Plain decoding, so that the accept rate printed is 0 whatever the story says: with the
    // default `--draft auto`, n-gram drafts are made where the sampled text repeats itself, and
    // one run printed 100.0 %.
    let s = start(&["--draft", "none"]);
    let first = chat(&s, 6)["mtplx_stats"]["tok_s"].as_f64().unwrap();
    // A chat in generation while the snippet runs.
    let addr = s.addr;
    let background = std::thread::spawn(move || {
        let r = post_json(
            addr,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 40}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["mtplx_stats"]["tok_s"].as_f64().unwrap()
    });
    let code = mtplx_example("mtplx-snapshot", &format!("http://{}/v1/mtplx", s.addr));
    let out = output_within(python().args(["-c", &code]), CHILD_DEADLINE, "the snapshot snippet");
    assert!(out.status.success(), "{}", explain("the snapshot snippet", &out, &s));
    let second = background.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let tok: f64 =
        lines.next().and_then(|l| l.strip_prefix("Tokens/sec: ")).unwrap_or_else(|| panic!("{text}")).parse().unwrap();
    assert!(tok > 0.0 && (tok == first || tok == second), "printed {tok}; the records say {first} and {second}");
    assert_eq!(lines.next(), Some("Accept rate: 0.0%"), "{text}");
}

/// The snapshot snippet as the doc prints it, `BASE_URL` the server's root, against a server
/// started with the flags of the start line printed beside it (`--metrics-format json`): it reads
/// plain `/metrics` as JSON and prints the latest record. Under the default (Prometheus text)
/// the same snippet fails in `.json()`, which is why the doc prints that start line.
#[test]
fn mtplx_snapshot_example_runs_as_printed_beside_its_start_line() {
    let snippet = |s: &Server| {
        let code = mtplx_example("mtplx-snapshot", &format!("http://{}", s.addr));
        output_within(python().args(["-c", &code]), CHILD_DEADLINE, "the snapshot snippet")
    };
    let flags = docs::server_flags(&docs::example("metrics.md", "mtplx-snapshot-server"));
    assert_eq!(flags, ["--metrics-format", "json"], "the start line printed beside the snippet");
    let json = start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let stats = chat(&json, 6)["mtplx_stats"].clone();
    let tok = stats["tok_s"].as_f64().unwrap();
    // The demo model drafts with its MTP head here: the rate the record holds, as Python's `.1%`.
    let accept = format!("Accept rate: {:.1}%", stats["accept_rate"].as_f64().unwrap() * 100.0);
    let out = snippet(&json);
    assert!(out.status.success(), "{}", explain("the snapshot snippet", &out, &json));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let printed: f64 =
        lines.next().and_then(|l| l.strip_prefix("Tokens/sec: ")).unwrap_or_else(|| panic!("{text}")).parse().unwrap();
    assert_eq!(printed, tok, "the snippet printed another record's rate: {text}");
    assert_eq!(lines.next(), Some(accept.as_str()), "{text}");

    let prometheus = start(&[]);
    chat(&prometheus, 2);
    let out = snippet(&prometheus);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("JSONDecodeError"), "{}", explain("snippet", &out, &prometheus));
}

/// Every Python block of the docs is an example the tests run; the `openai` and `anthropic`
/// packages' examples of `docs/api.md` run as printed against the server and print their answers.
#[test]
fn docs_examples_python_run_as_printed() {
    let named = |doc: &str| -> Vec<String> {
        docs::blocks(doc, "python")
            .into_iter()
            .map(|(name, b)| name.unwrap_or_else(|| panic!("docs/{doc} has a Python block no test runs:\n{b}")))
            .collect()
    };
    assert_eq!(named("api.md"), ["chat", "stream", "parse", "completion", "anthropic"]);
    assert_eq!(named("metrics.md"), ["mtplx-snapshot", "mtplx-stream"]);
    let s = start(&[]);
    for name in ["chat", "stream", "parse", "completion", "anthropic"] {
        let code = docs::example("api.md", name);
        assert!(code.contains(DOC_ADDR), "{name} uses the doc's address");
        let code = code.replace(DOC_ADDR, &s.addr.to_string());
        let out = output_within(python().args(["-c", &code]), CHILD_DEADLINE, name);
        assert!(out.status.success(), "{}", explain(name, &out, &s));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.trim().lines().count() >= 2, "{name} printed too little: {text}");
    }
}

/// curl's `--write-out` with the status going to stderr, so that the test sees it even when an
/// example pipes curl's output into another command.
const STATUS_OUT: &str = "--write-out '%{stderr}mtplx-test-status=%{http_code}\\n'";

/// The status an example must answer: the one its `# answers NNN ...` comment line names (the
/// doc's error example), else any 2xx.
fn expected_status(block: &str) -> Option<u16> {
    let rest = block.lines().find_map(|l| l.trim().strip_prefix("# answers "))?;
    Some(
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("'# answers' names no status: {block}")),
    )
}

/// Every `bash` block of the doc that runs curl against the server (all but the endless metrics
/// stream) answers the status it should (2xx, or the one its `# answers` line names), succeeds,
/// and prints something (valid JSON when it prints JSON).
#[test]
fn docs_examples_curl_run() {
    let s = start(&[]);
    let blocks: Vec<String> = docs::blocks("api.md", "bash")
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b.contains("curl") && !b.contains("/stream"))
        .collect();
    assert!(blocks.len() >= 5, "docs/api.md has curl examples for the routes");
    for b in blocks {
        assert!(b.contains(DOC_ADDR), "{b}");
        assert_eq!(b.matches("curl ").count(), 1, "one curl command per example: {b}");
        let cmd = b.replace(DOC_ADDR, &s.addr.to_string()).replacen("curl ", &format!("curl {STATUS_OUT} "), 1);
        // pipefail: a curl that fails fails the example even when its output is piped on.
        let out = output_within(Command::new("bash").args(["-o", "pipefail", "-c", &cmd]), CHILD_DEADLINE, &b);
        assert!(out.status.success(), "{}", explain(&b, &out, &s));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let status: u16 = stderr
            .lines()
            .find_map(|l| l.strip_prefix("mtplx-test-status="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("curl reported no status: {}", explain(&b, &out, &s)));
        match expected_status(&b) {
            Some(want) => assert_eq!(status, want, "{}", explain(&b, &out, &s)),
            None => assert!((200..300).contains(&status), "answered {status}: {}", explain(&b, &out, &s)),
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = text.trim_start();
        let ok = if first.starts_with('{') {
            serde_json::from_str::<serde_json::Value>(first).is_ok()
        } else {
            !first.is_empty()
        };
        assert!(ok && !first.is_empty(), "{b}\nprinted:\n{text}");
    }
}

/// The answer `docs/api.md` prints for its first curl example is what the server answers to it
/// (greedy decoding, so the same text every run): its text, `finish_reason`, `usage` and model.
#[test]
fn docs_first_answer_is_what_the_server_answers() {
    let s = start(&[]);
    let cmd = docs::example("api.md", "say-hello").replace(DOC_ADDR, &s.addr.to_string());
    let out = output_within(Command::new("bash").args(["-o", "pipefail", "-c", &cmd]), CHILD_DEADLINE, &cmd);
    assert!(out.status.success(), "{}", explain(&cmd, &out, &s));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the curl example prints JSON");
    let doc: serde_json::Value = serde_json::from_str(&docs::example("api.md", "say-hello-answer")).unwrap();
    for field in ["/model", "/choices/0/message", "/choices/0/finish_reason", "/usage", "/mtplx_stats/status"] {
        assert_eq!(got.pointer(field), doc.pointer(field), "{field}: the server answers\n{got}");
    }
}
