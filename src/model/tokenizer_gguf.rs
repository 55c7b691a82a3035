//! Builds a [`Tokenizer`] from a GGUF file's `tokenizer.ggml.*` metadata, the way llama.cpp
//! reads it (llama-vocab.cpp): vocabulary, merges, token types, special-token ids, and the
//! pre-tokenizer that `tokenizer.ggml.pre` names, mapped to the split rules of the model's
//! original tokenizer.json.

use ahash::AHashMap;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer as HfTokenizer};

use super::metadata::Metadata;
use super::tokenizer::Tokenizer;
use super::tokenizer_error::TokenizerError;

/// Most tokens a vocabulary may hold; the largest real ones have about 260k.
pub const MAX_VOCAB: usize = 4 << 20;

/// GGUF token types (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_UNKNOWN: i64 = 2;
pub(super) const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;
pub(super) const TOKEN_TYPE_BYTE: i64 = 6;

/// GPT-2's split rule (also the one `ByteLevel(use_regex = true)` applies).
const RE_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's rule: numbers in groups of up to three, a letter run may take one leading symbol.
const RE_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2/3's rule: as Llama 3's, but every digit alone.
const RE_QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// StarCoder / SmolLM: every digit alone first (HF's `Digits(individual_digits)`), then GPT-2.
const RE_DIGIT: &str = r"\p{N}";
/// llama.cpp's fallback rules, around GPT-2's: punctuation runs, digit runs, three digits.
const RE_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|]+";
const RE_DIGITS: &str = r"\p{N}+";
const RE_THREE_DIGITS: &str = r"[0-9][0-9][0-9]";

/// Every split rule above. None matches across a space between two ASCII letters or digits,
/// or across the end of a line, so a text cut there splits into the same pieces either side
/// (`tokenizer_chunks.rs` relies on this; a tokenizer.json with other rules is not cut).
pub(super) const LOCAL_SPLIT_RULES: &[&str] =
    &[RE_GPT2, RE_LLAMA3, RE_QWEN2, RE_DIGIT, RE_PUNCT, RE_DIGITS, RE_THREE_DIGITS];

/// How one `tokenizer.ggml.pre` value pre-tokenizes.
struct PreRules {
    /// Applied in order, each splitting the pieces the previous one left (matches and the
    /// text between them are both kept, as HF's `Split(behavior = Isolated)`).
    regexes: &'static [&'static str],
    /// A piece that is itself a vocabulary entry is taken whole, without merging.
    ignore_merges: bool,
    /// Whether bos is prepended when the file does not say (`tokenizer.ggml.add_bos_token`).
    add_bos_default: bool,
}

/// `tokenizer.ggml.pre` values and their rules, as llama.cpp maps them.
const PRE_TOKENIZERS: &[(&[&str], PreRules)] = &[
    (
        &["llama3", "llama-v3", "llama-bpe", "falcon3"],
        PreRules { regexes: &[RE_LLAMA3], ignore_merges: true, add_bos_default: true },
    ),
    (
        &["dbrx", "smaug-bpe", "chatglm-bpe", "glm4"],
        PreRules { regexes: &[RE_LLAMA3], ignore_merges: false, add_bos_default: false },
    ),
    (
        &["qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"],
        PreRules { regexes: &[RE_QWEN2], ignore_merges: false, add_bos_default: false },
    ),
    (
        &["smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"],
        PreRules { regexes: &[RE_DIGIT, RE_GPT2], ignore_merges: false, add_bos_default: false },
    ),
    (
        &["gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "roberta-bpe", "exaone4"],
        PreRules { regexes: &[RE_GPT2], ignore_merges: false, add_bos_default: false },
    ),
    (
        // llama.cpp's fallback when a file names no pre-tokenizer.
        &["default"],
        PreRules {
            regexes: &[RE_PUNCT, RE_GPT2, RE_DIGITS, RE_THREE_DIGITS],
            ignore_merges: false,
            add_bos_default: false,
        },
    ),
];

/// Every `tokenizer.ggml.pre` value we understand, for error messages.
pub const KNOWN_PRE_TOKENIZERS: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "dbrx",
    "smaug-bpe",
    "chatglm-bpe",
    "glm4",
    "qwen2",
    "qwen2.5",
    "qwen-2.5",
    "deepseek-r1-qwen",
    "megrez",
    "stablelm2",
    "hunyuan",
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
    "gpt-2",
    "gpt2",
    "phi-2",
    "mpt",
    "olmo",
    "jais",
    "roberta-bpe",
    "exaone4",
    "default",
];

