//! The MTP head against Forge's torch code on a tiny random trunk and head (f32 throughout;
//! made by tests/golden/make_mtp_golden.py), the trunk-identity check of a sidecar, and rollback
//! of the head's cache.

use mtplx_lite::backend::cpu::Isa;
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::mtp::{MtpHead, MtpTrunk};
use mtplx_lite::model::{sha256, KvCache, LogitsWanted, Model, ModelError, ModelFiles, SeqBatch};
use std::path::PathBuf;

/// Both sides compute in f32 over the same f32 weights, but the server's KV caches hold keys
/// and values as f16 (a relative rounding of up to 2^-11, about 5e-4 of values of order 1,
/// where summation order alone left a few ulps): measured 8.3e-4 on the hidden states and
/// 2.6e-3 on the logits, where the head's queries rotated one position off moved them by 0.58.
/// Where attention multiplies bf16 pairs or tiles (`Isa::attention_in_bf16`: queries, keys,
/// values and weights rounded to 8 significant bits), measured 1.2e-2 on the hidden states and 2.5e-2 on
/// the logits.
fn tol() -> f32 {
    if Isa::detect().attention_in_bf16() {
        5e-2
    } else {
        5e-3
    }
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mtp").join(name)
}

struct Golden {
    tokens: Vec<u32>,
    catch_up: usize,
    subvocab: Vec<u32>,
    trunk_hidden: Vec<f32>,
    depth1_logits: Vec<f32>,
    depth1_hidden: Vec<f32>,
    depth2_logits: Vec<f32>,
    depth3_logits: Vec<f32>,
}

fn golden() -> Golden {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(data("reference.json")).unwrap()).unwrap();
    let f = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<f32>>();
    let u = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    Golden {
        tokens: u("tokens"),
        catch_up: v["catch_up"].as_u64().unwrap() as usize,
        subvocab: u("subvocab"),
        trunk_hidden: f("trunk_hidden"),
        depth1_logits: f("depth1_logits"),
        depth1_hidden: f("depth1_hidden"),
        depth2_logits: f("depth2_logits"),
        depth3_logits: f("depth3_logits"),
    }
}

fn trunk() -> Llama {
    let files = ModelFiles::open(data("trunk.gguf")).unwrap();
    Llama::load(&files, 1).unwrap()
}

fn trunk_sha() -> String {
    sha256::file_hex(&data("trunk.gguf")).unwrap()
}

fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst <= tol, "{what}: max |diff| {worst} > {tol}");
}

/// The trunk's hidden state for every token, through `forward_hidden`.
fn trunk_hidden(t: &Llama, tokens: &[u32]) -> Vec<f32> {
    let mut cache = t.new_cache(64);
    let mut batch = [SeqBatch { tokens, cache: &mut cache, logits: LogitsWanted::Last }];
    let out = t.forward_hidden(&mut batch).unwrap();
    out.hidden.into_iter().next().unwrap()
}

#[test]
fn head_logits_equal_the_torch_heads() {
    let g = golden();
    let t = trunk();
    let h = t.info().hidden;
    let hidden = trunk_hidden(&t, &g.tokens);
    assert_close("trunk hidden", &hidden, &g.trunk_hidden, tol());

    let head = MtpHead::load(&data("head.safetensors"), &trunk_sha(), &t).unwrap();
    assert_eq!(head.subvocab(), &g.subvocab[..]);
    assert_eq!(head.depth_trained(), 3);
    let mut cache = head.new_cache(64, t.kv_format());
    let n = g.catch_up;
    let s1 = head.forward(&t, &mut cache, &hidden[..n * h], &g.tokens[1..n + 1], LogitsWanted::All).unwrap();
    assert_close("depth 1 logits", &s1.logits, &g.depth1_logits, tol());
    assert_close("depth 1 hidden", &s1.hidden, &g.depth1_hidden, tol());
    let s2 =
        head.forward(&t, &mut cache, &s1.hidden[(n - 1) * h..], &g.tokens[n + 1..n + 2], LogitsWanted::Last).unwrap();
    assert_close("depth 2 logits (chained)", &s2.logits, &g.depth2_logits, tol());
    let s3 = head.forward(&t, &mut cache, &s2.hidden, &g.tokens[n + 2..n + 3], LogitsWanted::Last).unwrap();
    assert_close("depth 3 logits (chained)", &s3.logits, &g.depth3_logits, tol());
    assert_eq!(cache.len(), n + 2);
}

#[test]
fn a_sidecar_for_another_trunk_is_refused() {
    let t = trunk();
    let other = "0".repeat(64);
    let err = match MtpHead::load(&data("head.safetensors"), &other, &t) {
        Err(e) => e,
        Ok(_) => panic!("a head for another trunk was accepted"),
    };
    assert!(matches!(err, ModelError::WrongTrunk { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&trunk_sha()) && msg.contains(&other), "the message names both hashes: {msg}");
}

#[test]
fn rollback_gives_the_logits_of_a_fresh_run() {
    let g = golden();
    let t = trunk();
    let h = t.info().hidden;
    let hidden = trunk_hidden(&t, &g.tokens);
    let head = MtpHead::load(&data("head.safetensors"), &trunk_sha(), &t).unwrap();
    let (n, m) = (g.catch_up, g.tokens.len() - 1);

    // Draft three deep, as the engine would, then roll back to the accepted length and feed
    // what the trunk verified.
    let mut cache = head.new_cache(64, t.kv_format());
    let drafts = head.draft_greedy(&t, &mut cache, &hidden[..n * h], &g.tokens[1..n + 1], 3).unwrap();
    assert_eq!(drafts.len(), 3);
    assert!(drafts.iter().all(|(tok, p)| head.subvocab().contains(tok) && *p > 0.0 && *p <= 1.0));
    assert_eq!(cache.len(), n + 2);
    cache.truncate(n);
    let after =
        head.forward(&t, &mut cache, &hidden[n * h..m * h], &g.tokens[n + 1..m + 1], LogitsWanted::All).unwrap();

    let mut fresh: KvCache = head.new_cache(64, t.kv_format());
    let all = head.forward(&t, &mut fresh, &hidden[..m * h], &g.tokens[1..m + 1], LogitsWanted::All).unwrap();
    let s = head.subvocab().len();
    assert_close("rolled back against fresh", &after.logits, &all.logits[n * s..], 1e-5);
    assert_eq!(cache.len(), fresh.len());
}

#[test]
fn scatter_gives_pruned_tokens_no_probability() {
    let t = trunk();
    let head = MtpHead::load(&data("head.safetensors"), &trunk_sha(), &t).unwrap();
    let sub: Vec<f32> = (0..head.subvocab().len()).map(|i| i as f32).collect();
    let mut full = vec![0.0; t.info().vocab_size];
    head.scatter(&sub, &mut full);
    for (id, &l) in full.iter().enumerate() {
        match head.subvocab().iter().position(|&s| s as usize == id) {
            Some(j) => assert_eq!(l, j as f32),
            None => assert_eq!(l, f32::NEG_INFINITY),
        }
    }
}
