//! The dashboard page: how its files are served (ETag and 304, the Content-Security-Policy,
//! content types, `--no-metrics`) over real sockets, and the page itself in headless Chromium
//! driven by Selenium (`tests/py/dashboard_browser.py`; `tests/setup.sh` installs both).

mod common;

use common::chats::TempDir;
use common::{get, python, request, Server, Watched};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

/// Longest run of one browser scenario: it starts Chromium, loads the page and waits for a few
/// generations on a machine that may be shared; each of its own waits is bounded too.
const BROWSER_DEADLINE: Duration = Duration::from_secs(420);
/// Captures of the page the screenshot test takes at most, until one shows the first poll.
const DOM_TRIES: usize = 3;
/// What the whole page (every file it loads) may weigh.
const MAX_PAGE_BYTES: usize = 200 * 1024;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/dashboard_browser.py")
}

/// Where the screenshot goes: under the target directory, never committed.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).expect("artifact directory");
    dir
}

/// Runs one scenario of the browser script against `server` and fails with what it printed.
fn browser(scenario: &str, server: &Server) {
    let mut cmd = python();
    cmd.arg(script()).args([scenario, &server.url("")]).arg(artifacts());
    let out = common::output_within(&mut cmd, BROWSER_DEADLINE, &format!("browser scenario '{scenario}'"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        let log = server.log.lock().unwrap();
        let tail = log[log.len().saturating_sub(40)..].join("\n");
        panic!("browser scenario '{scenario}' failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server\n{tail}");
    }
    assert!(stdout.contains(&format!("{scenario}: ok")), "{stdout}");
}

/// The files `text` names: `src="/dashboard/..."`, `href="/dashboard/..."` and `from "./x.js"`.
fn referenced(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, prefix) in [("src=\"", ""), ("href=\"", ""), ("from \"./", "/dashboard/")] {
        for piece in text.split(open).skip(1) {
            let target = piece.split('"').next().unwrap_or_default();
            out.push(format!("{prefix}{target}"));
        }
    }
    out
}

fn content_type_for(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "text/html; charset=utf-8",
    }
}

#[test]
fn page_and_files_come_with_etag_csp_and_their_types() {
    let server = Server::start(&[]);
    let page = get(server.addr, "/");
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = page.header("content-security-policy").expect("a Content-Security-Policy");
    for part in ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
        assert!(csp.contains(part), "CSP lacks {part}: {csp}");
    }
    assert!(!csp.contains("unsafe"), "CSP allows unsafe code: {csp}");
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let etag = page.header("etag").expect("an ETag").to_string();
    for alias in ["/dashboard", "/dashboard/"] {
        let r = get(server.addr, alias);
        assert_eq!(r.status, 200, "{alias}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"), "{alias}");
        assert_eq!(r.body, page.body, "{alias} is the same page");
    }

    // A browser's revalidation: the same ETag gets a 304 and no body; another one the file.
    let again = request(server.addr, "GET", "/", &[("If-None-Match", &etag)], b"");
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_eq!(request(server.addr, "GET", "/", &[("If-None-Match", "\"stale\"")], b"").status, 200);
    assert_eq!(request(server.addr, "HEAD", "/", &[], b"").status, 200);

    // Every file the page and its scripts load is there, with its type, and all of it is small.
    let mut total = page.body.len();
    let mut todo = referenced(&page.text());
    let mut seen = Vec::new();
    while let Some(path) = todo.pop() {
        if seen.contains(&path) {
            continue;
        }
        let r = get(server.addr, &path);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.header("content-type"), Some(content_type_for(&path)), "{path}");
        assert!(r.header("content-security-policy").is_some() && r.header("etag").is_some(), "{path}");
        assert!(!r.text().contains("eval("), "{path} calls eval");
        total += r.body.len();
        todo.extend(referenced(&r.text()));
        seen.push(path);
    }
    assert!(seen.iter().any(|p| p == "/dashboard/app.js") && seen.len() >= 8, "{seen:?}");
    assert!(total <= MAX_PAGE_BYTES, "the page weighs {total} bytes, over {MAX_PAGE_BYTES}");
    // No inline script and no inline handler: the CSP would block them, so the page has none.
    let html = page.text();
    assert!(html.split("<script").skip(1).all(|s| s.split('>').next().unwrap_or("").contains("src=")), "{html}");
    assert!(!html.contains(" onclick=") && !html.contains(" onload="), "{html}");

    let missing = get(server.addr, "/dashboard/nope.js");
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]["message"].as_str().unwrap().contains("nope.js"), "{}", missing.text());
    assert_eq!(get(server.addr, "/favicon.ico").header("content-type"), Some("image/svg+xml"));
}

