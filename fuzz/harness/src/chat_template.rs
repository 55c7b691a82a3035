//! Chat templates rendering arbitrary conversations: the ChatML fallback and Llama 3's template
//! render exactly the text their template source spells out (rebuilt here by hand, message by
//! message), and Qwen3's, which drops or rewrites some messages by design, either refuses with a
//! message or keeps every user turn whole and in order.
//!
//! Input: a flags byte (bit 0: add_generation_prompt; bits 1-2: which template), then text
//! split into messages at U+001E; a message with U+001F in it is `role` U+001F `content`,
//! otherwise the role cycles through system, user, assistant.

use std::path::Path;
use std::sync::OnceLock;

use mtplx_lite::model::chat_template::{ChatTemplate, TemplateError, CHATML_TEMPLATE};
use mtplx_lite::model::ChatMessage;

/// Messages rendered at most per input (keeps every execution short).
const MAX_MESSAGES: usize = 32;
const ROLES: [&str; 3] = ["system", "user", "assistant"];

struct Templates {
    chatml: ChatTemplate,
    llama3: ChatTemplate,
    llama3_bos: String,
    qwen3: ChatTemplate,
}

/// A committed model's template and bos text, from its tokenizer_config.json.
fn committed(name: &str) -> (ChatTemplate, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/tokenizers")
        .join(name)
        .join("tokenizer_config.json");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("tokenizer_config.json")).unwrap();
    let text = |key: &str| config[key].as_str().unwrap_or_default().to_owned();
    let bos = text("bos_token");
    let t = ChatTemplate::new(&text("chat_template"), &bos, &text("eos_token")).expect(name);
    (t, bos)
}

fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| {
        let (llama3, llama3_bos) = committed("llama3");
        Templates {
            chatml: ChatTemplate::new(CHATML_TEMPLATE, "", "").expect("ChatML"),
            llama3,
            llama3_bos,
            qwen3: committed("qwen3").0,
        }
    })
}

fn messages(text: &str) -> Vec<ChatMessage> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split('\u{1e}')
        .take(MAX_MESSAGES)
        .enumerate()
        .map(|(i, m)| match m.split_once('\u{1f}') {
            Some((role, content)) => ChatMessage::new(role, content),
            None => ChatMessage::new(ROLES[i % ROLES.len()], m),
        })
        .collect()
}

fn chatml(messages: &[ChatMessage], generation_prompt: bool) -> String {
    let mut out: String =
        messages.iter().map(|m| format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content)).collect();
    if generation_prompt {
        out.push_str("<|im_start|>assistant\n");
    }
    out
}

/// Llama 3's template: bos before the first message, each content trimmed (minijinja's `trim`
/// strips Unicode White_Space), and the assistant header always at the end.
fn llama3(messages: &[ChatMessage], bos: &str) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        if i == 0 {
            out.push_str(bos);
        }
        out.push_str(&format!("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", m.role, m.content.trim()));
    }
    out + "<|start_header_id|>assistant<|end_header_id|>\n\n"
}

fn refused_clearly(e: &TemplateError) {
    assert!(matches!(e, TemplateError::Raised { .. } | TemplateError::Render { .. }), "{e:?}");
    assert!(!e.to_string().is_empty());
}

// Loaded before fuzzing starts, so that the loading time does not count against the first
// input's timeout.
/// Run once before fuzzing starts.
pub fn init() {
    templates();
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let generation_prompt = flags & 1 == 1;
    let text = String::from_utf8_lossy(rest);
    let msgs = messages(&text);
    let t = templates();
    match (flags >> 1) & 3 {
        0 | 3 => {
            let out = t.chatml.render(&msgs, generation_prompt).expect("ChatML renders anything");
            assert_eq!(out, chatml(&msgs, generation_prompt));
        }
        1 => {
            let out = t.llama3.render(&msgs, generation_prompt).expect("llama3 renders anything");
            assert_eq!(out, llama3(&msgs, &t.llama3_bos));
        }
        _ => match t.qwen3.render(&msgs, generation_prompt) {
            Ok(out) => {
                let mut from = 0;
                for m in msgs.iter().filter(|m| m.role == "user") {
                    let turn = format!("<|im_start|>user\n{}<|im_end|>\n", m.content);
                    let at = out[from..]
                        .find(&turn)
                        .unwrap_or_else(|| panic!("user turn {turn:?} missing or out of order in {out:?}"));
                    from += at + turn.len();
                }
                if generation_prompt {
                    assert!(out.ends_with("<|im_start|>assistant\n"), "{out:?}");
                }
            }
            Err(e) => refused_clearly(&e),
        },
    }
}
