//! The bytes each token stands for, and from them a cheap lower bound on how many tokens a
//! text of a given length encodes to.
//!
//! A token's bytes are what it adds to the text: byte-level BPE spells each byte as a printable
//! character (`Ġ` for a space), SentencePiece spells a space `▁` and a byte it has no piece for
//! `<0xNN>`, and added tokens (`<|im_end|>`) are their own text. A token that ends inside a
//! UTF-8 character gives that character's first bytes, so the bytes of a sequence's tokens,
//! concatenated, are exactly its text (SentencePiece: with the space it puts before the text).

use tokenizers::models::ModelWrapper;
use tokenizers::{Model, Tokenizer as HfTokenizer};

/// How a vocabulary spells bytes, read off the tokenizer's decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spelling {
    /// GPT-2's byte-to-character table (`ByteLevel`).
    ByteLevel,
    /// `▁` for a space, `<0xNN>` for a raw byte (`ByteFallback`, `Metaspace`).
    SentencePiece,
    /// The token text is its bytes.
    Text,
}

/// Unicode normalization and case mapping shrink a character's UTF-8 at most this many times
/// (NFKC: a 4-byte mathematical letter to its 1-byte ASCII letter; NFC and lowercase: the
/// 3-byte Kelvin sign to `K`/`k`; Hangul composition: three 3-byte jamo to one 3-byte syllable).
const UNICODE_NORMALIZER_SHRINK: usize = 4;

/// Longest UTF-8 character: an unknown-token id stands for at most one (when not fused).
const MAX_CHAR_BYTES: usize = 4;

pub(super) struct TokenBytes {
    spelling: Spelling,
    /// Added tokens (special or not) and their text, sorted by id.
    added: Vec<(u32, String)>,
    max_token_bytes: usize,
    max_input_bytes_per_token: Option<usize>,
}

impl TokenBytes {
    /// Reads the spelling off the decoder, and walks the vocabulary once for the longest token.
    pub(super) fn new(inner: &HfTokenizer, vocab_size: usize) -> Self {
        let spelling = spelling_of(inner);
        let mut added: Vec<(u32, String)> =
            inner.get_added_tokens_decoder().into_iter().map(|(id, t)| (id, t.content)).collect();
        added.sort_unstable();
        let mut t = TokenBytes { spelling, added, max_token_bytes: 0, max_input_bytes_per_token: None };
        t.max_token_bytes = (0..vocab_size as u32).map(|id| t.bytes(inner, id).len()).max().unwrap_or(0);
        t.max_input_bytes_per_token = input_bytes_bound(inner, spelling, t.max_token_bytes);
        t
    }

