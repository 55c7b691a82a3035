//! Text to token ids and back: a thin layer over the `tokenizers` crate that knows a model's
//! special tokens (bos, the tokens that end a turn) and where its chat template lives.
//!
//! Two sources: a GGUF file's `tokenizer.ggml.*` metadata (built in `tokenizer_gguf.rs`), or a
//! Hugging Face `tokenizer.json` with its optional `tokenizer_config.json`.

use std::path::Path;

use tokenizers::Tokenizer as HfTokenizer;

use super::metadata::Metadata;
use super::model_files::{ModelFiles, TokenizerSource};
use super::tokenizer_bytes::TokenBytes;
pub use super::tokenizer_chat::ChatPrompt;
use super::tokenizer_chat::PlainEncoder;
use super::tokenizer_chunks::{Cutter, PIECE_BYTES};
use super::tokenizer_cover::Cover;
pub use super::tokenizer_error::TokenizerError;

/// Longest text `encode` accepts, in bytes. Far above any context window the server offers (a
/// token is rarely under 2 bytes), it bounds the work one request can ask of the tokenizer.
pub const MAX_ENCODE_BYTES: usize = 16 << 20;

/// Largest tokenizer.json / tokenizer_config.json read from disk; real ones are under 20 MiB.
pub const MAX_TOKENIZER_FILE_BYTES: u64 = 256 << 20;

/// Token texts that end a turn in the chat formats we know (ChatML, Llama 3, Gemma, Phi,
/// DeepSeek, GPT-2 style). Generation stops on any of these that the vocabulary holds as a
/// special token, besides the model's declared eos.
pub const END_OF_TURN_TOKENS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|end|>",
    "<end_of_turn>",
    "<EOT>",
    "<｜end▁of▁sentence｜>",
];

