//! Streaming detokenization: text deltas that never split a UTF-8 character.
//!
//! Decoding tokens one at a time is wrong twice over: a character may span several byte-level
//! tokens, and tokenizers change how a token reads depending on its neighbours (SentencePiece's
//! leading space). So each delta is the difference between decoding a short window of recent
//! ids with and without the newest ones, and while that text ends in U+FFFD (bytes of a
//! character still to come) nothing is emitted.

/// Anything that turns token ids back into text (the tokenizer implements it).
pub trait TokenDecoder: Send + Sync {
    fn decode(&self, ids: &[u32]) -> String;
}

/// Tokens held back at most while the text ends in U+FFFD; beyond this the bytes are not a
/// character in the making but invalid, and are emitted as U+FFFD. UTF-8 needs at most 4 bytes.
const MAX_HELD_TOKENS: usize = 8;

/// The replacement character that lossy decoders put in place of incomplete bytes.
const REPLACEMENT: char = '\u{FFFD}';

/// One sequence's detokenizer state.
#[derive(Default)]
pub struct StreamDecoder {
    /// Recent ids: `ids[..read]` has been emitted; `ids[..prefix]` is context only.
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds a token; returns the text it completes (possibly empty).
    pub fn push(&mut self, dec: &dyn TokenDecoder, id: u32) -> String {
        self.ids.push(id);
        let before = dec.decode(&self.ids[self.prefix..self.read]);
        let after = dec.decode(&self.ids[self.prefix..]);
        let held = self.ids.len() - self.read;
        if after.ends_with(REPLACEMENT) && held < MAX_HELD_TOKENS {
            return String::new();
        }
        match delta(&before, &after) {
            Some(d) => {
                let d = d.to_string();
                self.prefix = self.read;
                self.read = self.ids.len();
                self.compact();
                d
            }
            None => String::new(),
        }
    }

    /// The text still held back (an incomplete character at the end), emitted as-is.
    pub fn flush(&mut self, dec: &dyn TokenDecoder) -> String {
        if self.read == self.ids.len() {
            return String::new();
        }
        let before = dec.decode(&self.ids[self.prefix..self.read]);
        let after = dec.decode(&self.ids[self.prefix..]);
        self.prefix = self.read;
        self.read = self.ids.len();
        self.compact();
        delta(&before, &after).map(str::to_string).unwrap_or(after)
    }

    /// Keeps memory bounded: ids before the context window are never decoded again.
    fn compact(&mut self) {
        if self.prefix > 0 {
            self.ids.drain(..self.prefix);
            self.read -= self.prefix;
            self.prefix = 0;
        }
    }
}

/// The new suffix of `after` over `before`, when `after` extends it at a character boundary.
fn delta<'a>(before: &str, after: &'a str) -> Option<&'a str> {
    if after.len() >= before.len() && after.starts_with(before) {
        after.get(before.len()..)
    } else {
        None
    }
}

/// The model's tokenizer decodes for the streaming detokenizer.
impl TokenDecoder for crate::model::Tokenizer {
    fn decode(&self, ids: &[u32]) -> String {
        crate::model::Tokenizer::decode(self, ids)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Each id is one byte (ids 0..=255), decoded lossily, like a byte-level BPE without merges.
    pub(crate) struct ByteDecoder;

    impl TokenDecoder for ByteDecoder {
        fn decode(&self, ids: &[u32]) -> String {
            let bytes: Vec<u8> = ids.iter().map(|&i| (i % 256) as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    /// Tokens that start with `_` read as a space except at the start of a text, as in
    /// SentencePiece: decoding one token alone would lose the space.
    struct SpaceDecoder;

    impl TokenDecoder for SpaceDecoder {
        fn decode(&self, ids: &[u32]) -> String {
            let words = ["_a", "b", "_c"];
            let s: String = ids.iter().map(|&i| words[i as usize]).collect::<String>().replace('_', " ");
            s.strip_prefix(' ').map(str::to_string).unwrap_or(s)
        }
    }

    fn stream(dec: &dyn TokenDecoder, ids: &[u32]) -> (Vec<String>, String) {
        let mut sd = StreamDecoder::new();
        let parts: Vec<String> = ids.iter().map(|&i| sd.push(dec, i)).collect();
        let tail = sd.flush(dec);
        (parts, tail)
    }

    #[test]
    fn multibyte_characters_split_across_tokens_come_out_whole() {
        let text = "aé€😀b";
        let ids: Vec<u32> = text.bytes().map(u32::from).collect();
        let (parts, tail) = stream(&ByteDecoder, &ids);
        // 'a' (1 byte), 'é' (2), '€' (3), '😀' (4), 'b' (1): deltas only at character ends.
        let expect = ["a", "", "é", "", "", "€", "", "", "", "😀", "b"];
        assert_eq!(parts, expect);
        assert_eq!(tail, "");
        for p in &parts {
            assert!(!p.contains(REPLACEMENT));
        }
    }

    #[test]
    fn incomplete_character_at_the_end_is_flushed_as_replacement() {
        let mut ids: Vec<u32> = "ok".bytes().map(u32::from).collect();
        ids.push(0xE2); // first byte of a 3-byte character, never completed
        let (parts, tail) = stream(&ByteDecoder, &ids);
        assert_eq!(parts.concat(), "ok");
        assert_eq!(tail, "\u{FFFD}");
    }

    #[test]
    fn invalid_bytes_are_not_held_forever() {
        // Ten stray continuation bytes can never become a character: they are released after
        // MAX_HELD_TOKENS tokens, before the ASCII that follows.
        let mut ids = vec![0x80u32; 10];
        ids.extend("hi".bytes().map(u32::from));
        let (parts, tail) = stream(&ByteDecoder, &ids);
        assert!(!parts[MAX_HELD_TOKENS - 1].is_empty());
        assert_eq!(parts.concat() + &tail, "\u{FFFD}".repeat(10) + "hi");
    }

    #[test]
    fn leading_spaces_that_depend_on_context_are_kept() {
        let (parts, tail) = stream(&SpaceDecoder, &[0, 1, 2, 0]);
        assert_eq!(parts, ["a", "b", " c", " a"]);
        assert_eq!(tail, "");
    }

    #[test]
    fn window_stays_small_on_long_streams() {
        let mut sd = StreamDecoder::new();
        let mut out = String::new();
        for i in 0..10_000u32 {
            out += &sd.push(&ByteDecoder, b'a' as u32 + i % 26);
        }
        assert_eq!(out.len(), 10_000);
        assert!(sd.ids.len() <= 2, "window grew to {}", sd.ids.len());
    }
}
