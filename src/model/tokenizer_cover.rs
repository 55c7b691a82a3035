//! A lower bound on a text's token count from the vocabulary alone, cheap in memory: the fewest
//! vocabulary entries whose bytes, end to end, spell the text.
//!
//! Whatever byte-level BPE makes of a text, its tokens spell it end to end (with no normalizer,
//! the text's own bytes; a byte with no token of its own is dropped), so the tokenizer can never
//! use fewer tokens than this cover. The byte bound (`tokenizer_bytes.rs`: the longest token's
//! length) is the same idea at its crudest; it lets through texts made of short tokens only,
//! such as a run of digits, which the `tokenizers` crate then encodes at some 300 bytes of
//! transient memory per input byte (a token per digit, no place to cut the text). The cover
//! refuses those before they are encoded, in time linear in the text and memory of one window.

use ahash::AHashMap;
use tokenizers::Tokenizer as HfTokenizer;

use super::tokenizer_bytes::{Spelling, TokenBytes};

/// The vocabulary's token bytes as a trie.
pub(super) struct Cover {
    /// (node, next byte) -> node; the root is node 0.
    children: AHashMap<(u32, u8), u32>,
    /// Whether the bytes from the root to a node are a token's.
    is_token: Vec<bool>,
    max_len: usize,
}

impl Cover {
    /// `None` unless the tokenizer spells tokens as raw bytes and has no normalizer, so that
    /// tokens spell the input's own bytes.
    pub(super) fn for_tokenizer(inner: &HfTokenizer, bytes: &TokenBytes, vocab_size: usize) -> Option<Cover> {
        if bytes.spelling() != Spelling::ByteLevel || inner.get_normalizer().is_some() {
            return None;
        }
        let mut cover = Cover { children: AHashMap::new(), is_token: vec![false], max_len: 0 };
        for id in 0..vocab_size as u32 {
            cover.insert(&bytes.bytes(inner, id));
        }
        Some(cover)
    }

    fn insert(&mut self, token: &[u8]) {
        if token.is_empty() {
            return;
        }
        let mut node = 0;
        for &b in token {
            let fresh = self.is_token.len() as u32;
            node = *self.children.entry((node, b)).or_insert(fresh);
            if node == fresh {
                self.is_token.push(false);
            }
        }
        self.is_token[node as usize] = true;
        self.max_len = self.max_len.max(token.len());
    }

    /// The longest token, in bytes.
    pub(super) fn max_len(&self) -> usize {
        self.max_len
    }

    /// The fewest tokens that spell `text` end to end.
    pub(super) fn min_tokens(&self, text: &[u8]) -> usize {
        // fewest[i % window] = fewest tokens spelling text[..i]; a token reaches at most
        // `max_len` bytes ahead, so one window of positions is all that is live at once.
        let window = self.max_len + 1;
        let mut fewest = vec![u32::MAX; window];
        fewest[0] = 0;
        for i in 0..text.len() {
            let here = std::mem::replace(&mut fewest[i % window], u32::MAX);
            let mut relax = |end: usize, cost: u32| {
                let slot = &mut fewest[end % window];
                *slot = (*slot).min(cost);
            };
            let mut node = 0;
            let mut single_byte_token = false;
            for (k, &b) in text[i..].iter().take(self.max_len).enumerate() {
                let Some(&next) = self.children.get(&(node, b)) else {
                    break;
                };
                node = next;
                if self.is_token[node as usize] {
                    relax(i + k + 1, here + 1);
                    single_byte_token |= k == 0;
                }
            }
            // A byte the vocabulary has no token for is dropped by the tokenizer: it costs none.
            if !single_byte_token {
                relax(i + 1, here);
            }
        }
        fewest[text.len() % window] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cover(tokens: &[&str]) -> Cover {
        let mut c = Cover { children: AHashMap::new(), is_token: vec![false], max_len: 0 };
        for t in tokens {
            c.insert(t.as_bytes());
        }
        c
    }

    #[test]
    fn the_fewest_tokens_that_spell_the_text() {
        let c = cover(&["a", "b", "ab", "abc", "cd", "c", "d"]);
        assert_eq!(c.min_tokens(b""), 0);
        assert_eq!(c.min_tokens(b"abcd"), 2, "ab + cd, not abc + d: both are two");
        assert_eq!(c.min_tokens(b"abcabc"), 2);
        assert_eq!(c.min_tokens(b"abcdabcd"), 4);
        assert_eq!(c.min_tokens(b"dddd"), 4);
        // No token for `x`: the tokenizer drops it.
        assert_eq!(c.min_tokens(b"axb"), 2);
    }

    #[test]
    fn a_long_text_is_walked_in_one_window() {
        let c = cover(&["1", "2", "12", "123"]);
        let text = "123".repeat(100_000);
        assert_eq!(c.min_tokens(text.as_bytes()), 100_000);
        assert_eq!(c.min_tokens(format!("{text}2").as_bytes()), 100_001);
    }

    /// On a real byte-level vocabulary (Llama 3's, committed), the bound never exceeds what the
    /// tokenizer makes, and on digits it is tight: Llama 3 reads them three at a time.
    #[test]
    fn never_more_than_the_real_tokenizer_makes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers/llama3");
        let t = crate::model::Tokenizer::from_hf_dir(&dir).unwrap();
        let digits: String = (0..30_000u32).map(|i| char::from(b'0' + (i * 7 % 10) as u8)).collect();
        let texts = [
            "The quick brown fox jumps over the lazy dog. ".repeat(200),
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n".repeat(100),
            "東京タワー 🚀🎉 ünïcödé ".repeat(100),
            "<|eot_id|> <|begin_of_text|>".repeat(50),
            " \t\n  ".repeat(500),
            digits.clone(),
        ];
        for text in &texts {
            let real = t.encode(text, false).unwrap().len();
            let bound = t.min_tokens_within(text);
            assert!(bound <= real, "bound {bound} > {real} tokens for {:?}", &text[..40]);
        }
        let real = t.encode(&digits, false).unwrap().len();
        assert_eq!(real, 10_000);
        let bound = t.min_tokens_within(&digits);
        assert!(bound >= real - 2 * t.max_token_bytes(), "{bound}");
        // The byte bound alone is two orders of magnitude looser there.
        assert!(t.min_token_count(digits.len()) * 20 < bound, "{} vs {bound}", t.min_token_count(digits.len()));
    }
}
