//! `--model NAME`: a catalogue model served by its name (Gemma 3 270M, a second architecture),
//! what `/v1/models` and the log say about it, `mtplx-lite models`, and a name that is neither a
//! file nor in the catalogue.

mod common;

use common::{get, post_json, Server};
use serde_json::json;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mtplx-lite"))
}

#[test]
fn gemma3_is_served_by_name_with_its_built_in_chat_template() {
    common::gemma_model(); // cached first (the server would fetch it the same way)
    let s = Server::start(&["--model", "gemma3-270m", "--threads", "2"]);
    let models = get(s.addr, "/v1/models").json();
    let card = &models["data"][0];
    assert_eq!(card["id"], "gemma-3-270m-q4_k_m", "{models}");
    assert_eq!(card["architecture"], "gemma3");
    assert_eq!(card["chat_template"], "built-in gemma");
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("chat template: built-in gemma (the file carries none)"), "{log}");
    let body = json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0});
    let r = post_json(s.addr, "/v1/completions", &body).json();
    let text = r["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains("capital"), "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], 6, "BOS and five words, as llama.cpp counts them: {r}");
    let chat = json!({"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 4});
    let r = post_json(s.addr, "/v1/chat/completions", &chat).json();
    // BOS and `<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n`, which
    // llama.cpp tokenizes to 10 ids (tests/data/reference/gemma3_llama_cpp.json).
    assert_eq!(r["usage"]["prompt_tokens"], 11, "{r}");
    assert!(r["choices"][0]["message"]["content"].is_string(), "{r}");
}

#[test]
fn models_lists_the_catalogue_and_an_unknown_name_is_refused_with_the_names() {
    common::gemma_model();
    let out = bin().arg("models").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("gemma3-270m")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("yes") && line.contains("Gemma Terms of Use"), "{line}");
    assert!(text.lines().any(|l| l.starts_with("smollm2-135m")), "{text}");
    let out = bin().args(["--model", "gemma9-1t", "generate", "--prompt", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--model gemma9-1t") && err.contains("smollm2-135m, gemma3-270m"), "{err}");
}

#[test]
fn the_demo_file_gets_its_mtp_head_by_path_and_by_name() {
    let path = common::demo_model();
    for model in [path.to_str().unwrap(), "smollm2-135m"] {
        // `--draft mtp` needs a head: before, a path to the demo file had none and was refused.
        let s = Server::start(&["--model", model, "--threads", "2", "--draft", "mtp"]);
        let log = s.log.lock().unwrap().join("\n");
        assert!(
            log.contains("MTP head") && log.contains("SmolLM2-135M-Instruct.Q4_1.mtp.safetensors"),
            "{model}: {log}"
        );
    }
}