fn pre_rules(name: &str) -> Option<&'static PreRules> {
    PRE_TOKENIZERS.iter().find(|(names, _)| names.contains(&name)).map(|(_, rules)| rules)
}

pub(super) fn build(meta: &Metadata) -> Result<Tokenizer, TokenizerError> {
    let model = meta
        .get_str("tokenizer.ggml.model")
        .ok_or(TokenizerError::MissingKey { key: "tokenizer.ggml.model", expected: "a string" })?;
    let tokens = meta
        .get_strings("tokenizer.ggml.tokens")
        .ok_or(TokenizerError::MissingKey { key: "tokenizer.ggml.tokens", expected: "an array of strings" })?;
    let n = tokens.len();
    if n == 0 || n > MAX_VOCAB {
        return Err(TokenizerError::BadVocabSize { len: n, max: MAX_VOCAB });
    }
    let types = token_types(meta, n)?;
    // As llama.cpp: an empty entry gets a placeholder name; a repeated one maps to its last id.
    let texts: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| if t.is_empty() { format!("[EMPTY_{i}]") } else { (*t).to_owned() })
        .collect();

    let (mut inner, add_bos_default) = match model {
        "gpt2" => byte_level_bpe(meta, &texts)?,
        "llama" => (super::tokenizer_spm::sentencepiece_bpe(meta, &texts, types.as_deref())?, true),
        _ => return Err(TokenizerError::UnsupportedModel { model: model.to_owned() }),
    };

    // Control, unknown and user-defined tokens are matched whole in the text, before any
    // splitting, as llama.cpp does when it parses special tokens.
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        match types.as_ref().map(|ty| ty[i]) {
            Some(TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN) => special.push(AddedToken::from(t.clone(), true)),
            Some(TOKEN_TYPE_USER_DEFINED) => user.push(AddedToken::from(t.clone(), false).normalized(false)),
            _ => {}
        }
    }
    inner.add_special_tokens(&special);
    inner.add_tokens(&user);

    let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
        match meta.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(id) if (id as usize) < n => Ok(Some(id as u32)),
                Some(id) => Err(TokenizerError::BadTokenId { key, id, vocab_size: n }),
                None => Err(TokenizerError::MissingKey { key, expected: "an unsigned integer" }),
            },
        }
    };
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos = id("tokenizer.ggml.eos_token_id")?;
    let eot = id("tokenizer.ggml.eot_token_id")?;
    let eom = id("tokenizer.ggml.eom_token_id")?;
    let flag = |key: &str, default: bool| match meta.get(key) {
        Some(super::metadata::MetaValue::Bool(b)) => *b,
        _ => default,
    };
    let add_bos = flag("tokenizer.ggml.add_bos_token", add_bos_default) && bos.is_some();
    let add_eos = flag("tokenizer.ggml.add_eos_token", false) && eos.is_some();

    let template = meta.get_str("tokenizer.chat_template").map(str::to_owned);
    let mut tok = Tokenizer::assemble(inner, bos, eos, template);
    tok.add_bos = add_bos;
    tok.add_eos = add_eos;
    for extra in [eot, eom].into_iter().flatten() {
        if !tok.eos_tokens.contains(&extra) {
            tok.eos_tokens.push(extra);
        }
    }
    Ok(tok)
}

