//! What grammars cost (run: `cargo bench --bench grammar_bench`), on three vocabularies: the demo
//! model's (49,152 ids), Qwen 3's (the committed tokenizer.json, 151,669 tokens in logits
//! 151,936 wide) and Gemma 3's (262,144). Per vocabulary: the one-time preparation, the compile time of each
//! schema of the JSON Schema Test Suite's draft 7 that compiles strictly (p50, p99), and the
//! time of one step's mask (computing it and applying it to a logits row, as the decode thread
//! does) while every valid instance of those schemas is walked token by token (p50, p99). Needs
//! the demo and gemma3-270m models in the cache and Debian's json-schema-test-suite
//! (`tests/setup.sh` installs all three).

use mtplx_lite::engine::constraint::{token_bytes, Grammar, GrammarVocab};
use mtplx_lite::model::{catalogue, fetch, ModelFiles, Tokenizer};
use serde_json::Value;
use std::path::Path;
use std::time::Instant;

/// Where Debian puts the suite's draft-7 cases.
const SUITE_DRAFT7: &str = "/usr/share/json-schema-test-suite/tests/draft7";
/// Qwen 3's logits width (its embedding's rows; the tokenizer has 151,669 tokens).
const QWEN_WIDTH: usize = 151_936;

fn tokenizer(name: &str) -> (Tokenizer, usize) {
    let entry = catalogue::find(name).unwrap_or_else(|| panic!("{name} is not in the catalogue"));
    let path = fetch::cached(entry).unwrap_or_else(|e| panic!("{name}: {e} (run tests/setup.sh)"));
    let files = ModelFiles::open(&path).unwrap();
    let tok = Tokenizer::from_model_files(&files).unwrap();
    (tok, files.hparams.vocab)
}

fn corpus() -> Vec<(Value, Vec<String>)> {
    let mut files: Vec<_> = std::fs::read_dir(SUITE_DRAFT7)
        .unwrap_or_else(|e| panic!("{SUITE_DRAFT7}: {e} (run tests/setup.sh)"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let groups: Vec<Value> = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        for g in groups {
            let valid = g["tests"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["valid"] == Value::Bool(true))
                .map(|t| serde_json::to_string(&t["data"]).unwrap())
                .collect();
            out.push((g["schema"].clone(), valid));
        }
    }
    out
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let corpus = corpus();
    let (demo, demo_width) = tokenizer(catalogue::DEMO.name);
    let (gemma, gemma_width) = tokenizer("gemma3-270m");
    let qwen_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers/qwen3");
    let qwen =
        Tokenizer::from_json_files(&qwen_dir.join("tokenizer.json"), Some(&qwen_dir.join("tokenizer_config.json")))
            .unwrap();
    let cases: [(&str, &Tokenizer, usize); 3] = [
        ("demo (49,152)", &demo, demo_width),
        ("qwen3 (151,936)", &qwen, QWEN_WIDTH),
        ("gemma3 (262,144)", &gemma, gemma_width),
    ];
    println!(
        "{:22} {:>9} {:>9} {:>14} {:>14} {:>8} {:>14} {:>14}",
        "vocabulary", "prep ms", "compiled", "compile p50 ms", "compile p99 ms", "masks", "mask p50 µs", "mask p99 µs"
    );
    for (name, tok, width) in cases {
        let bytes = token_bytes(tok, width);
        let t = Instant::now();
        let vocab = GrammarVocab::from_bytes(&bytes, tok.eos_tokens()).unwrap();
        let prep = t.elapsed().as_secs_f64() * 1e3;
        let (mut compile, mut mask) = (Vec::new(), Vec::new());
        let row = vec![0.0f32; width];
        let mut masked = Vec::with_capacity(width);
        for (schema, valid) in &corpus {
            let g = Grammar::JsonSchema { schema: schema.clone(), strict: true };
            let t = Instant::now();
            if vocab.compile(&g).is_err() {
                continue;
            }
            compile.push(t.elapsed().as_secs_f64() * 1e3);
            for text in valid {
                let ids = tok.encode(text, false).unwrap();
                let mut c = vocab.compile(&g).unwrap();
                for id in ids {
                    if c.is_complete() {
                        break;
                    }
                    let t = Instant::now();
                    c.mask(&row, &mut masked).unwrap();
                    mask.push(t.elapsed().as_secs_f64() * 1e6);
                    if masked[id as usize] == f32::NEG_INFINITY {
                        break;
                    }
                    c.accept(id).unwrap();
                }
            }
        }
        println!(
            "{name:22} {prep:9.0} {:>9} {:14.2} {:14.2} {:>8} {:14.0} {:14.0}",
            compile.len(),
            pct(&mut compile, 0.5),
            pct(&mut compile, 0.99),
            mask.len(),
            pct(&mut mask, 0.5),
            pct(&mut mask, 0.99)
        );
    }
}
