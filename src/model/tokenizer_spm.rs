//! SentencePiece BPE vocabularies in GGUF (`tokenizer.ggml.model = llama`: Llama 2, Mistral,
//! TinyLlama). The file stores a score per token but no merges; they are rebuilt the way
//! transformers converts a SentencePiece model (every split of a token into two vocabulary
//! entries, ranked by that token's score), which reproduces llama.cpp's highest-score-first
//! merging. Spaces are spelled `▁`, characters outside the vocabulary fall back to `<0xXX>`
//! byte tokens.

use ahash::AHashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{DecoderWrapper, NormalizerWrapper, Tokenizer as HfTokenizer};

use super::metadata::{MetaValue, Metadata};
use super::tokenizer_error::TokenizerError;
use super::tokenizer_gguf::{TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL};

/// SentencePiece's visible space.
const SPACE: &str = "\u{2581}";

pub(super) fn sentencepiece_bpe(
    meta: &Metadata,
    texts: &[String],
    types: Option<&[i64]>,
) -> Result<HfTokenizer, TokenizerError> {
    const SCORES: &str = "tokenizer.ggml.scores";
    let bad_scores = || TokenizerError::MissingKey { key: SCORES, expected: "an array of floats" };
    let scores = meta.get(SCORES).and_then(MetaValue::as_array).ok_or_else(bad_scores)?;
    if scores.len() != texts.len() {
        return Err(TokenizerError::LengthMismatch { key: SCORES, len: scores.len(), expected: texts.len() });
    }
    let scores: Vec<f64> = scores.iter().map(MetaValue::as_f64).collect::<Option<_>>().ok_or_else(bad_scores)?;

    let mut vocab: AHashMap<String, u32> = AHashMap::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        vocab.insert(t.clone(), i as u32);
    }
    let merges = merges_from_scores(texts, &scores, types, &vocab);
    let unk = meta
        .get_u64("tokenizer.ggml.unknown_token_id")
        .and_then(|id| texts.get(id as usize))
        .cloned()
        .or_else(|| vocab.contains_key("<unk>").then(|| "<unk>".to_owned()));
    let mut builder = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true).fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk);
    }
    let bpe = builder.build().map_err(|e| TokenizerError::Build { detail: e.to_string() })?;

    let build = |e: tokenizers::Error| TokenizerError::Build { detail: e.to_string() };
    let add_space_prefix = match meta.get("tokenizer.ggml.add_space_prefix") {
        Some(MetaValue::Bool(b)) => *b,
        _ => true,
    };
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    let mut decoders: Vec<DecoderWrapper> =
        vec![Replace::new(SPACE, " ").map_err(build)?.into(), ByteFallback::new().into(), Fuse::new().into()];
    if add_space_prefix {
        // A space before the text (and after each special token): words at the start look
        // like words inside it. The decoder drops it again.
        normalizers.push(Prepend::new(SPACE.to_owned()).into());
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    normalizers.push(Replace::new(" ", SPACE).map_err(build)?.into());

    let mut inner = HfTokenizer::new(bpe);
    inner.with_normalizer(Some(NormalizerSequence::new(normalizers)));
    inner.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(inner)
}