/// Byte-level BPE (`tokenizer.ggml.model = gpt2`): merges from the file, the split rules that
/// `tokenizer.ggml.pre` names. Returns the tokenizer and whether bos is added by default.
fn byte_level_bpe(meta: &Metadata, texts: &[String]) -> Result<(HfTokenizer, bool), TokenizerError> {
    let pre_name = meta.get_str("tokenizer.ggml.pre").unwrap_or("default");
    let rules = pre_rules(pre_name).ok_or_else(|| TokenizerError::UnknownPreTokenizer {
        name: pre_name.to_owned(),
        known: KNOWN_PRE_TOKENIZERS,
    })?;
    let merges = meta
        .get_strings("tokenizer.ggml.merges")
        .ok_or(TokenizerError::MissingKey { key: "tokenizer.ggml.merges", expected: "an array of strings" })?;
    let mut vocab: AHashMap<String, u32> = AHashMap::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        vocab.insert(t.clone(), i as u32);
    }
    let mut pairs = Vec::with_capacity(merges.len());
    for (index, m) in merges.iter().enumerate() {
        // The separator is the first space after the first character: a token may itself be
        // a space in vocabularies that do not spell it `Ġ`.
        let split = m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(i, _)| i);
        match split {
            Some(i) => pairs.push((m[..i].to_owned(), m[i + 1..].to_owned())),
            None => return Err(TokenizerError::BadMerge { index, merge: (*m).to_owned() }),
        }
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(rules.ignore_merges)
        .build()
        .map_err(|e| TokenizerError::Build { detail: e.to_string() })?;
    let mut inner = HfTokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(pre_tokenizer(rules)?));
    inner.with_decoder(Some(ByteLevel::new(false, false, false)));
    Ok((inner, rules.add_bos_default))
}

/// The split rules in order, then the byte-to-printable mapping of byte-level BPE.
fn pre_tokenizer(rules: &PreRules) -> Result<Sequence, TokenizerError> {
    let mut pre: Vec<PreTokenizerWrapper> = Vec::with_capacity(rules.regexes.len() + 1);
    for re in rules.regexes {
        let pattern = SplitPattern::Regex((*re).to_owned());
        let split = Split::new(pattern, SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| TokenizerError::Build { detail: format!("split rule {re:?}: {e}") })?;
        pre.push(split.into());
    }
    pre.push(ByteLevel::new(false, false, false).into());
    Ok(Sequence::new(pre))
}