#[test]
fn no_metrics_withholds_the_dashboard() {
    let server = Server::start(&["--no-metrics"]);
    for path in ["/", "/dashboard", "/dashboard/", "/dashboard/app.js", "/favicon.ico", "/metrics"] {
        let r = get(server.addr, path);
        assert_eq!(r.status, 404, "{path} is served with --no-metrics: {}", r.text());
    }
    assert_eq!(get(server.addr, "/health").status, 200);
}

/// A server for a browser scenario, keeping its chats in `dir`, not in the user's data directory.
fn server_for_browser(dir: &TempDir, env: &[(&str, &str)]) -> Server {
    Server::start_with_env(&["--database", &dir.join("chats.db")], env)
}

#[test]
fn browser_page_loads_clean_and_shows_completions_live() {
    let dir = TempDir::new("dashboard-live");
    let server = server_for_browser(&dir, &[]);
    browser("live", &server);
    let shot = artifacts().join("dashboard-under-load.png");
    let len = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(len > 10_000, "no screenshot at {} ({len} bytes)", shot.display());
}

#[test]
fn browser_chat_streams_through_the_chats_api_and_markup_in_prompts_stays_text() {
    let dir = TempDir::new("dashboard-chat");
    let server = server_for_browser(&dir, &[]);
    browser("chat", &server);
}

#[test]
fn browser_asks_for_the_token_and_the_key_then_works() {
    let dir = TempDir::new("dashboard-token");
    let server =
        server_for_browser(&dir, &[("MTPLX_METRICS_TOKEN", "metrics-secret"), ("MTPLX_API_KEY", "api-secret")]);
    browser("token", &server);
}

#[test]
fn browser_stream_reconnects_after_a_restart_on_the_same_port() {
    let dir = TempDir::new("dashboard-reconnect");
    let server = server_for_browser(&dir, &[]);
    let addr = server.addr;
    let child = python()
        .arg(script())
        .args(["reconnect", &server.url("")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the browser script");
    let mut child = child;
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let watched = Watched::new(child, "browser scenario 'reconnect'");
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(BROWSER_DEADLINE) {
            Ok(l) if l == "RESTART" => break,
            Ok(l) => lines.push(l),
            // The script ended (or hung) before asking: its output says why.
            Err(_) => panic!("the browser script never asked for the restart: {lines:?}\n{:?}", {
                watched.finish_within(Duration::from_secs(1))
            }),
        }
    }
    drop(server);
    let server = Server::start_on(&addr.to_string(), &["--database", &dir.join("chats.db")], &[]);
    assert_eq!(server.addr, addr);
    writeln!(stdin, "restarted").expect("tell the browser script");
    let out = watched.finish_within(BROWSER_DEADLINE);
    let stdout: String = rx.try_iter().collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success() && stdout.contains("reconnect: ok"),
        "browser scenario 'reconnect' failed\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The screenshot command of `docs/dashboard.md`, as printed (the server's address and the
/// file's path swapped in; `--no-sandbox` added when the test runs as root, as the doc says):
/// it writes a PNG, and the page it captures has run its first poll (the same command with
/// `--dump-dom` instead shows the uptime card filled, where without the wait it shows `–`).
#[test]
fn the_documented_screenshot_waits_for_the_first_poll() {
    let s = common::Server::start(&["--model", common::demo_model().to_str().unwrap(), "--threads", "1"]);
    let png = artifacts().join("documented-screenshot.png");
    let _ = std::fs::remove_file(&png);
    let mut cmd = common::docs::example("dashboard.md", "dashboard-screenshot")
        .replace("127.0.0.1:8100", &s.addr.to_string())
        .replace("--screenshot=dashboard.png", &format!("--screenshot={}", png.display()));
    let root = common::output_within(std::process::Command::new("id").arg("-u"), BROWSER_DEADLINE, "id -u");
    if String::from_utf8_lossy(&root.stdout).trim() == "0" {
        cmd = cmd.replacen("chromium ", "chromium --no-sandbox ", 1);
    }
    let run = |cmd: &str| {
        let out = common::output_within(std::process::Command::new("bash").args(["-c", cmd]), BROWSER_DEADLINE, cmd);
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&cmd);
    let bytes = std::fs::read(&png).expect("the command wrote its screenshot");
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{} bytes", bytes.len());
    // Virtual time also runs on while the poll's fetch is under way, so on a loaded machine one
    // capture in a few can still come early; a command that never waits shows `–` every time.
    let dump = cmd.replace(&format!("--screenshot={}", png.display()), "--dump-dom");
    let mut uptimes = Vec::new();
    for _ in 0..DOM_TRIES {
        let dom = run(&dump);
        let uptime = dom.split("id=\"s-uptime\">").nth(1).and_then(|r| r.split('<').next()).expect("the uptime card");
        uptimes.push(uptime.to_string());
        if uptime.contains('s') && uptime != "–" {
            return;
        }
    }
    panic!("every capture came before the first poll: {uptimes:?}");
}