/// Every way to write a token as two vocabulary entries is a merge, ranked by the token's score
/// (higher first), ties by token id, then by the ids of the two parts. Byte and control tokens
/// are never merge results.
fn merges_from_scores(
    texts: &[String],
    scores: &[f64],
    types: Option<&[i64]>,
    vocab: &AHashMap<String, u32>,
) -> Vec<(String, String)> {
    let mut found: Vec<(f64, u32, u32, u32, usize)> = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        if matches!(types.map(|ty| ty[i]), Some(TOKEN_TYPE_BYTE | TOKEN_TYPE_CONTROL)) {
            continue;
        }
        for (k, _) in t.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (vocab.get(&t[..k]), vocab.get(&t[k..])) {
                found.push((scores[i], i as u32, l, r, k));
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)).then(a.3.cmp(&b.3)));
    found
        .into_iter()
        .map(|(_, i, _, _, k)| {
            let t = &texts[i as usize];
            (t[..k].to_owned(), t[k..].to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tokenizer::Tokenizer;
    use super::*;

    const VOCAB: &[(&str, f32, i32)] = &[
        ("<unk>", 0.0, 2),
        ("<s>", 0.0, 3),
        ("</s>", 0.0, 3),
        ("<0x0A>", 0.0, 6),
        ("<0xC3>", 0.0, 6),
        ("<0xA9>", 0.0, 6),
        ("▁", -1.0, 1),
        ("h", -1.0, 1),
        ("i", -1.0, 1),
        ("▁h", -2.0, 1),
        ("▁hi", -3.0, 1),
        ("hi", -10.0, 1),
    ];

    fn meta(add_space_prefix: Option<bool>) -> Metadata {
        let arr = |f: &dyn Fn(&(&str, f32, i32)) -> MetaValue| MetaValue::Array(VOCAB.iter().map(f).collect());
        let mut entries = vec![
            ("tokenizer.ggml.model".to_owned(), MetaValue::String("llama".into())),
            ("tokenizer.ggml.tokens".to_owned(), arr(&|t| MetaValue::String(t.0.into()))),
            ("tokenizer.ggml.scores".to_owned(), arr(&|t| MetaValue::F32(t.1))),
            ("tokenizer.ggml.token_type".to_owned(), arr(&|t| MetaValue::I32(t.2))),
            ("tokenizer.ggml.bos_token_id".to_owned(), MetaValue::U32(1)),
            ("tokenizer.ggml.eos_token_id".to_owned(), MetaValue::U32(2)),
            ("tokenizer.ggml.unknown_token_id".to_owned(), MetaValue::U32(0)),
        ];
        if let Some(b) = add_space_prefix {
            entries.push(("tokenizer.ggml.add_space_prefix".to_owned(), MetaValue::Bool(b)));
        }
        Metadata { entries }
    }

    #[test]
    fn merges_follow_scores_and_spaces_become_the_visible_space() {
        let t = Tokenizer::from_gguf_metadata(&meta(None)).unwrap();
        // "▁h" (score -2) merges before "hi" (-10): "▁hi" and not "▁" + "hi".
        assert_eq!(t.encode("hi", false).unwrap(), [10]);
        assert_eq!(t.encode("hi hi", false).unwrap(), [10, 10]);
        assert_eq!(t.decode(&[10, 10]), "hi hi");
        // SentencePiece models prepend bos unless the file says otherwise.
        assert_eq!(t.encode("hi", true).unwrap(), [1, 10]);
        assert_eq!(t.eos_tokens(), [2]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        let t = Tokenizer::from_gguf_metadata(&meta(None)).unwrap();
        assert_eq!(t.encode("hi\né", false).unwrap(), [10, 3, 4, 5]);
        assert_eq!(t.decode(&[10, 3, 4, 5]), "hi\né");
        // A character with no byte tokens either becomes <unk>.
        assert_eq!(t.encode("hiz", false).unwrap(), [10, 0]);
    }

    #[test]
    fn add_space_prefix_false_keeps_the_text_as_is() {
        let t = Tokenizer::from_gguf_metadata(&meta(Some(false))).unwrap();
        assert_eq!(t.encode("hi", false).unwrap(), [11]);
        assert_eq!(t.encode(" hi", false).unwrap(), [10]);
        assert_eq!(t.decode(&[10]), " hi");
    }

    #[test]
    fn missing_or_short_scores_are_refused() {
        let mut m = meta(None);
        m.entries.retain(|(k, _)| k != "tokenizer.ggml.scores");
        let e = Tokenizer::from_gguf_metadata(&m).unwrap_err();
        assert!(matches!(e, TokenizerError::MissingKey { key: "tokenizer.ggml.scores", .. }));
        let mut m = meta(None);
        m.entries.retain(|(k, _)| k != "tokenizer.ggml.scores");
        m.entries.push(("tokenizer.ggml.scores".into(), MetaValue::Array(vec![MetaValue::F32(0.0)])));
        let e = Tokenizer::from_gguf_metadata(&m).unwrap_err();
        assert!(matches!(e, TokenizerError::LengthMismatch { len: 1, .. }), "{e}");
    }
}
