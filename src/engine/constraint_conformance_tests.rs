//! The JSON Schema Test Suite (Debian's `json-schema-test-suite`, installed by tests/setup.sh)
//! as a conformance corpus: every schema is compiled strictly; for each one that compiles, a
//! valid instance is allowed token by token and may end where it ends, and an invalid one is
//! refused somewhere.

use super::tests::demo;
use super::{Grammar, GrammarVocab};
use crate::model::Tokenizer;
use serde_json::Value;
use std::path::PathBuf;

/// Schemas of the suite that compile strictly with the llguidance in Cargo.lock (74 of the 124
/// draft-7 schemas: the rest use keywords it does not implement, such as `not`, `if`,
/// `dependencies`, `contains`, `uniqueItems` and `oneOf`, remote `$ref`s, or are `false`); fewer
/// means a regression.
const MIN_COMPILED: usize = 74;

/// Valid instances the grammar refuses, each for a reason of design: `(file, schema, case)`.
const KNOWN_REFUSALS: &[(&str, &str, &str)] = &[
    // Generated objects list their properties in the schema's order (so that a model writes a
    // "reasoning" property before an "answer" one when asked), so another order is refused.
    ("allOf", "allOf", "allOf"),
    ("allOf", "allOf with base schema", "valid"),
    ("const", "const with object", "same object with different property order is valid"),
    // Draft 7 ignores a $ref's sibling keywords; llguidance follows draft 2020-12 and applies them.
    ("ref", "ref overrides any sibling keywords", "ref valid, maxItems ignored"),
];

/// Where Debian puts the suite's draft-7 cases; `JSON_SCHEMA_TEST_SUITE` names another copy.
const SUITE_DRAFT7: &str = "/usr/share/json-schema-test-suite/tests/draft7";

fn suite_dir() -> PathBuf {
    let dir = std::env::var_os("JSON_SCHEMA_TEST_SUITE").map_or_else(|| PathBuf::from(SUITE_DRAFT7), PathBuf::from);
    assert!(dir.is_dir(), "{} is missing: run tests/setup.sh (Debian package json-schema-test-suite)", dir.display());
    dir
}

/// Whether the grammar takes `text` whole: every token allowed, then an end allowed.
fn takes(vocab: &GrammarVocab, tok: &Tokenizer, schema: &Value, text: &str) -> Result<bool, String> {
    let mut c =
        vocab.compile(&Grammar::JsonSchema { schema: schema.clone(), strict: true }).map_err(|e| e.to_string())?;
    let width = tok.vocab_size();
    let zeros = vec![0.0; width];
    let mut masked = Vec::new();
    for id in tok.encode(text, false).map_err(|e| e.to_string())? {
        if c.is_complete() {
            // The grammar ended the answer before the text did.
            return Ok(false);
        }
        c.mask(&zeros, &mut masked).map_err(|e| e.to_string())?;
        if masked[id as usize] == f32::NEG_INFINITY {
            return Ok(false);
        }
        c.accept(id).map_err(|e| e.to_string())?;
    }
    if c.is_complete() {
        return Ok(true);
    }
    c.mask(&zeros, &mut masked).map_err(|e| e.to_string())?;
    Ok(tok.eos_tokens().iter().any(|&e| masked[e as usize] > f32::NEG_INFINITY))
}

#[test]
fn the_json_schema_test_suite() {
    let (tok, vocab) = demo();
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let (mut schemas, mut compiled, mut valid_ok, mut valid_n, mut invalid_ok, mut invalid_n) = (0, 0, 0, 0, 0, 0);
    let mut wrong = Vec::new();
    for f in &files {
        let groups: Vec<Value> = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        let name = f.file_stem().unwrap().to_string_lossy();
        for g in &groups {
            schemas += 1;
            let schema = &g["schema"];
            if let Err(e) = vocab.compile(&Grammar::JsonSchema { schema: schema.clone(), strict: true }) {
                eprintln!("not compiled: {name} / {}: {e}", g["description"]);
                continue;
            }
            compiled += 1;
            for t in g["tests"].as_array().unwrap() {
                let valid = t["valid"].as_bool().unwrap();
                let text = serde_json::to_string(&t["data"]).unwrap();
                let took = takes(vocab, tok, schema, &text).unwrap();
                if valid {
                    valid_n += 1;
                    valid_ok += took as usize;
                } else {
                    invalid_n += 1;
                    invalid_ok += !took as usize;
                }
                if took != valid {
                    wrong.push(format!(
                        "{name} / {} / {}",
                        g["description"].as_str().unwrap(),
                        t["description"].as_str().unwrap()
                    ));
                }
            }
        }
    }
    eprintln!(
        "{compiled} of {schemas} schemas compile; valid instances taken {valid_ok}/{valid_n}, invalid refused {invalid_ok}/{invalid_n}"
    );
    assert!(compiled >= MIN_COMPILED, "only {compiled} schemas compile, {MIN_COMPILED} did");
    let known: Vec<String> = KNOWN_REFUSALS.iter().map(|(f, g, t)| format!("{f} / {g} / {t}")).collect();
    assert_eq!(wrong, known, "the grammar and the suite disagree elsewhere than on the known cases");
}
