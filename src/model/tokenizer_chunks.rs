//! Encoding a long text in pieces, cut where the cut cannot change a token.
//!
//! The `tokenizers` crate keeps about 16 bytes of offsets per input byte, several copies of the
//! text and an owned string per token while it encodes: a 1 MiB text peaks at 55-170 MiB. Cut
//! into pieces of about [`PIECE_BYTES`], the peak is that of one piece.
//!
//! A cut is exact where no stage of the pipeline looks across it:
//! - no added token holds a space, a newline or `▁`, and none strips the spaces around it, so
//!   no added token spans a cut at a space or a line end;
//! - byte-level BPE: the split rules are ones known not to match across a space between two
//!   ASCII letters or digits, nor across a line end followed by one (`LOCAL_SPLIT_RULES`), so
//!   the model sees the same pieces; the normalizer, if any, is NFC, which never joins an ASCII
//!   character to the one before it;
//! - SentencePiece BPE (no split rules: the model sees the whole text at once): no vocabulary
//!   entry holds `▁` after another character, so no token reaches across the `▁` that starts a
//!   word. The cut drops the space, and the normalizer's `▁` before the next piece stands for
//!   it.
//!
//! A text with no such place for more than [`PIECE_BYTES`] (one run of letters, of symbols or of
//! spaces) stays one piece: those costs are left to the caller's length limit.

use std::ops::Range;

use tokenizers::Tokenizer as HfTokenizer;

/// Target length of one piece. Small enough that its transient memory (about 170 times the
/// piece) stays near 10 MiB; large enough that the cuts cost nothing measurable.
pub const PIECE_BYTES: usize = 64 << 10;

const SPACE_MARK: char = '\u{2581}';

/// Where a tokenizer may be cut, or `None` from [`Cutter::for_tokenizer`] when nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cutter {
    /// SentencePiece: cut only at spaces, and drop the space.
    drop_space: bool,
}

impl Cutter {
    pub(super) fn for_tokenizer(inner: &HfTokenizer, local_rules: &[&str]) -> Option<Cutter> {
        let added = inner.get_added_tokens_decoder();
        let safe_added = added
            .values()
            .all(|t| !(t.lstrip || t.rstrip || t.single_word || t.content.contains([' ', '\n', SPACE_MARK])));
        if !safe_added {
            return None;
        }
        let json = |x: Option<serde_json::Value>| x.unwrap_or(serde_json::Value::Null);
        let normalizer = json(inner.get_normalizer().and_then(|n| serde_json::to_value(n).ok()));
        let pre = json(inner.get_pre_tokenizer().and_then(|p| serde_json::to_value(p).ok()));
        if pre.is_null() && is_sentencepiece_normalizer(&normalizer) {
            let tokenizers::ModelWrapper::BPE(bpe) = inner.get_model() else {
                return None;
            };
            let mid_mark = bpe.get_vocab().keys().any(|t| t.trim_start_matches(SPACE_MARK).contains(SPACE_MARK));
            return (!mid_mark).then_some(Cutter { drop_space: true });
        }
        let nfc_or_none = normalizer.is_null() || type_of(&normalizer) == "NFC";
        (nfc_or_none && local_pre_tokenizer(&pre, local_rules)).then_some(Cutter { drop_space: false })
    }

    /// `text` as consecutive pieces of at least `target` bytes (the last may be shorter), cut
    /// at safe places only. With `drop_space`, the space at each cut belongs to no piece.
    pub(super) fn pieces(&self, text: &str, target: usize) -> Vec<Range<usize>> {
        let b = text.as_bytes();
        let alnum = |i: usize| b.get(i).is_some_and(u8::is_ascii_alphanumeric);
        // A space between two ASCII letters or digits; or (byte-level) the start of a line
        // that begins with one, after a line that ends in something other than white space.
        let cut_at = |p: usize| {
            (b[p] == b' ' && alnum(p - 1) && alnum(p + 1))
                || (!self.drop_space && b[p - 1] == b'\n' && p >= 2 && !b[p - 2].is_ascii_whitespace() && alnum(p))
        };
        let mut out = Vec::new();
        let mut start = 0;
        let mut p = target.max(2);
        while p < b.len() {
            if cut_at(p) {
                out.push(start..p);
                start = if self.drop_space { p + 1 } else { p };
                p = start + target.max(2);
            } else {
                p += 1;
            }
        }
        out.push(start..b.len());
        out
    }
}

/// The ids the post-processor puts before and after a sequence (`<|begin_of_text|>`), found by
/// encoding one character with and without them; `None` when they are not plain affixes.
pub(super) fn post_affixes(inner: &HfTokenizer) -> Option<(Vec<u32>, Vec<u32>)> {
    let bare = inner.encode_fast("a", false).ok()?.get_ids().to_vec();
    let full = inner.encode_fast("a", true).ok()?.get_ids().to_vec();
    if bare.is_empty() {
        return None;
    }
    let i = full.windows(bare.len()).position(|w| w == bare)?;
    Some((full[..i].to_vec(), full[i + bare.len()..].to_vec()))
}

fn type_of(v: &serde_json::Value) -> &str {
    v.get("type").and_then(|t| t.as_str()).unwrap_or("")
}

/// `Prepend("▁")` then `Replace(" ", "▁")`, as SentencePiece BPE is written in tokenizer.json
/// and as `tokenizer_spm.rs` builds it.
fn is_sentencepiece_normalizer(n: &serde_json::Value) -> bool {
    let Some(parts) = n.get("normalizers").and_then(|p| p.as_array()) else {
        return false;
    };
    let mark = SPACE_MARK.to_string();
    matches!(parts.as_slice(), [prepend, replace]
        if type_of(prepend) == "Prepend"
            && prepend.get("prepend").and_then(|p| p.as_str()) == Some(mark.as_str())
            && type_of(replace) == "Replace"
            && replace.pointer("/pattern/String").and_then(|p| p.as_str()) == Some(" ")
            && replace.get("content").and_then(|c| c.as_str()) == Some(mark.as_str()))
}

/// Split rules from `local_rules` (isolated, not inverted), `Digits`, and a `ByteLevel` that
/// adds no space in front (it would add one to every piece).
fn local_pre_tokenizer(pre: &serde_json::Value, local_rules: &[&str]) -> bool {
    let parts = match pre.get("pretokenizers").and_then(|p| p.as_array()) {
        Some(list) => list.iter().collect(),
        None => vec![pre],
    };
    parts.iter().all(|p| match type_of(p) {
        "Digits" => true,
        // With `use_regex` it applies GPT-2's rule, one of the local ones.
        "ByteLevel" => p.get("add_prefix_space").and_then(|a| a.as_bool()) == Some(false),
        "Split" => {
            p.get("behavior").and_then(|b| b.as_str()) == Some("Isolated")
                && p.get("invert").and_then(|i| i.as_bool()) == Some(false)
                && p.pointer("/pattern/Regex").and_then(|r| r.as_str()).is_some_and(|r| local_rules.contains(&r))
        }
        _ => false,
    })
}

#[cfg(test)]
#[path = "tokenizer_chunks_tests.rs"]
mod tests;