/// A model's tokenizer. Cheap to share (`&self` everywhere, `Send + Sync`).
pub struct Tokenizer {
    pub(super) inner: HfTokenizer,
    pub(super) bos: Option<u32>,
    pub(super) eos: Option<u32>,
    /// eos first, then every end-of-turn token, without duplicates.
    pub(super) eos_tokens: Vec<u32>,
    /// Prepend bos / append eos in `encode(.., true)` ourselves, because the inner tokenizer's
    /// post-processor does not (GGUF files carry flags, not a post-processor).
    pub(super) add_bos: bool,
    pub(super) add_eos: bool,
    pub(super) vocab_size: usize,
    /// Ids of special added tokens, sorted (the inner tokenizer only hands out a copy of its map).
    pub(super) special_ids: Vec<u32>,
    pub(super) chat_template: Option<String>,
    /// The inner pipeline with special tokens read as text, for message content.
    pub(super) plain: PlainEncoder,
    bytes: TokenBytes,
    /// Where long texts may be cut into pieces encoded one at a time, if anywhere.
    pub(super) cutter: Option<Cutter>,
    /// The vocabulary as a trie, for a token-count bound finer than the byte bound.
    cover: Option<Cover>,
    /// What the inner post-processor adds around a sequence, when that is known.
    post_affixes: Option<(Vec<u32>, Vec<u32>)>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos_tokens", &self.eos_tokens)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// The tokenizer a model's files name: GGUF metadata or tokenizer.json. The files' own
    /// end-of-generation ids (generation_config.json, eot/eom keys) and chat template (from
    /// wherever the files keep it) are added to what the tokenizer knows.
    pub fn from_model_files(files: &ModelFiles) -> Result<Self, TokenizerError> {
        let mut tok = match &files.tokenizer {
            Some(TokenizerSource::GgufMetadata) => Self::from_gguf_metadata(&files.metadata)?,
            Some(TokenizerSource::HfJson { tokenizer_json, tokenizer_config }) => {
                Self::from_json_files(tokenizer_json, tokenizer_config.as_deref())?
            }
            None => return Err(TokenizerError::NoTokenizer { path: files.path.clone() }),
        };
        for &id in &files.eos_tokens {
            if (id as usize) < tok.vocab_size && !tok.eos_tokens.contains(&id) {
                tok.eos_tokens.push(id);
            }
        }
        if let Some(t) = &files.chat_template {
            tok.chat_template = Some(t.clone());
        }
        Ok(tok)
    }

    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*` keys).
    pub fn from_gguf_metadata(meta: &Metadata) -> Result<Self, TokenizerError> {
        super::tokenizer_gguf::build(meta)
    }

    /// Loads `tokenizer.json` and, when present, `tokenizer_config.json` from a model directory.
    pub fn from_hf_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let config = dir.join("tokenizer_config.json");
        let config = config.exists().then_some(config);
        Self::from_json_files(&dir.join("tokenizer.json"), config.as_deref())
    }

    pub fn from_json_files(tokenizer_json: &Path, tokenizer_config: Option<&Path>) -> Result<Self, TokenizerError> {
        let json = read_limited(tokenizer_json)?;
        let config = tokenizer_config.map(read_limited).transpose()?;
        Self::from_json_bytes(&json, config.as_deref())
    }

    /// From the bytes of a `tokenizer.json` and, optionally, of its `tokenizer_config.json`.
    pub fn from_json_bytes(json: &[u8], config: Option<&[u8]>) -> Result<Self, TokenizerError> {
        let inner = HfTokenizer::from_bytes(json)
            .map_err(|e| TokenizerError::BadJson { what: "tokenizer.json".into(), detail: e.to_string() })?;
        let config: serde_json::Value = match config {
            Some(bytes) => serde_json::from_slice(bytes)
                .map_err(|e| TokenizerError::BadJson { what: "tokenizer_config.json".into(), detail: e.to_string() })?,
            None => serde_json::Value::Null,
        };
        let token_of = |key: &str| -> Option<u32> {
            let v = config.get(key)?;
            let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
            inner.token_to_id(text)
        };
        let bos = token_of("bos_token");
        let eos = token_of("eos_token");
        let flag = |key: &str| config.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
        let chat_template = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // A list of named templates: the one called "default", else the first.
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_owned),
            _ => None,
        };
        let mut tok = Tokenizer::assemble(inner, bos, eos, chat_template);
        // The config's flags are honoured only where the post-processor does not already add
        // the token (transformers rewrites the post-processor to the same effect).
        let probe = tok.inner.encode_fast("", true).map(|e| e.get_ids().to_vec()).unwrap_or_default();
        tok.add_bos = flag("add_bos_token") && bos.is_some() && probe.first() != bos.as_ref();
        tok.add_eos = flag("add_eos_token") && eos.is_some() && probe.last() != eos.as_ref();
        Ok(tok)
    }

    /// A tokenizer around `inner`, which must hold every added token by now: `vocab_size`,
    /// the special ids and `eos_tokens` (eos, then the end-of-turn tokens) come from it, as do
    /// the plain encoder and the token bytes. bos and eos are not added until `add_bos` /
    /// `add_eos` say so.
    pub(super) fn assemble(
        inner: HfTokenizer,
        bos: Option<u32>,
        eos: Option<u32>,
        chat_template: Option<String>,
    ) -> Self {
        let vocab = inner.get_vocab(true);
        let vocab_size = vocab.values().copied().max().map_or(0, |m| m as usize + 1);
        let added = inner.get_added_tokens_decoder();
        let mut special_ids: Vec<u32> = added.iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        special_ids.sort_unstable();
        let mut eos_tokens: Vec<u32> = eos.into_iter().collect();
        for text in END_OF_TURN_TOKENS {
            if let Some(&id) = vocab.get(*text) {
                if special_ids.binary_search(&id).is_ok() && !eos_tokens.contains(&id) {
                    eos_tokens.push(id);
                }
            }
        }
        let bytes = TokenBytes::new(&inner, vocab_size);
        Tokenizer {
            plain: PlainEncoder::new(&inner),
            cover: Cover::for_tokenizer(&inner, &bytes, vocab_size),
            bytes,
            cutter: Cutter::for_tokenizer(&inner, super::tokenizer_gguf::LOCAL_SPLIT_RULES),
            post_affixes: super::tokenizer_chunks::post_affixes(&inner),
            inner,
            bos,
            eos,
            eos_tokens,
            add_bos: false,
            add_eos: false,
            vocab_size,
            special_ids,
            chat_template,
        }
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their
    /// ids; `add_special` adds what the model wants around a sequence (e.g. bos).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        check_len(text)?;
        let whole = |text: &str, add_special| {
            let enc = self.inner.encode_fast(text, add_special).map_err(encode_error)?;
            Ok(enc.get_ids().to_vec())
        };
        let ids = self.in_pieces(text, add_special, whole)?;
        Ok(self.wrap(ids, add_special))
    }

    /// `encode(text, add_special)` of the inner tokenizer, piece by piece where the text is long
    /// and the tokenizer can be cut (see `tokenizer_chunks.rs`): the same ids, with the
    /// transient memory of one piece.
    fn in_pieces(
        &self,
        text: &str,
        add_special: bool,
        encode: impl Fn(&str, bool) -> Result<Vec<u32>, TokenizerError>,
    ) -> Result<Vec<u32>, TokenizerError> {
        let pieces = self.pieces(text);
        let affixes = match (&self.post_affixes, add_special) {
            (_, false) => None,
            (Some(a), true) => Some(a),
            (None, true) => return encode(text, true),
        };
        if pieces.len() == 1 {
            return encode(text, add_special);
        }
        let mut ids = Vec::new();
        ids.extend(affixes.iter().flat_map(|a| a.0.iter().copied()));
        for r in pieces {
            ids.extend(encode(&text[r], false)?);
        }
        ids.extend(affixes.iter().flat_map(|a| a.1.iter().copied()));
        Ok(ids)
    }

    /// The ranges [`in_pieces`](Self::in_pieces) encodes one at a time: `text` whole when short.
    pub(super) fn pieces(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        match self.cutter {
            Some(c) if text.len() > PIECE_BYTES => c.pieces(text, PIECE_BYTES),
            _ => std::iter::once(0..text.len()).collect(),
        }
    }

    /// `ids` with bos / eos around them where `add_special` and the model ask for it.
    fn wrap(&self, ids: Vec<u32>, add_special: bool) -> Vec<u32> {
        let bos = (add_special && self.add_bos).then_some(self.bos).flatten();
        let eos = (add_special && self.add_eos).then_some(self.eos).flatten();
        if bos.is_none() && eos.is_none() {
            return ids;
        }
        bos.into_iter().chain(ids).chain(eos).collect()
    }

    /// Like [`encode`](Self::encode), with special-token strings as ordinary characters:
    /// `<|im_end|>` in `text` is `<`, `|`, `im`, ... and never the control token.
    pub fn encode_plain(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        check_len(text)?;
        let plain = |text: &str, add_special| self.plain.encode(&self.inner, text, add_special);
        let ids = self.in_pieces(text, add_special, plain)?;
        Ok(self.wrap(ids, add_special))
    }

    /// Byte ranges of `text` that [`encode`](Self::encode) would read as special tokens.
    pub fn special_token_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let is_special = |id| self.is_special(id);
        let mut out = Vec::new();
        for r in self.pieces(text) {
            let spans = super::tokenizer_chat::special_spans(&self.inner, is_special, &text[r.clone()]);
            out.extend(spans.into_iter().map(|s| s.start + r.start..s.end + r.start));
        }
        out
    }

    /// The ids of a rendered chat prompt (no bos/eos added: the template writes them). The
    /// template's own special tokens are control tokens; special-token strings that came from
    /// the messages (`prompt.literal`) are text, unless `parse_special_in_content` asks for the
    /// old behaviour, where they too become control tokens. A prompt whose messages spell no
    /// special token encodes exactly as `encode(&prompt.text, false)`.
    pub fn encode_chat(&self, prompt: &ChatPrompt, parse_special_in_content: bool) -> Result<Vec<u32>, TokenizerError> {
        if parse_special_in_content || prompt.literal.is_empty() {
            return self.encode(&prompt.text, false);
        }
        check_len(&prompt.text)?;
        let is_special = |id| self.is_special(id);
        let mut pieces = self.pieces(&prompt.text);
        // Cuts never fall inside a special-token string; should one, encode the text whole
        // rather than lose a literal range.
        let inside = |l: &std::ops::Range<usize>| pieces.iter().any(|r| r.start <= l.start && l.end <= r.end);
        if !prompt.literal.iter().all(inside) {
            pieces = std::iter::once(0..prompt.text.len()).collect();
        }
        let mut ids = Vec::new();
        for r in pieces {
            let (text, literal) = (&prompt.text[r.clone()], &prompt.literal);
            let literal: Vec<_> = literal
                .iter()
                .filter(|l| l.start >= r.start && l.end <= r.end)
                .map(|l| l.start - r.start..l.end - r.start)
                .collect();
            let piece =
                super::tokenizer_chat::encode_with_literals(&self.inner, &self.plain, is_special, text, &literal)?;
            ids.extend(piece);
        }
        Ok(ids)
    }

    /// The bytes `id` adds to a text: byte-level and byte-fallback tokens as their raw bytes
    /// (a token that ends inside a UTF-8 character gives part of it), `▁` as a space, added
    /// tokens as their text. The bytes of a sequence's tokens, concatenated, are its text
    /// (SentencePiece: with the space it puts before the text). Empty for an unknown id.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.bytes.bytes(&self.inner, id)
    }

    /// The longest [`token_bytes`](Self::token_bytes) of the vocabulary.
    pub fn max_token_bytes(&self) -> usize {
        self.bytes.max_token_bytes()
    }

    /// The most input bytes one token can stand for, when that is bounded: the longest token,
    /// times how much the normalizer can shrink text (NFC: 4). `None` when one token can stand
    /// for any amount of text (a normalizer or pre-tokenizer that deletes text, added tokens
    /// that swallow spaces, fused unknown tokens); see `tokenizer_bytes.rs`.
    pub fn max_input_bytes_per_token(&self) -> Option<usize> {
        self.bytes.max_input_bytes_per_token()
    }

    /// A lower bound on the tokens of any text of `text_bytes` bytes, known without encoding
    /// it (0 when the tokenizer gives no bound). A prompt whose bound exceeds the context
    /// cannot fit, so can be refused before the tokenizer spends time and memory on it.
    pub fn min_token_count(&self, text_bytes: usize) -> usize {
        self.max_input_bytes_per_token().map_or(0, |per| text_bytes.div_ceil(per))
    }

    /// A lower bound on the tokens of any prompt that holds `text`, templated or not, found
    /// without encoding it: the fewest vocabulary entries that spell it (`tokenizer_cover.rs`),
    /// less what tokens reaching into it from either side could cover (a token's length each).
    /// 0 when the tokenizer allows no such bound.
    pub fn min_tokens_within(&self, text: &str) -> usize {
        self.cover.as_ref().map_or(0, |c| c.min_tokens(text.as_bytes()).saturating_sub(2 * c.max_len()))
    }

    /// The text of `ids`, special tokens included. Ids outside the vocabulary are skipped;
    /// bytes that do not form whole UTF-8 characters become U+FFFD (a streaming decoder should
    /// hold such a tail back until the next token completes it).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.decode_inner(ids, false)
    }

    /// Like [`decode`](Self::decode), without the special tokens (`<|im_end|>` and the like).
    pub fn decode_skip_special(&self, ids: &[u32]) -> String {
        self.decode_inner(ids, true)
    }

    fn decode_inner(&self, ids: &[u32], skip_special: bool) -> String {
        match self.inner.decode(ids, skip_special) {
            Ok(s) => s,
            // The decoders we build cannot fail; a tokenizer.json with an exotic decoder might.
            // Raw token texts are the most faithful fallback that cannot panic.
            Err(_) => ids.iter().filter_map(|&id| self.inner.id_to_token(id)).collect(),
        }
    }

    /// The vocabulary entry of `id` as stored (byte-level BPE spells a space `Ġ`).
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary entry or special token, spelled as stored.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// Whether `id` is a special (control) token, such as `<|im_start|>`.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.binary_search(&id).is_ok()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Every token that ends a generation: eos, then end-of-turn tokens such as `<|im_end|>`.
    pub fn eos_tokens(&self) -> &[u32] {
        &self.eos_tokens
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_tokens.contains(&id)
    }

    /// Whether `encode(.., true)` prepends bos.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// One past the largest token id (the model's embedding table may be larger).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The bos token's text, for chat templates (`bos_token`).
    pub fn bos_text(&self) -> Option<String> {
        self.bos.and_then(|id| self.token_text(id))
    }

    /// The eos token's text, for chat templates (`eos_token`).
    pub fn eos_text(&self) -> Option<String> {
        self.eos.and_then(|id| self.token_text(id))
    }

    /// The model's own Jinja chat template, if its files carry one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

fn encode_error(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Encode { detail: e.to_string() }
}

fn check_len(text: &str) -> Result<(), TokenizerError> {
    if text.len() > MAX_ENCODE_BYTES {
        return Err(TokenizerError::TextTooLong { len: text.len(), max: MAX_ENCODE_BYTES });
    }
    Ok(())
}

fn read_limited(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    let io = |error| TokenizerError::Io { path: path.to_owned(), error };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_TOKENIZER_FILE_BYTES {
        return Err(TokenizerError::FileTooLarge { path: path.to_owned(), size, max: MAX_TOKENIZER_FILE_BYTES });
    }
    std::fs::read(path).map_err(io)
}
