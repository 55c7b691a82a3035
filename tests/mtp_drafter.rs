//! The engine's MTP drafter on the tiny random trunk and head of tests/data/mtp: fed the trunk's
//! hidden rows in the pieces a scheduler produces (prefill chunks, verify passes cut back to the
//! accepted length, a prefix reused from another sequence), it drafts exactly what a head run
//! afresh over the same positions drafts.

use mtplx_lite::engine::draft::auto::AutoDrafter;
use mtplx_lite::engine::draft::mtp::{MtpDrafter, CATCH_UP_ROWS};
use mtplx_lite::engine::draft::ngram::NgramDrafter;
use mtplx_lite::engine::draft::Drafter;
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::mtp::{MtpHead, MtpTrunk};
use mtplx_lite::model::{sha256, LogitsWanted, Model, ModelFiles, SeqBatch};
use std::path::PathBuf;
use std::sync::Arc;

const DEPTH: usize = 3;
const CAPACITY: usize = 64;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mtp").join(name)
}

fn setup() -> (Arc<Llama>, Arc<MtpHead>) {
    let t = Llama::load(&ModelFiles::open(data("trunk.gguf")).unwrap(), 1).unwrap();
    let sha = sha256::file_hex(&data("trunk.gguf")).unwrap();
    let head = MtpHead::load(&data("head.safetensors"), &sha, &t).unwrap();
    (Arc::new(t), Arc::new(head))
}

/// 24 token ids spread over the vocabulary (a fixed linear congruential sequence).
fn tokens(vocab: usize) -> Vec<u32> {
    tokens_n(vocab, 24)
}

fn tokens_n(vocab: usize, n: usize) -> Vec<u32> {
    let mut x: u64 = 12345;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) % vocab as u64) as u32
        })
        .collect()
}

/// What a head started afresh at trunk position `from` drafts after `history` (the trunk holds
/// all of it but the last token).
fn fresh_drafts(t: &Llama, head: &MtpHead, history: &[u32], from: usize) -> Vec<u32> {
    let mut cache = t.new_cache(CAPACITY);
    let len = history.len() - 1;
    let mut batch = [SeqBatch { tokens: &history[..len], cache: &mut cache, logits: LogitsWanted::Last }];
    let hidden = t.forward_hidden(&mut batch).unwrap().hidden.remove(0);
    let h = t.info().hidden;
    let mut head_cache = head.new_cache(CAPACITY, t.kv_format());
    let drafts =
        head.draft_greedy(t, &mut head_cache, &hidden[from * h..], &history[from + 1..], DEPTH).expect("drafting");
    drafts.into_iter().map(|(tok, _)| tok).collect()
}

/// Feeds `tokens` to the trunk at the end of `cache` and returns their hidden rows.
fn feed(t: &Llama, cache: &mut mtplx_lite::model::KvCache, tokens: &[u32]) -> Vec<f32> {
    let mut batch = [SeqBatch { tokens, cache, logits: LogitsWanted::All }];
    t.forward_hidden(&mut batch).unwrap().hidden.remove(0)
}

#[test]
fn drafts_after_chunked_prefill_and_rolled_back_verifies_equal_a_fresh_heads() {
    let (t, head) = setup();
    let all = tokens(t.info().vocab_size);
    let h = t.info().hidden;
    let prompt = &all[..10];
    let mut drafter = MtpDrafter::new(t.clone(), head.clone(), CAPACITY);
    let mut cache = t.new_cache(CAPACITY);
    // Prefill in two chunks; the first token "sampled" after the prompt is the next in `all`.
    let mut history = prompt.to_vec();
    let rows = feed(&t, &mut cache, &prompt[..4]);
    drafter.observe(0, &rows, &history);
    let rows = feed(&t, &mut cache, &prompt[4..]);
    history.push(all[10]);
    drafter.observe(4, &rows, &history);
    let mut out = Vec::new();
    drafter.draft(&history, DEPTH, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 0), "after prefill");

    // Verify [pending, d1, d2, d3]: keep d1, then a correction; the cache keeps pending and d1.
    let before = cache.len();
    let fed = [history[history.len() - 1], out[0], out[1], out[2]];
    let rows = feed(&t, &mut cache, &fed);
    history.extend([out[0], all[12]]);
    cache.truncate(before + 2);
    drafter.observe(before, &rows[..2 * h], &history);
    drafter.draft(&history, DEPTH, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 0), "after a verify with one draft kept");

    // A plain step (no draft): one row.
    let rows = feed(&t, &mut cache, &history[history.len() - 1..]);
    history.push(all[13]);
    drafter.observe(before + 2, &rows, &history);
    drafter.draft(&history, 2, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 0)[..2], "after a plain step, two deep");
}