    /// The bytes of `id`; empty for an id the vocabulary does not have.
    pub(super) fn bytes(&self, inner: &HfTokenizer, id: u32) -> Vec<u8> {
        if let Ok(i) = self.added.binary_search_by_key(&id, |(k, _)| *k) {
            return self.added[i].1.as_bytes().to_vec();
        }
        let Some(text) = inner.get_model().id_to_token(id) else {
            return Vec::new();
        };
        match self.spelling {
            Spelling::Text => text.into_bytes(),
            Spelling::ByteLevel => {
                let mut out = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match byte_level_byte(c) {
                        Some(b) => out.push(b),
                        // Not a byte-level character: a vocabulary entry written as plain text.
                        None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                out
            }
            Spelling::SentencePiece => match byte_fallback(&text) {
                Some(b) => vec![b],
                None => text.replace('\u{2581}', " ").into_bytes(),
            },
        }
    }

    pub(super) fn spelling(&self) -> Spelling {
        self.spelling
    }

    pub(super) fn max_token_bytes(&self) -> usize {
        self.max_token_bytes
    }

    pub(super) fn max_input_bytes_per_token(&self) -> Option<usize> {
        self.max_input_bytes_per_token
    }
}

/// The characters GPT-2's table leaves as themselves; the other 68 bytes are spelled U+0100
/// onwards, in byte order.
fn byte_level_printable(b: u8) -> bool {
    matches!(b, 33..=126 | 161..=172 | 174..=255)
}

fn byte_level_byte(c: char) -> Option<u8> {
    let c = c as u32;
    if c < 256 {
        return byte_level_printable(c as u8).then_some(c as u8);
    }
    let n = c.checked_sub(256)? as usize;
    (0..=255u8).filter(|&b| !byte_level_printable(b)).nth(n)
}

/// `<0xNN>`, SentencePiece's byte token, as its byte.
fn byte_fallback(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Every component `type` named in a serialized decoder, normalizer or pre-tokenizer, with its
/// JSON object (a `Sequence` lists its parts).
fn components(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    match v {
        serde_json::Value::Object(map) => {
            for key in ["decoders", "normalizers", "pretokenizers"] {
                if let Some(serde_json::Value::Array(list)) = map.get(key) {
                    list.iter().for_each(|x| components(x, out));
                    return;
                }
            }
            out.push(v.clone());
        }
        serde_json::Value::Null => {}
        other => out.push(other.clone()),
    }
}

fn parts_of<T: serde::Serialize>(x: Option<&T>) -> Option<Vec<serde_json::Value>> {
    let v = serde_json::to_value(x).ok()?;
    let mut out = Vec::new();
    components(&v, &mut out);
    Some(out)
}

fn type_of(v: &serde_json::Value) -> &str {
    v.get("type").and_then(|t| t.as_str()).unwrap_or("")
}

fn spelling_of(inner: &HfTokenizer) -> Spelling {
    let parts = parts_of(inner.get_decoder()).unwrap_or_default();
    let has = |name: &str| parts.iter().any(|p| type_of(p) == name);
    if has("ByteLevel") {
        Spelling::ByteLevel
    } else if has("ByteFallback") || has("Metaspace") {
        Spelling::SentencePiece
    } else {
        Spelling::Text
    }
}

/// The most bytes of input one token can stand for, when that is bounded, which gives a text of
/// `n` bytes at least `n / bound` tokens. Every input byte ends up in some token, and a token
/// stands for the input its bytes came from. That holds when:
/// - the normalizer only adds text, or shrinks each character by a known factor (Unicode
///   normalization, lowercase); a normalizer that can delete text (strip, accent removal,
///   `Replace` by less) has no bound;
/// - the pre-tokenizer drops nothing (not BERT's whitespace splitting, not `Removed` splits);
/// - no added token absorbs the spaces around it (`lstrip`/`rstrip`);
/// - the model is BPE, and an unknown token stands for one character: unknown tokens are never
///   produced when every byte has a token (byte-level, or byte fallback with all 256), and
///   otherwise must not be fused (`fuse_unk` joins any run of unknown characters into one).
fn input_bytes_bound(inner: &HfTokenizer, spelling: Spelling, max_token_bytes: usize) -> Option<usize> {
    let mut shrink = 1;
    for n in parts_of(inner.get_normalizer())? {
        match type_of(&n) {
            "Prepend" => {}
            // SentencePiece's spaces: `▁` is spelled back as one space byte.
            "Replace"
                if spelling == Spelling::SentencePiece
                    && n.pointer("/pattern/String").and_then(|p| p.as_str()) == Some(" ")
                    && n.get("content").and_then(|c| c.as_str()) == Some("\u{2581}") => {}
            "NFC" | "NFD" | "NFKC" | "NFKD" | "Lowercase" => shrink *= UNICODE_NORMALIZER_SHRINK,
            _ => return None,
        }
    }
    for p in parts_of(inner.get_pre_tokenizer())? {
        let keeps = |p: &serde_json::Value| p.get("behavior").and_then(|b| b.as_str()) != Some("Removed");
        match type_of(&p) {
            "ByteLevel" | "Digits" | "Metaspace" => {}
            "Split" | "Punctuation" if keeps(&p) => {}
            _ => return None,
        }
    }
    if inner.get_added_tokens_decoder().values().any(|t| t.lstrip || t.rstrip) {
        return None;
    }
    let ModelWrapper::BPE(bpe) = inner.get_model() else {
        return None;
    };
    let has_all = |spell: &dyn Fn(u8) -> String| (0..=255u8).all(|b| bpe.token_to_id(&spell(b)).is_some());
    let every_byte_has_a_token = match spelling {
        Spelling::ByteLevel => has_all(&|b| byte_level_char(b).to_string()),
        _ => bpe.byte_fallback && has_all(&|b| format!("<0x{b:02X}>")),
    };
    let per_token = if bpe.unk_token.is_none() || every_byte_has_a_token {
        max_token_bytes
    } else if bpe.fuse_unk {
        return None;
    } else {
        max_token_bytes.max(MAX_CHAR_BYTES)
    };
    Some(per_token.max(1) * shrink)
}

/// GPT-2's character for byte `b`.
fn byte_level_char(b: u8) -> char {
    if byte_level_printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !byte_level_printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or('\u{FFFD}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_round_trips_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(byte_level_byte(byte_level_char(b)), Some(b), "byte {b}");
        }
        assert_eq!(byte_level_char(b' '), 'Ġ');
        assert_eq!(byte_level_char(b'\n'), 'Ċ');
        assert_eq!(byte_level_byte('a'), Some(b'a'));
        assert_eq!(byte_level_byte('é'), Some(0xE9));
        assert_eq!(byte_level_byte('你'), None);
    }

    #[test]
    fn byte_fallback_tokens_parse_only_in_their_exact_form() {
        assert_eq!(byte_fallback("<0x0A>"), Some(10));
        assert_eq!(byte_fallback("<0xF0>"), Some(0xF0));
        assert_eq!(byte_fallback("<0xF>"), None);
        assert_eq!(byte_fallback("<0xZZ>"), None);
        assert_eq!(byte_fallback("0x0A"), None);
    }
}
