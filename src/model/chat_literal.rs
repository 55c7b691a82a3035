//! Carrying special-token strings of message text through a chat template as marked text.
//!
//! Before rendering, each special-token string in a message (and each character of the
//! reserved range below) is swapped for an escape: private-use characters naming an entry of a
//! table. No template writes those characters, and the string methods templates use on
//! content (`trim`, `strip`, `split`, `startswith`) pass them through untouched, so a template
//! that trims or rearranges content still works. After rendering, each escape is swapped back,
//! and the ranges of the restored special-token strings are recorded as literal text. Where a
//! template cuts an escape in half, the half stays as the private-use characters it is; it never
//! turns into a control token.

use std::borrow::Cow;
use std::ops::Range;

use super::tokenizer_chat::ChatPrompt;

/// Opens an escape; the table index follows in hex digits, then [`CLOSE`].
const OPEN: char = '\u{F0000}';
const CLOSE: char = '\u{F0001}';
/// Hex digit `d` is `DIGIT0 + d`.
const DIGIT0: u32 = 0xF0010;
/// Every character the escapes use; a message's own are escaped too, so it cannot forge one.
const RESERVED: std::ops::RangeInclusive<char> = '\u{F0000}'..='\u{F001F}';

/// The strings taken out of the messages, in the order they were escaped.
#[derive(Default)]
pub(super) struct Escapes {
    /// The text, and whether it spells a special token (else a reserved character).
    table: Vec<(String, bool)>,
}

impl Escapes {
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// `text` with the `special` byte ranges (sorted, from the tokenizer) and every reserved
    /// character replaced by escapes.
    pub(super) fn escape<'t>(&mut self, text: &'t str, special: &[Range<usize>]) -> Cow<'t, str> {
        if special.is_empty() && !text.chars().any(|c| RESERVED.contains(&c)) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len() + 8 * special.len());
        let mut at = 0;
        let mut spans = special.iter().peekable();
        while at < text.len() {
            // Spans are sorted and disjoint; one starting behind us would be overlapping.
            while spans.next_if(|r| r.start < at).is_some() {}
            if let Some(r) = spans.next_if(|r| r.start == at) {
                self.push(&mut out, &text[r.clone()], true);
                at = r.end;
                continue;
            }
            let next_special = spans.peek().map_or(text.len(), |r| r.start);
            let chunk = &text[at..next_special];
            match chunk.char_indices().find(|(_, c)| RESERVED.contains(c)) {
                Some((i, c)) => {
                    out.push_str(&chunk[..i]);
                    self.push(&mut out, &chunk[i..i + c.len_utf8()], false);
                    at += i + c.len_utf8();
                }
                None => {
                    out.push_str(chunk);
                    at = next_special;
                }
            }
        }
        Cow::Owned(out)
    }

    fn push(&mut self, out: &mut String, text: &str, special: bool) {
        out.push(OPEN);
        for d in format!("{:x}", self.table.len()).chars() {
            let d = d.to_digit(16).unwrap_or(0);
            out.push(char::from_u32(DIGIT0 + d).unwrap_or(CLOSE));
        }
        out.push(CLOSE);
        self.table.push((text.to_owned(), special));
    }

    /// `rendered` with every escape swapped back, and the ranges of the special-token strings.
    pub(super) fn restore(&self, rendered: &str) -> ChatPrompt {
        let mut text = String::with_capacity(rendered.len());
        let mut literal = Vec::new();
        let mut rest = rendered;
        while let Some(i) = rest.find(OPEN) {
            text.push_str(&rest[..i]);
            let after = &rest[i + OPEN.len_utf8()..];
            match self.entry(after) {
                Some((entry, used)) => {
                    let (s, special) = &self.table[entry];
                    if *special {
                        literal.push(text.len()..text.len() + s.len());
                    }
                    text.push_str(s);
                    rest = &after[used..];
                }
                None => {
                    text.push(OPEN);
                    rest = after;
                }
            }
        }
        text.push_str(rest);
        ChatPrompt { text, literal }
    }

    /// The table index an escape's body names, and the body's length with [`CLOSE`].
    fn entry(&self, body: &str) -> Option<(usize, usize)> {
        let mut index = 0usize;
        for (i, c) in body.char_indices() {
            if c == CLOSE {
                return (i > 0 && index < self.table.len()).then_some((index, i + c.len_utf8()));
            }
            let d = (c as u32).checked_sub(DIGIT0).filter(|&d| d < 16)?;
            index = index.checked_mul(16)?.checked_add(d as usize)?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip_and_mark_only_special_strings() {
        let mut e = Escapes::default();
        let text = "a<|x|>b\u{F0000}c<|x|>";
        let escaped = e.escape(text, &[1..6, 12..17]);
        assert!(!escaped.contains("<|x|>"));
        let p = e.restore(&format!("[{escaped}]"));
        assert_eq!(p.text, format!("[{text}]"));
        assert_eq!(p.literal, [2..7, 13..18]);
        assert_eq!(&p.text[2..7], "<|x|>");
    }

    #[test]
    fn text_without_specials_or_reserved_characters_is_borrowed() {
        let mut e = Escapes::default();
        assert!(matches!(e.escape("plain", &[]), Cow::Borrowed("plain")));
        assert!(e.is_empty());
    }

    #[test]
    fn broken_or_forged_escapes_stay_ordinary_text() {
        let mut e = Escapes::default();
        let whole = 0..5;
        let escaped = e.escape("<|x|>", std::slice::from_ref(&whole)).into_owned();
        // A template that cuts the escape short, or an escape naming no entry.
        let cut: String = escaped.chars().take(2).collect();
        let p = e.restore(&cut);
        assert_eq!(p.text, cut);
        assert!(p.literal.is_empty());
        let forged = format!("{OPEN}{}{CLOSE}", char::from_u32(DIGIT0 + 5).unwrap());
        assert_eq!(e.restore(&forged).text, forged);
        // Many entries: multi-digit indices.
        let mut e = Escapes::default();
        let many = "<|x|>".repeat(40);
        let spans: Vec<_> = (0..40).map(|i| i * 5..i * 5 + 5).collect();
        let escaped = e.escape(&many, &spans).into_owned();
        let p = e.restore(&escaped);
        assert_eq!(p.text, many);
        assert_eq!(p.literal, spans);
    }
}
