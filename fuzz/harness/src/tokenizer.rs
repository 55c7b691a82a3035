//! The tokenizer on arbitrary text: encoding never fails on text within the bound, every id is
//! inside the vocabulary, decoding gives the very text back, and `encode(.., true)` only adds
//! special tokens around the ids of `encode(.., false)`.
//!
//! Both tokenizers here are byte-level BPE with no normalizer, so nothing may be lost but the
//! bytes that the vocabulary has no token for: SmolLM2's lacks 21 of the 256 (U+0016 among
//! them), and those are left out, as llama.cpp and the `tokenizers` crate do. The text expected
//! back is the text without them.
//!
//! Tokenizers: the demo model's own (from its GGUF, when the cache directory holds it: the one
//! the server runs by default) and Llama 3's committed tokenizer.json (always there).

use std::path::Path;
use std::sync::OnceLock;

use mtplx_lite::model::fetch::{cache_dir, DEMO_FILE};
use mtplx_lite::model::{GgufFile, Tokenizer};

/// A tokenizer, and which of the 256 bytes its vocabulary has no token for.
type Fuzzed = (&'static str, Tokenizer, [bool; 256]);

/// The printable character byte-level BPE spells each byte with (GPT-2's `bytes_to_unicode`):
/// printable Latin-1 bytes stand for themselves, the others for U+0100 onwards, in order.
fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
    let mut chars = ['\0'; 256];
    let mut next = 0x100;
    for b in 0..=255u8 {
        chars[b as usize] = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap()
        };
    }
    chars
}

fn fuzzed(name: &'static str, tok: Tokenizer) -> Fuzzed {
    let chars = byte_chars();
    let missing = std::array::from_fn(|b| tok.token_id(&chars[b].to_string()).is_none());
    (name, tok, missing)
}

fn tokenizers() -> &'static [Fuzzed] {
    static T: OnceLock<Vec<Fuzzed>> = OnceLock::new();
    T.get_or_init(|| {
        let mut v = Vec::new();
        let demo = std::env::var_os("MTPLX_DEMO_MODEL")
            .map(Into::into)
            .or_else(|| cache_dir().ok().map(|d| d.join(DEMO_FILE)));
        if let Some(path) = demo.filter(|p: &std::path::PathBuf| p.exists()) {
            let file = GgufFile::open(&path).expect("the demo model opens");
            let tok = Tokenizer::from_gguf_metadata(&file.metadata).expect("demo tokenizer");
            v.push(fuzzed("demo", tok));
        } else {
            eprintln!("tokenizer: no demo model in the cache directory; fuzzing llama3 only");
        }
        let llama3 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/tokenizers/llama3");
        v.push(fuzzed("llama3", Tokenizer::from_hf_dir(&llama3).expect("llama3 tokenizer.json")));
        v
    })
}

// Loaded before fuzzing starts, so that the loading time does not count against the first
// input's timeout.
/// Run once before fuzzing starts.
pub fn init() {
    tokenizers();
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let all = tokenizers();
    let (name, tok, missing) = &all[pick as usize % all.len()];
    let text = String::from_utf8_lossy(rest);
    let kept: Vec<u8> = text.bytes().filter(|&b| !missing[b as usize]).collect();
    let expected = String::from_utf8_lossy(&kept);

    let ids = tok.encode(&text, false).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        ids.iter().all(|&id| (id as usize) < tok.vocab_size()),
        "{name}: id outside the vocabulary of {}: {ids:?}",
        tok.vocab_size()
    );
    assert_eq!(tok.decode(&ids), expected, "{name}: {text:?} as {ids:?}");

    let with = tok.encode(&text, true).unwrap_or_else(|e| panic!("{name}: {e}"));
    let at = (0..=with.len() - ids.len().min(with.len()))
        .find(|&i| with[i..].starts_with(&ids))
        .unwrap_or_else(|| panic!("{name}: {with:?} does not hold {ids:?}"));
    let added = with[..at].iter().chain(&with[at + ids.len()..]);
    assert!(
        added.clone().all(|&id| tok.is_special(id)),
        "{name}: encode(.., true) added ordinary tokens: {with:?} around {ids:?}"
    );
    assert!(with.len() - ids.len() <= 2, "{name}: more than bos and eos added: {with:?}");
}
