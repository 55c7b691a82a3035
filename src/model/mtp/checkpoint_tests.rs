use super::*;
use crate::backend::CpuBackend;
use crate::model::llama::Llama;
use crate::model::mtp::tiny::{self, TinyMtp, Written};
use crate::model::test_models::temp_dir;
use crate::model::{LogitsWanted, Model, SeqBatch};
use std::path::PathBuf;

fn open(naming: Written, tensors: &[tiny::Named], tag: &str) -> Result<(ModelFiles, Llama), ModelError> {
    let dir = temp_dir(tag);
    let files = ModelFiles::open(tiny::write_tensors(naming, &dir, tensors))?;
    let model = Llama::with_backend(&files, Box::new(CpuBackend::new(1)));
    Ok((files, model))
}

/// The head's draft logits (every row) and output rows over a fixed prompt, through the exact
/// (unquantized) head.
fn head_outputs(naming: Written, m: &TinyMtp) -> (Vec<f32>, Vec<f32>) {
    outputs_of(naming, &m.named(naming))
}

fn outputs_of(naming: Written, tensors: &[tiny::Named]) -> (Vec<f32>, Vec<f32>) {
    let (files, model) = open(naming, tensors, "ckpt-same").unwrap();
    assert_eq!(model.info().n_layers, tiny::LAYERS, "{naming:?}: the MTP block is not a trunk block");
    let head = MtpHead::from_checkpoint(&files, &model).unwrap().expect("a head");
    assert_eq!(head.subvocab().len(), tiny::VOCAB, "a checkpoint head drafts over every token");
    let tokens: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % tiny::VOCAB as u32).collect();
    let mut cache = model.new_cache(32);
    let out = model.forward_hidden(&mut [SeqBatch { tokens: &tokens, cache: &mut cache, logits: LogitsWanted::All }]);
    let hidden = out.unwrap().hidden.remove(0);
    let mut head_cache = head.new_cache(32, model.kv_format());
    let n = tokens.len() - 1;
    let step = head.forward(&model, &mut head_cache, &hidden[..n * tiny::HIDDEN], &tokens[1..], LogitsWanted::All);
    let step = step.unwrap();
    (step.logits, step.hidden)
}

#[test]
fn each_naming_is_detected_and_the_trunk_keeps_its_own_blocks() {
    let m = TinyMtp::new(7, false, 1.0);
    let want = [
        (Written::Qwen, CheckpointNaming::Qwen),
        (Written::DeepSeek, CheckpointNaming::DeepSeek { block: tiny::LAYERS }),
        (Written::Gguf, CheckpointNaming::Gguf { block: tiny::LAYERS }),
    ];
    for (written, naming) in want {
        let (files, _) = open(written, &m.named(written), "ckpt-detect").unwrap();
        assert_eq!(CheckpointNaming::detect(&files), Some(naming), "{written:?}");
        assert_eq!(files.hparams.n_layers, tiny::LAYERS, "{written:?}");
        assert_eq!(files.weights.layers.len(), tiny::LAYERS, "{written:?}");
    }
}

/// Bit-equal: the same weights in other names must give the very same arithmetic. Reports the
/// first difference rather than two thousand values.
fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!("{what}: value {i} is {}, expected {}", got[i], want[i]);
    }
}

#[test]
fn the_three_namings_give_the_same_head() {
    // Random everywhere (no part of the head zeroed), so that every tensor, hnorm's and the
    // block's q/k norms too, weighs on the logits and a swapped name would show.
    let m = TinyMtp::new(11, false, 1.0);
    let (qwen_logits, qwen_hidden) = head_outputs(Written::Qwen, &m);
    assert!(qwen_logits.iter().all(|x| x.is_finite()) && qwen_logits.iter().any(|&x| x != 0.0));
    for naming in [Written::DeepSeek, Written::Gguf] {
        let (logits, hidden) = head_outputs(naming, &m);
        assert_same(&format!("{naming:?}: draft logits"), &logits, &qwen_logits);
        assert_same(&format!("{naming:?}: head output rows"), &hidden, &qwen_hidden);
    }
    // And another head's weights give other logits: the comparison can fail.
    let other = TinyMtp::new(12, false, 1.0);
    assert_ne!(head_outputs(Written::Gguf, &other).0, qwen_logits);
    // The block is a qwen3 block: its per-head q and k norms are read and applied.
    for norm in ["mtp.layers.0.self_attn.q_norm.weight", "mtp.layers.0.self_attn.k_norm.weight"] {
        let mut tensors = m.named(Written::Qwen);
        let t = tensors.iter_mut().find(|(n, _, _)| n == norm).unwrap();
        t.2.iter_mut().enumerate().for_each(|(i, x)| *x *= if i % 2 == 0 { 3.0 } else { 0.2 });
        assert_ne!(outputs_of(Written::Qwen, &tensors).0, qwen_logits, "{norm} is not applied");
    }
}