/// `tokenizer.ggml.token_type`, if present, as one integer per token.
fn token_types(meta: &Metadata, n: usize) -> Result<Option<Vec<i64>>, TokenizerError> {
    const KEY: &str = "tokenizer.ggml.token_type";
    let Some(v) = meta.get(KEY) else {
        return Ok(None);
    };
    let bad = || TokenizerError::MissingKey { key: KEY, expected: "an array of integers" };
    let arr = v.as_array().ok_or_else(bad)?;
    if arr.len() != n {
        return Err(TokenizerError::LengthMismatch { key: KEY, len: arr.len(), expected: n });
    }
    arr.iter().map(|t| t.as_i64()).collect::<Option<Vec<_>>>().map(Some).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MetaValue;

    const VOCAB: &[&str] = &[
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "h",
        "e",
        "l",
        "o",
        "Ġ",
        "w",
        "r",
        "d",
        "1",
        "2",
        "he",
        "ll",
        "hell",
        "hello",
        "Ġw",
        "or",
        "Ġwor",
        "12",
        "Ċ",
        "Ġworld",
    ];
    const MERGES: &[&str] = &["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "1 2"];

    fn strings(v: &[&str]) -> MetaValue {
        MetaValue::Array(v.iter().map(|s| MetaValue::String((*s).into())).collect())
    }

    fn meta(pre: &str) -> Metadata {
        let types = (0..VOCAB.len()).map(|i| MetaValue::I32(if i < 3 { 3 } else { 1 })).collect();
        let e = |k: &str, v: MetaValue| (k.to_owned(), v);
        Metadata {
            entries: vec![
                e("tokenizer.ggml.model", MetaValue::String("gpt2".into())),
                e("tokenizer.ggml.pre", MetaValue::String(pre.into())),
                e("tokenizer.ggml.tokens", strings(VOCAB)),
                e("tokenizer.ggml.token_type", MetaValue::Array(types)),
                e("tokenizer.ggml.merges", strings(MERGES)),
                e("tokenizer.ggml.bos_token_id", MetaValue::U32(1)),
                e("tokenizer.ggml.eos_token_id", MetaValue::U32(2)),
                e("tokenizer.ggml.add_bos_token", MetaValue::Bool(false)),
                e("tokenizer.chat_template", MetaValue::String("{{ messages }}".into())),
            ],
        }
    }

    fn set(m: &mut Metadata, key: &str, v: MetaValue) {
        m.entries.retain(|(k, _)| k != key);
        m.entries.push((key.to_owned(), v));
    }

    fn build_err(m: &Metadata) -> TokenizerError {
        build(m).expect_err("metadata should be refused")
    }

    #[test]
    fn merges_apply_by_rank_and_decode_is_lossless() {
        let t = build(&meta("smollm")).unwrap();
        let ids = t.encode("hello world", false).unwrap();
        assert_eq!(ids, [16, 19, 5, 10]);
        assert_eq!(t.decode(&ids), "hello world");
        assert_eq!(t.token_text(19).as_deref(), Some("Ġwor"));
        assert_eq!(t.token_id("hello"), Some(16));
        assert_eq!(t.vocab_size(), VOCAB.len());
        assert_eq!(t.chat_template(), Some("{{ messages }}"));
    }

    #[test]
    fn smollm_splits_digits_but_gpt2_keeps_runs() {
        assert_eq!(build(&meta("smollm")).unwrap().encode("12", false).unwrap(), [11, 12]);
        assert_eq!(build(&meta("gpt-2")).unwrap().encode("12", false).unwrap(), [20]);
    }

    #[test]
    fn llama3_takes_whole_vocabulary_words_without_merging() {
        assert_eq!(build(&meta("llama-bpe")).unwrap().encode(" world", false).unwrap(), [22]);
        assert_eq!(build(&meta("gpt-2")).unwrap().encode(" world", false).unwrap(), [19, 5, 10]);
    }

    #[test]
    fn control_tokens_match_whole_and_end_generation() {
        let t = build(&meta("smollm")).unwrap();
        let ids = t.encode("<|im_start|>hello\n<|im_end|>", false).unwrap();
        assert_eq!(ids, [1, 16, 21, 2]);
        assert_eq!(t.decode(&ids), "<|im_start|>hello\n<|im_end|>");
        assert_eq!(t.decode_skip_special(&ids), "hello\n");
        assert!(t.is_special(1) && !t.is_special(16));
        assert_eq!(t.bos(), Some(1));
        assert_eq!(t.bos_text().as_deref(), Some("<|im_start|>"));
        assert_eq!(t.eos_text().as_deref(), Some("<|im_end|>"));
        // eos first, then <|endoftext|>, a control token that ends turns too.
        assert_eq!(t.eos_tokens(), [2, 0]);
    }

    #[test]
    fn add_bos_token_prepends_bos_only_with_add_special() {
        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.add_bos_token", MetaValue::Bool(true));
        let t = build(&m).unwrap();
        assert!(t.adds_bos());
        assert_eq!(t.encode("hello", true).unwrap(), [1, 16]);
        assert_eq!(t.encode("hello", false).unwrap(), [16]);
    }

    #[test]
    fn eot_id_from_metadata_joins_eos_tokens() {
        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.eot_token_id", MetaValue::U32(16));
        assert_eq!(build(&m).unwrap().eos_tokens(), [2, 0, 16]);
    }

    #[test]
    fn bad_metadata_is_refused_with_a_clear_error() {
        let e = build_err(&meta("no-such-pre"));
        assert!(matches!(e, TokenizerError::UnknownPreTokenizer { .. }));
        assert!(e.to_string().contains("'no-such-pre'"), "{e}");

        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.model", MetaValue::String("bert".into()));
        assert!(matches!(build_err(&m), TokenizerError::UnsupportedModel { .. }));

        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.merges", strings(&["h e", "nospace"]));
        assert!(matches!(build_err(&m), TokenizerError::BadMerge { index: 1, .. }));

        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.merges", strings(&["x y"]));
        assert!(matches!(build_err(&m), TokenizerError::Build { .. }));

        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.bos_token_id", MetaValue::U32(999));
        let e = build_err(&m);
        assert!(matches!(e, TokenizerError::BadTokenId { id: 999, .. }), "{e}");

        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.token_type", MetaValue::Array(vec![MetaValue::I32(1)]));
        assert!(matches!(build_err(&m), TokenizerError::LengthMismatch { len: 1, .. }));

        let mut m = meta("smollm");
        set(&mut m, "tokenizer.ggml.tokens", MetaValue::Array(vec![]));
        assert!(matches!(build_err(&m), TokenizerError::BadVocabSize { len: 0, .. }));

        let mut m = meta("smollm");
        m.entries.retain(|(k, _)| k != "tokenizer.ggml.merges");
        assert!(matches!(build_err(&m), TokenizerError::MissingKey { .. }));
    }

    #[test]
    fn every_known_pre_tokenizer_builds() {
        for name in KNOWN_PRE_TOKENIZERS {
            let t = build(&meta(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(t.decode(&t.encode("hello world 12\n", false).unwrap()), "hello world 12\n");
        }
        for (names, _) in PRE_TOKENIZERS {
            for n in *names {
                assert!(KNOWN_PRE_TOKENIZERS.contains(n), "{n} missing from the known list");
            }
        }
    }

    fn pieces(pre: &impl tokenizers::PreTokenizer, text: &str) -> Vec<String> {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString};
        let mut s = PreTokenizedString::from(text);
        pre.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(piece, _, _)| piece.to_owned())
            .collect()
    }

    /// Our split rules for `smollm` and `gpt-2` give the pieces of the pre-tokenizers those
    /// models' own tokenizer.json files name, as the tokenizers crate implements them.
    #[test]
    fn split_rules_match_the_original_pre_tokenizers() {
        use tokenizers::pre_tokenizers::digits::Digits;
        let starcoder = Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]);
        let gpt2 = ByteLevel::new(false, true, true);
        let texts = [
            "Hello, world! 123 and 4.56",
            "∑ x² ≤ ∞; ½ ¼ Ⅻ ٣ 12٣",
            "I'm sure they'll say it's fine   \n\n\t x",
            "  leading and trailing  ",
            "你好，世界！ 🦀👍🏽 naïve",
            "a\r\n\r\nb   c\u{a0}d",
            "DON'T 'S 'll",
        ];
        let ours_smollm = pre_tokenizer(pre_rules("smollm").unwrap()).unwrap();
        let ours_gpt2 = pre_tokenizer(pre_rules("gpt-2").unwrap()).unwrap();
        for t in texts {
            assert_eq!(pieces(&ours_smollm, t), pieces(&starcoder, t), "smollm: {t:?}");
            assert_eq!(pieces(&ours_gpt2, t), pieces(&gpt2, t), "gpt-2: {t:?}");
        }
    }

    #[test]
    fn a_byte_without_a_token_is_left_out() {
        // The tokenizer fuzz target found that the demo model's vocabulary has no token for 21
        // of the 256 bytes (U+0016 among them). llama.cpp's BPE session and the `tokenizers`
        // crate (what transformers runs) leave such bytes out of the ids, and so do we; this
        // vocabulary has no token for U+0016 either.
        let t = build(&meta("smollm")).unwrap();
        let ids = t.encode("hello\u{16}", false).unwrap();
        assert_eq!(ids, t.encode("hello", false).unwrap());
        assert_eq!(t.decode(&ids), "hello");
    }

    #[test]
    fn oversized_text_is_refused() {
        let t = build(&meta("smollm")).unwrap();
        let long = "h".repeat(crate::model::tokenizer::MAX_ENCODE_BYTES + 1);
        assert!(matches!(t.encode(&long, false), Err(TokenizerError::TextTooLong { .. })));
    }
}
