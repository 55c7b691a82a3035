//! Cutting long texts: the places, and that the pieces give the very ids of the whole text.

use super::super::test_models::demo_model_path;
use super::super::tokenizer::{ChatPrompt, Tokenizer};
use super::*;
use std::path::Path;

#[test]
fn pieces_cut_only_between_words_or_at_line_starts() {
    let bytes = Cutter { drop_space: false };
    let text = "aaaa bbbb\ncccc  dddd.\neeee";
    let pieces: Vec<&str> = bytes.pieces(text, 2).into_iter().map(|r| &text[r]).collect();
    assert_eq!(pieces, ["aaaa", " bbbb\n", "cccc  dddd.\n", "eeee"]);
    assert_eq!(pieces.concat(), text);

    let spm = Cutter { drop_space: true };
    let pieces: Vec<&str> = spm.pieces(text, 2).into_iter().map(|r| &text[r]).collect();
    assert_eq!(pieces, ["aaaa", "bbbb\ncccc  dddd.\neeee"]);

    // No safe place: one piece, however long.
    assert_eq!(bytes.pieces(&" ".repeat(100), 10), std::iter::once(0..100).collect::<Vec<_>>());
    assert_eq!(bytes.pieces("", 10), std::iter::once(0..0).collect::<Vec<_>>());
}

fn hf(name: &str) -> Tokenizer {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers").join(name);
    Tokenizer::from_hf_dir(&dir).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// About 300 KiB of mixed text: prose, code, numbers, CJK, emoji, odd spacing, line ends, and
/// special-token strings, so that a cut lands next to each.
fn long_text(specials: &[String]) -> String {
    let units = [
        "The quick brown fox jumps over the lazy dog 42 times.\n",
        "fn main() {\n    println!(\"{}\", x + 1);\n}\n\n",
        "你好，世界！ 日本語 テキスト 🦀👍🏽 naïve café\n",
        "  leading  and\ttrailing   \r\nwindows line\r\n",
        "numbers 1234567 and 3.14159, DON'T stop; it's fine\n",
    ];
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 300 << 10 {
        text.push_str(units[i % units.len()]);
        if i % 7 == 0 {
            text.push_str(&specials[i % specials.len()]);
            text.push_str(if i % 2 == 0 { "word" } else { "\n" });
        }
        i += 1;
    }
    text
}

#[test]
fn pieces_give_the_ids_of_the_whole_text() {
    let demo = crate::model::GgufFile::open(demo_model_path()).unwrap();
    let demo = Tokenizer::from_gguf_metadata(&demo.metadata).unwrap();
    for (name, t) in [("llama2", hf("llama2")), ("llama3", hf("llama3")), ("qwen3", hf("qwen3")), ("demo", demo)] {
        assert!(t.cutter.is_some(), "{name}: cannot be cut");
        let specials: Vec<String> = t.special_ids.iter().filter_map(|&id| t.token_text(id)).collect();
        let text = long_text(&specials);
        assert!(t.pieces(&text).len() > 3, "{name}: {} pieces", t.pieces(&text).len());
        for add_special in [false, true] {
            let whole = t.inner.encode_fast(text.as_str(), add_special).unwrap().get_ids().to_vec();
            let mut want = whole;
            if add_special && t.add_bos {
                want.insert(0, t.bos.unwrap());
            }
            assert!(t.encode(&text, add_special).unwrap() == want, "{name}: encode differs");
            let mut oracle = t.inner.clone();
            oracle.set_encode_special_tokens(true);
            let mut want = oracle.encode_fast(text.as_str(), add_special).unwrap().get_ids().to_vec();
            if add_special && t.add_bos {
                want.insert(0, t.bos.unwrap());
            }
            assert!(t.encode_plain(&text, add_special).unwrap() == want, "{name}: plain differs");
        }
        // Literal ranges: the pieces against one whole-text pass.
        let literal = t.special_token_spans(&text);
        let whole_spans = super::super::tokenizer_chat::special_spans(&t.inner, |id| t.is_special(id), &text);
        assert_eq!(literal, whole_spans, "{name}");
        let prompt = ChatPrompt { literal: literal.iter().skip(1).step_by(2).cloned().collect(), text };
        let whole = super::super::tokenizer_chat::encode_with_literals(
            &t.inner,
            &t.plain,
            |id| t.is_special(id),
            &prompt.text,
            &prompt.literal,
        )
        .unwrap();
        assert!(t.encode_chat(&prompt, false).unwrap() == whole, "{name}: encode_chat differs");
    }
}

#[test]
fn tokenizers_with_unknown_rules_are_not_cut() {
    let llama3 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers/llama3/tokenizer.json"),
    )
    .unwrap();
    // A split rule we do not know, then a normalizer we do not know.
    let other_rule = llama3.replacen("\\p{N}{1,3}", "\\p{N}{1,4}", 1);
    assert_ne!(other_rule, llama3);
    let t = Tokenizer::from_json_bytes(other_rule.as_bytes(), None).unwrap();
    assert!(t.cutter.is_none());
    let lower = llama3.replacen("\"normalizer\":null", "\"normalizer\":{\"type\":\"Lowercase\"}", 1);
    assert_ne!(lower, llama3);
    assert!(Tokenizer::from_json_bytes(lower.as_bytes(), None).unwrap().cutter.is_none());
}
