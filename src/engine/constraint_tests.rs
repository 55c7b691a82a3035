use super::*;
use crate::model::test_models::demo_model_path;
use crate::model::{ModelFiles, Tokenizer};
use std::path::Path;
use std::sync::OnceLock;

pub(super) fn demo() -> &'static (Tokenizer, GrammarVocab) {
    static DEMO: OnceLock<(Tokenizer, GrammarVocab)> = OnceLock::new();
    DEMO.get_or_init(|| {
        let files = ModelFiles::open(demo_model_path()).unwrap();
        let tok = Tokenizer::from_model_files(&files).unwrap();
        let vocab = GrammarVocab::new(&tok, files.hparams.vocab).unwrap();
        (tok, vocab)
    })
}

/// Feeds `text`'s tokens one by one: the index of the first the grammar forbids, or `None` when
/// every one is allowed; then whether the grammar is complete.
fn walk(c: &mut Constraint, tok: &Tokenizer, text: &str) -> (Option<usize>, bool) {
    let ids = tok.encode(text, false).unwrap();
    let mut masked = Vec::new();
    let width = demo().0.vocab_size().max(49152);
    for (i, &id) in ids.iter().enumerate() {
        c.mask(&vec![0.0; width], &mut masked).unwrap();
        if masked[id as usize] == f32::NEG_INFINITY {
            return (Some(i), c.is_complete());
        }
        c.accept(id).unwrap();
    }
    (None, c.is_complete())
}

fn schema() -> Grammar {
    Grammar::JsonSchema {
        schema: serde_json::json!({
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}, "ok": {"type": "boolean"}},
            "required": ["city", "n", "ok"],
            "additionalProperties": false
        }),
        strict: true,
    }
}

#[test]
fn a_schema_allows_its_instances_token_by_token_and_ends_with_them() {
    let (tok, vocab) = demo();
    let mut c = vocab.compile(&schema()).unwrap();
    assert_eq!(walk(&mut c, tok, r#"{"city":"Paris","n":2100000,"ok":true}"#), (None, true));
    for bad in [r#"{"city":"Paris","n":"many""#, r#"{"n":1,"city":"x","ok":true}"#, r#"{"city":"Paris","n":1,"ok":1}"#]
    {
        let mut c = vocab.compile(&schema()).unwrap();
        let (refused, complete) = walk(&mut c, tok, bad);
        assert!(refused.is_some() && !complete, "{bad} was allowed");
    }
    // Any JSON object: a finished one completes the grammar, an array never starts.
    let mut c = vocab.compile(&Grammar::JsonObject).unwrap();
    assert_eq!(walk(&mut c, tok, r#"{"a":[1,2,{"b":null}]}"#), (None, true));
    let mut c = vocab.compile(&Grammar::JsonObject).unwrap();
    assert_eq!(walk(&mut c, tok, "[1]").0, Some(0));
}

#[test]
fn drafts_are_cut_at_the_first_forbidden_token_without_moving_the_matcher() {
    let (tok, vocab) = demo();
    let mut c = vocab.compile(&Grammar::JsonObject).unwrap();
    let good = tok.encode(r#"{"a":1"#, false).unwrap();
    let mut draft = good.clone();
    draft.extend(tok.encode("}", false).unwrap());
    draft.extend(tok.encode("]", false).unwrap());
    let k = c.allowed_prefix(&draft);
    assert!(k > good.len() && k < draft.len(), "{k} of {draft:?}");
    // Nothing was consumed: the object can still start from scratch.
    assert_eq!(walk(&mut c, tok, r#"{"b":2}"#), (None, true));
}

#[test]
fn control_tokens_cannot_be_spelled_inside_json() {
    let (tok, vocab) = demo();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let mut c = vocab.compile(&Grammar::JsonObject).unwrap();
    let ids = tok.encode(r#"{"a":""#, false).unwrap();
    for id in ids {
        c.accept(id).unwrap();
    }
    let mut masked = Vec::new();
    c.mask(&vec![0.0; 49152], &mut masked).unwrap();
    assert_eq!(masked[im_end as usize], f32::NEG_INFINITY, "inside a string the end of turn is text, not a token");
}

#[test]
fn bad_grammars_are_refused_with_their_reason_and_bound() {
    let (_, vocab) = demo();
    let compile = |schema: serde_json::Value, strict| vocab.compile(&Grammar::JsonSchema { schema, strict });
    match compile(serde_json::json!({"type": "frobnicate"}), true) {
        Err(ConstraintError::Compile(m)) => assert!(m.contains("frobnicate"), "{m}"),
        other => panic!("{other:?}"),
    }
    let unique = serde_json::json!({"type": "array", "uniqueItems": true});
    assert!(matches!(compile(unique.clone(), true), Err(ConstraintError::Compile(m)) if m.contains("uniqueItems")));
    assert!(compile(unique, false).is_ok(), "without strict an unimplemented keyword is ignored");
    let mut deep = serde_json::json!({"type": "string"});
    for _ in 0..MAX_SCHEMA_DEPTH {
        deep = serde_json::json!({"type": "array", "items": deep});
    }
    assert_eq!(compile(deep, true).err(), Some(ConstraintError::TooDeep { limit: MAX_SCHEMA_DEPTH }));
    let big = serde_json::json!({"type": "string", "description": "x".repeat(MAX_SCHEMA_BYTES)});
    assert!(matches!(compile(big, true), Err(ConstraintError::TooLarge { limit: MAX_SCHEMA_BYTES, .. })));
    let e = vocab.compile(&Grammar::Lark("start: (".into())).unwrap_err();
    assert!(matches!(e, ConstraintError::Compile(_)), "{e:?}");
}

/// SentencePiece's byte-fallback tokens give their byte, `▁` a space, control tokens the marker
/// that keeps text from spelling them, and ids past the tokenizer a placeholder.
#[test]
fn token_bytes_are_what_the_text_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers/llama2");
    let tok =
        Tokenizer::from_json_files(&dir.join("tokenizer.json"), Some(&dir.join("tokenizer_config.json"))).unwrap();
    let width = tok.vocab_size() + 2;
    let bytes = token_bytes(&tok, width);
    let id = |t: &str| tok.token_id(t).unwrap() as usize;
    assert_eq!(bytes[id("<0x0A>")], b"\n");
    assert_eq!(bytes[id("▁the")], b" the");
    assert_eq!(bytes[id("<s>")], [&[0xFF][..], b"<s>"].concat());
    assert_eq!(bytes[width - 1][0], 0xFF);
    assert_eq!(bytes.len(), width);
}