#[test]
fn a_model_without_head_tensors_has_no_head() {
    let m = TinyMtp::new(3, false, 1.0);
    for naming in [Written::Qwen, Written::DeepSeek] {
        let trunk: Vec<_> = m
            .named(naming)
            .into_iter()
            .filter(|(n, _, _)| !n.starts_with("mtp.") && !n.starts_with(&format!("model.layers.{}.", tiny::LAYERS)))
            .collect();
        let (files, model) = open(naming, &trunk, "ckpt-none").unwrap();
        assert!(MtpHead::from_checkpoint(&files, &model).unwrap().is_none(), "{naming:?}");
    }
    // A plain block past the trunk's (no head tensors, no num_nextn_predict_layers in the
    // config: Written::Qwen writes none) is not taken for a head.
    let plain_extra: Vec<_> = m
        .named(Written::DeepSeek)
        .into_iter()
        .filter(|(n, _, _)| !["eh_proj", "enorm", "hnorm", "shared_head"].iter().any(|h| n.contains(h)))
        .collect();
    let (files, model) = open(Written::Qwen, &plain_extra, "ckpt-plain-extra").unwrap();
    assert!(files.tensors.contains(&format!("model.layers.{}.mlp.up_proj.weight", tiny::LAYERS)));
    assert!(MtpHead::from_checkpoint(&files, &model).unwrap().is_none());
}

fn refusal(naming: Written, edit: impl Fn(&mut Vec<tiny::Named>)) -> ModelError {
    let mut tensors = TinyMtp::new(5, false, 1.0).named(naming);
    edit(&mut tensors);
    let (files, model) = open(naming, &tensors, "ckpt-bad").unwrap();
    match MtpHead::from_checkpoint(&files, &model) {
        Err(e) => e,
        Ok(h) => panic!("{naming:?}: accepted a broken head (head: {})", h.is_some()),
    }
}

fn drop_tensor(name: String) -> impl Fn(&mut Vec<tiny::Named>) {
    move |t| t.retain(|(n, _, _)| *n != name)
}

/// Replaces the tensor `name` with one of `shape` (zeros).
fn reshape(name: String, shape: Vec<usize>) -> impl Fn(&mut Vec<tiny::Named>) {
    move |t| {
        let x = t.iter_mut().find(|(n, _, _)| *n == name).expect("the tensor to reshape");
        *x = (name.clone(), shape.clone(), vec![0.0; shape.iter().product()]);
    }
}

#[test]
fn incomplete_or_misshapen_heads_are_refused_naming_the_tensor_and_shape() {
    let (h, n) = (tiny::HIDDEN, tiny::LAYERS);
    let missing = [
        (Written::Qwen, "mtp.layers.0.mlp.down_proj.weight".to_string()),
        (Written::Qwen, "mtp.pre_fc_norm_hidden.weight".to_string()),
        (Written::DeepSeek, format!("model.layers.{n}.shared_head.norm.weight")),
        (Written::DeepSeek, format!("model.layers.{n}.self_attn.k_norm.weight")),
        (Written::Gguf, format!("blk.{n}.nextn.eh_proj.weight")),
        (Written::Gguf, format!("blk.{n}.attn_q.weight")),
    ];
    for (naming, name) in missing {
        let e = refusal(naming, drop_tensor(name.clone()));
        let msg = e.to_string();
        match &e {
            ModelError::BadMtpHead { problem, .. } => {
                assert!(matches!(**problem, ModelError::MissingTensor { ref tensor, .. } if *tensor == name), "{msg}")
            }
            other => panic!("{naming:?} without {name}: {other:?}"),
        }
        assert!(msg.contains(&name) && msg.contains("MTP head") && msg.contains("missing tensor"), "{msg}");
    }
    let misshapen = [
        (Written::Qwen, "mtp.fc.weight".to_string(), vec![h, h], vec![h, 2 * h]),
        (Written::DeepSeek, format!("model.layers.{n}.mlp.up_proj.weight"), vec![tiny::FFN, h + 1], vec![tiny::FFN, h]),
        (Written::Gguf, format!("blk.{n}.nextn.enorm.weight"), vec![h / 2], vec![h]),
    ];
    for (naming, name, bad, want) in misshapen {
        let e = refusal(naming, reshape(name.clone(), bad.clone()));
        let msg = e.to_string();
        match &e {
            ModelError::BadMtpHead { problem, .. } => assert!(
                matches!(**problem, ModelError::WrongShape { ref tensor, ref expected, ref found, .. }
                    if *tensor == name && *expected == want && *found == bad),
                "{msg}"
            ),
            other => panic!("{naming:?} with {name} of {bad:?}: {other:?}"),
        }
        assert!(
            msg.contains(&name) && msg.contains(&format!("{bad:?}")) && msg.contains(&format!("{want:?}")),
            "{msg}"
        );
    }
}

#[test]
fn a_gguf_whose_nextn_count_leaves_no_trunk_is_refused() {
    let tensors = TinyMtp::new(5, false, 1.0).named(Written::Gguf);
    let dir = temp_dir("ckpt-nextn");
    let path: PathBuf = dir.join("model.gguf");
    // Three blocks in all; saying all 3 are MTP blocks leaves the trunk none.
    std::fs::write(&path, tiny::gguf_bytes(&tensors, 3, 3)).unwrap();
    let e = ModelFiles::open(&path).err().expect("refused");
    assert!(e.to_string().contains("nextn_predict_layers"), "{e}");
}
