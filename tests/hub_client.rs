//! `--model hf:owner/repo[:QUANT]` and `pull hf:...`: the real Hub client against a local
//! stand-in for the Hub (`common/fake_hub.rs`), never the network. A file comes through the
//! Hub's redirect, a cut transfer is resumed, a wrong hash is refused and deleted, a gated
//! repository asks for HF_TOKEN, a missing quantization lists the ones there are, and the cache
//! is laid out as `huggingface_hub`'s, so that each finds what the other fetched.

mod common;

use common::fake_hub::{sha256_hex, FakeHub, Repo, COMMIT};
use common::{output_within, post_json, Server, CHILD_DEADLINE};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mtplx-hub-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A real, small GGUF (random weights), made by the binary's own `synth`.
fn tiny_gguf(dir: &Path) -> Vec<u8> {
    let out = dir.join("tiny.gguf");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
    cmd.args(["synth", "--shape", "tiny", "--dtype", "q8_0", "--out"]).arg(&out);
    assert!(output_within(&mut cmd, CHILD_DEADLINE, "synth").status.success());
    std::fs::read(out).unwrap()
}

fn pull(hub: &FakeHub, hf_home: &Path, reference: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
    cmd.args(["pull", reference])
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HOME", hf_home)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    cmd.envs(env.iter().copied());
    output_within(&mut cmd, CHILD_DEADLINE, "pull")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn repo_dir(hf_home: &Path, repo: &str) -> PathBuf {
    hf_home.join("hub").join(format!("models--{}", repo.replace('/', "--")))
}

fn one_repo(name: &str, repo: Repo) -> HashMap<String, Repo> {
    HashMap::from([(name.to_string(), repo)])
}

#[test]
fn a_model_by_hub_reference_comes_through_a_redirect_resumes_a_cut_transfer_and_serves() {
    let dir = tmp("serve");
    let gguf = tiny_gguf(&dir);
    let sha = sha256_hex(&gguf);
    let files = vec![
        ("README.md".to_string(), b"# tiny".to_vec()),
        ("tiny-Q8_0.gguf".to_string(), gguf.clone()),
        ("mmproj-tiny-F16.gguf".to_string(), b"not a model".to_vec()),
    ];
    let hub = FakeHub::start(one_repo("own/tiny", Repo { files, ..Repo::default() }), 1);
    let hf_home = dir.join("hf");
    let env = [("HF_ENDPOINT", hub.endpoint()), ("HF_HOME", hf_home.display().to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Server::start_with_env(&["--model", "hf:own/tiny", "--backend", "cpu", "--threads", "1"], &env);
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("fetching hf:own/tiny/tiny-Q8_0.gguf"), "{log}");
    assert!(log.contains("transfer cut at") && log.contains("resuming"), "{log}");
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "hello", "max_tokens": 3, "temperature": 0})).json();
    assert_eq!(r["usage"]["completion_tokens"], 3, "{r}");
    drop(s);

    // The cut transfer was resumed from where it stopped, not started again.
    let gets: Vec<_> = hub.seen().into_iter().filter(|q| q.method == "GET" && q.path.starts_with("/cdn/")).collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].range, None);
    assert_eq!(gets[1].range.as_deref(), Some(format!("bytes={}-", gguf.len() / 2).as_str()), "{gets:?}");
    // huggingface_hub's layout: the blob by its hash, the snapshot a relative link to it, the
    // ref naming the commit, nothing left incomplete.
    let rd = repo_dir(&hf_home, "own/tiny");
    assert_eq!(std::fs::read(rd.join("blobs").join(&sha)).unwrap(), gguf);
    let link = rd.join("snapshots").join(COMMIT).join("tiny-Q8_0.gguf");
    assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from(format!("../../blobs/{sha}")));
    assert_eq!(std::fs::read_to_string(rd.join("refs/main")).unwrap(), COMMIT);
    assert_eq!(std::fs::read_dir(rd.join("blobs")).unwrap().count(), 1, "no .incomplete left");

    // A second run asks the Hub what main is, and downloads nothing.
    let before = hub.seen().len();
    let o = pull(&hub, &hf_home, "hf:own/tiny:q8_0", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), link.display().to_string());
    assert!(hub.seen()[before..].iter().all(|q| !q.path.starts_with("/cdn/")), "{:?}", &hub.seen()[before..]);
    // Offline, the cache answers alone.
    let o = pull(&hub, &hf_home, "hf:own/tiny", &[("HF_HUB_OFFLINE", "1"), ("HF_ENDPOINT", "http://127.0.0.1:9")]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_wrong_hash_is_refused_and_the_download_deleted() {
    let dir = tmp("hash");
    let files = vec![("m-Q4_K_M.gguf".to_string(), vec![7u8; 100_000])];
    let hub = FakeHub::start(one_repo("own/liar", Repo { files, lie_about_hash: true, ..Repo::default() }), 0);
    let o = pull(&hub, &dir, "hf:own/liar", &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("m-Q4_K_M.gguf: sha256 is") && t.contains("deleted"), "{t}");
    let blobs = repo_dir(&dir, "own/liar").join("blobs");
    assert_eq!(std::fs::read_dir(&blobs).unwrap().count(), 0, "nothing of the bad download is kept");
    assert!(!repo_dir(&dir, "own/liar").join("snapshots").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_refusal_where_the_bytes_are_is_named_by_its_status_and_address() {
    let dir = tmp("cdn");
    let files = vec![("c-Q8_0.gguf".to_string(), vec![1u8; 1000])];
    let hub = FakeHub::start(one_repo("own/c", Repo { files, cdn_gone: true, ..Repo::default() }), 0);
    let o = pull(&hub, &dir, "hf:own/c", &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("/cdn/gone: the Hub answered HTTP 404"), "{t}");
    assert!(!t.contains("no such repository"), "{t}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_gated_repository_asks_for_hf_token_and_the_token_stays_with_the_hub() {
    let dir = tmp("gated");
    let bytes = vec![3u8; 50_000];
    let files = vec![("g-Q4_K_M.gguf".to_string(), bytes.clone())];
    let hub = FakeHub::start(one_repo("own/gated", Repo { files, token: Some("sesame".into()), ..Repo::default() }), 0);
    let o = pull(&hub, &dir, "hf:own/gated", &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("own/gated") && t.contains("401") && t.contains("HF_TOKEN"), "{t}");
    let o = pull(&hub, &dir, "hf:own/gated", &[("HF_TOKEN", "sesame")]);
    assert!(o.status.success(), "{}", text(&o));
    let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(std::fs::read(path).unwrap(), bytes);
    // The CDN is another place: the token is not sent there.
    let seen = hub.seen();
    assert!(seen.iter().any(|q| q.path.starts_with("/cdn/")));
    assert!(seen.iter().filter(|q| q.path.starts_with("/cdn/")).all(|q| q.authorization.is_none()), "{seen:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_quantization_or_repository_is_named_with_what_there_is() {
    let dir = tmp("quant");
    let files = vec![("m-Q8_0.gguf".to_string(), vec![1u8; 10]), ("m-Q5_K_M.gguf".to_string(), vec![2u8; 10])];
    let hub = FakeHub::start(one_repo("own/m", Repo { files, ..Repo::default() }), 0);
    let o = pull(&hub, &dir, "hf:own/m:Q3_K_S", &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("no Q3_K_S file") && t.contains("Q5_K_M, Q8_0"), "{t}");
    let o = pull(&hub, &dir, "hf:own/m", &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("no Q4_K_M file") && t.contains("hf:own/m:Q5_K_M"), "{t}");
    let o = pull(&hub, &dir, "hf:own/nothing", &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("own/nothing: no such repository"), "{t}");
    let o = pull(&hub, &dir, "hf:own", &[]);
    assert!(!o.status.success() && text(&o).contains("expected hf:owner/repo"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_partial_file_left_by_an_interrupted_run_is_resumed_by_the_next() {
    let dir = tmp("partial");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sha = sha256_hex(&bytes);
    let files = vec![("p-Q8_0.gguf".to_string(), bytes.clone())];
    let hub = FakeHub::start(one_repo("own/p", Repo { files, ..Repo::default() }), 0);
    // What a run stopped by Ctrl-C leaves: the blob's first part, under its .incomplete name.
    let blobs = repo_dir(&dir, "own/p").join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join(format!("{sha}.incomplete")), &bytes[..100_000]).unwrap();
    let o = pull(&hub, &dir, "hf:own/p", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let gets: Vec<_> = hub.seen().into_iter().filter(|q| q.path.starts_with("/cdn/")).collect();
    assert_eq!(gets.len(), 1);
    assert_eq!(gets[0].range.as_deref(), Some("bytes=100000-"));
    assert_eq!(std::fs::read(blobs.join(&sha)).unwrap(), bytes);
    // A partial file longer than the file is no prefix of it: fetched anew.
    std::fs::remove_file(blobs.join(&sha)).unwrap();
    std::fs::write(blobs.join(format!("{sha}.incomplete")), vec![0u8; 400_000]).unwrap();
    let o = pull(&hub, &dir, "hf:own/p", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(blobs.join(&sha)).unwrap(), bytes);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `huggingface_hub.hf_hub_download` from the test venv (`tests/setup.sh` installs it):
/// from the hub, or from the cache alone.
fn hf_hub_download(hub: &FakeHub, hf_home: &Path, repo: &str, file: &str, offline: bool) -> Output {
    let script = "import sys, huggingface_hub as h\n\
                  print(h.hf_hub_download(repo_id=sys.argv[1], filename=sys.argv[2], local_files_only=sys.argv[3] == '1'))";
    let mut cmd = common::python();
    cmd.args(["-c", script, repo, file, if offline { "1" } else { "0" }]);
    cmd.env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HOME", hf_home)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env_remove("HF_TOKEN");
    output_within(&mut cmd, CHILD_DEADLINE, "hf_hub_download")
}

#[test]
fn the_cache_is_shared_with_huggingface_hub_both_ways() {
    let dir = tmp("shared");
    let (theirs, ours) = (vec![5u8; 200_000], vec![9u8; 150_000]);
    let files = vec![("a-Q8_0.gguf".to_string(), theirs.clone()), ("b-Q4_0.gguf".to_string(), ours.clone())];
    let hub = FakeHub::start(one_repo("own/s", Repo { files, ..Repo::default() }), 0);
    // huggingface_hub fetches one file; mtplx-lite then finds it without fetching its bytes.
    let o = hf_hub_download(&hub, &dir, "own/s", "a-Q8_0.gguf", false);
    assert!(o.status.success(), "{}", text(&o));
    let their_path = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let cdn_gets = |hub: &FakeHub| hub.seen().iter().filter(|q| q.path.starts_with("/cdn/")).count();
    let before = cdn_gets(&hub);
    let o = pull(&hub, &dir, "hf:own/s:Q8_0", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), their_path);
    assert_eq!(cdn_gets(&hub), before, "the file huggingface_hub fetched was fetched again");
    // mtplx-lite fetches the other; huggingface_hub finds it offline.
    let o = pull(&hub, &dir, "hf:own/s:Q4_0", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let our_path = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let o = hf_hub_download(&hub, &dir, "own/s", "b-Q4_0.gguf", true);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), our_path);
    assert_eq!(std::fs::read(our_path).unwrap(), ours);
    // `models` lists both, whoever fetched them.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
    cmd.arg("models").env("HF_HOME", &dir).env_remove("HF_HUB_CACHE");
    let listed = String::from_utf8_lossy(&output_within(&mut cmd, CHILD_DEADLINE, "models").stdout).to_string();
    assert!(listed.contains("hf:own/s/a-Q8_0.gguf  0 MB") && listed.contains("hf:own/s/b-Q4_0.gguf"), "{listed}");
    assert!(listed.contains("(2 GGUF files"), "{listed}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_split_gguf_is_fetched_part_by_part_and_served_as_one_model() {
    let dir = tmp("split");
    let whole = dir.join("whole.gguf");
    std::fs::write(&whole, tiny_gguf(&dir)).unwrap();
    let file = mtplx_lite::model::GgufFile::open(&whole).unwrap();
    let parts = mtplx_lite::model::gguf_split::split_images(&file, 3);
    let files: Vec<(String, Vec<u8>)> =
        parts.into_iter().enumerate().map(|(i, b)| (format!("q8/tiny-Q8_0-{:05}-of-00003.gguf", i + 1), b)).collect();
    let hub = FakeHub::start(one_repo("own/split", Repo { files, ..Repo::default() }), 0);
    let hf_home = dir.join("hf");
    let env = [("HF_ENDPOINT", hub.endpoint()), ("HF_HOME", hf_home.display().to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Server::start_with_env(&["--model", "hf:own/split:Q8_0", "--backend", "cpu", "--threads", "1"], &env);
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "hello", "max_tokens": 4, "temperature": 0})).json();
    drop(s);
    // The same text as the whole file gives.
    let s = Server::start(&["--model", whole.to_str().unwrap(), "--backend", "cpu", "--threads", "1"]);
    let w = post_json(s.addr, "/v1/completions", &json!({"prompt": "hello", "max_tokens": 4, "temperature": 0})).json();
    assert_eq!(r["choices"][0]["text"], w["choices"][0]["text"], "{r} {w}");
    assert_eq!(r["usage"]["completion_tokens"], 4, "{r}");
    let cdn = hub.seen().iter().filter(|q| q.path.starts_with("/cdn/")).count();
    assert_eq!(cdn, 3, "each part fetched once");
    // A part gone from the cache is named.
    let snap = repo_dir(&hf_home, "own/split").join("snapshots").join(COMMIT).join("q8");
    std::fs::remove_file(snap.join("tiny-Q8_0-00002-of-00003.gguf")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
    cmd.args(["--backend", "cpu", "--model"]).arg(snap.join("tiny-Q8_0-00001-of-00003.gguf")).args([
        "generate",
        "--prompt",
        "hi",
        "--max-tokens",
        "1",
    ]);
    let o = output_within(&mut cmd, CHILD_DEADLINE, "generate");
    assert!(!o.status.success() && text(&o).contains("part 2 of 3"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