#[test]
fn a_reused_prefix_starts_the_head_after_it_and_a_gap_starts_it_over() {
    let (t, head) = setup();
    let all = tokens(t.info().vocab_size);
    let mut cache = t.new_cache(CAPACITY);
    // Positions 0..6 came from another sequence's cache: no hidden rows for them.
    feed(&t, &mut cache, &all[..6]);
    let mut drafter = MtpDrafter::new(t.clone(), head.clone(), CAPACITY);
    let mut history = all[..12].to_vec();
    let rows = feed(&t, &mut cache, &all[6..12]);
    history.push(all[12]);
    drafter.observe(6, &rows, &history);
    let mut out = Vec::new();
    drafter.draft(&history, DEPTH, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 6));
    // Rows that do not follow what the head holds (position 20, not 12): it starts over there
    // and drafts nothing until it holds every position up to the pending token.
    drafter.observe(20, &rows[..t.info().hidden], &history);
    drafter.draft(&history, DEPTH, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn steps_that_do_not_draft_run_no_head_pass_until_the_held_rows_reach_the_cap() {
    let (t, head) = setup();
    let all = tokens(t.info().vocab_size);
    let mut drafter = MtpDrafter::new(t.clone(), head.clone(), CAPACITY);
    let mut cache = t.new_cache(CAPACITY);
    let mut history = all[..8].to_vec();
    let rows = feed(&t, &mut cache, &all[..8]);
    history.push(all[8]);
    drafter.observe(0, &rows, &history);
    // Three plain steps: each feeds the pending token at position `p`.
    for p in 8..11 {
        let rows = feed(&t, &mut cache, &history[p..]);
        history.push(all[p + 1]);
        drafter.observe(p, &rows, &history);
    }
    let mut out = vec![7];
    drafter.draft(&history, 0, &mut out);
    assert!(out.is_empty());
    assert_eq!(drafter.head_rows(), 0, "nothing drafted yet: the head ran no row");
    drafter.draft(&history, DEPTH, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 0), "one catch-up pass, then the same drafts");
    assert_eq!(drafter.head_rows(), history.len() - 1);

    // Held rows are bounded: a prompt longer than the cap is caught up while it is fed.
    let long = tokens_n(t.info().vocab_size, CATCH_UP_ROWS + 8);
    let capacity = long.len() + 1;
    let mut drafter = MtpDrafter::new(t.clone(), head, capacity);
    let mut cache = t.new_cache(capacity);
    let mut history = long[..CATCH_UP_ROWS + 4].to_vec();
    let rows = feed(&t, &mut cache, &history[..CATCH_UP_ROWS - 1]);
    drafter.observe(0, &rows, &history);
    assert_eq!(drafter.head_rows(), 0, "below the cap");
    let rows = feed(&t, &mut cache, &history[CATCH_UP_ROWS - 1..CATCH_UP_ROWS + 3]);
    history.push(long[CATCH_UP_ROWS + 4]);
    drafter.observe(CATCH_UP_ROWS - 1, &rows, &history);
    assert_eq!(drafter.head_rows(), CATCH_UP_ROWS + 3, "at the cap every held row whose next token is known ran");
}

#[test]
fn auto_drafts_by_lookup_where_the_text_repeats_and_by_the_head_elsewhere() {
    let (t, head) = setup();
    let all = tokens(t.info().vocab_size);
    let mut auto = AutoDrafter::new(MtpDrafter::new(t.clone(), head.clone(), CAPACITY));
    assert_eq!(auto.sources(), ["ngram", "mtp"]);
    let mut cache = t.new_cache(CAPACITY);
    let mut history = all[..10].to_vec();
    let rows = feed(&t, &mut cache, &history);
    history.push(all[10]);
    auto.observe(0, &rows, &history);
    // No n-gram of the text's end occurred before: the head drafts.
    let mut out = Vec::new();
    assert_eq!(auto.pick(&history), 1);
    auto.draft(&history, DEPTH, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 0));
    // The text now ends with its own first two tokens: lookup continues the earlier text.
    let at = history.len() - 1;
    let rows = feed(&t, &mut cache, &history[at..]);
    history.push(all[0]);
    auto.observe(at, &rows, &history);
    let rows = feed(&t, &mut cache, &history[at + 1..]);
    history.push(all[1]);
    auto.observe(at + 1, &rows, &history);
    assert_eq!(auto.pick(&history), 0);
    auto.draft(&history, DEPTH, &mut out);
    let mut lookup = Vec::new();
    NgramDrafter.draft(&history, DEPTH, &mut lookup);
    assert_eq!((out.as_slice(), lookup.as_slice()), (&all[2..2 + DEPTH], &all[2..2 + DEPTH]));
    // The head kept up meanwhile: asked again where lookup has nothing, it drafts as a fresh one.
    let at = history.len() - 1;
    let rows = feed(&t, &mut cache, &history[at..]);
    history.push(all[20]);
    auto.observe(at, &rows, &history);
    assert_eq!(auto.pick(&history), 1);
    auto.draft(&history, DEPTH, &mut out);
    assert_eq!(out, fresh_drafts(&t, &head, &history, 0));
}
