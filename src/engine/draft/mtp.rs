//! The MTP drafter: the model's own multi-token-prediction head (`model/mtp`), chained greedily.
//!
//! The head reads the trunk's hidden state at each position, so the drafter is fed every hidden
//! row the trunk keeps ([`Drafter::observe`]) and holds them until it drafts: then it catches its
//! own one-layer cache up with all of them in one pass (or sooner, every [`CATCH_UP_ROWS`] rows).
//! A step that does not draft (depth 0, chosen when the head does not pay) thus costs no head
//! pass, and a batched catch-up costs little more than one row. Drafting starts from the output
//! of the last caught-up row (the draft of the token after the pending one) and chains: each
//! draft's output state and token give the next. The chain's cache entries are dropped right
//! after drafting, because verified positions come back as real trunk rows.
//!
//! The drafts are the head's top-1 over its sub-vocabulary, proposed as point masses (q = 1 on the
//! drafted token). Rejection sampling with such a q keeps the output exact at every temperature.

use super::Drafter;
use crate::model::mtp::{MtpHead, MtpStep};
use crate::model::{KvCache, LogitsWanted, Model};
use std::sync::Arc;

/// Hidden rows held before the head catches up without being asked to draft, so that what is
/// held stays small (about 150 KB for the demo model) whatever the context.
pub const CATCH_UP_ROWS: usize = 64;

pub struct MtpDrafter {
    model: Arc<dyn Model>,
    head: Arc<MtpHead>,
    cache: KvCache,
    /// Trunk position of the head's row 0: where this sequence's first fed row was (a prefix
    /// reused from another sequence's cache has no hidden rows, so the head starts after it).
    start: Option<usize>,
    /// Trunk hidden rows not yet fed to the head, from position `start + cache.len()`.
    pending: Vec<f32>,
    /// The head's output at its last row: the draft logits of the token after the pending one.
    last: Option<MtpStep>,
}

impl MtpDrafter {
    /// A drafter for one sequence of at most `capacity` positions.
    pub fn new(model: Arc<dyn Model>, head: Arc<MtpHead>, capacity: usize) -> MtpDrafter {
        let cache = head.new_cache(capacity + super::MAX_DRAFT_DEPTH, model.kv_format());
        MtpDrafter { model, head, cache, start: None, pending: Vec::new(), last: None }
    }

    /// Positions the head's own cache holds (rows it has run), for tests.
    pub fn head_rows(&self) -> usize {
        self.cache.len()
    }

    /// Forgets everything; the next observed row starts the head afresh.
    fn reset(&mut self) {
        self.start = None;
        self.cache.truncate(0);
        self.pending.clear();
        self.last = None;
    }

    /// Feeds the head every pending row whose next token `history` already holds.
    fn catch_up(&mut self, history: &[u32]) {
        let (h, Some(start)) = (self.head.hidden_size(), self.start) else { return };
        let at = start + self.cache.len();
        let known = history.len().saturating_sub(at + 1).min(self.pending.len() / h);
        if known == 0 {
            return;
        }
        let Some(trunk) = self.model.mtp_trunk() else { return self.reset() };
        let tokens = &history[at + 1..at + 1 + known];
        match self.head.forward(trunk, &mut self.cache, &self.pending[..known * h], tokens, LogitsWanted::Last) {
            Ok(step) => {
                self.pending.drain(..known * h);
                self.last = Some(step);
            }
            // A full head cache (a context longer than it was sized for) ends drafting for this
            // sequence; plain decoding goes on.
            Err(_) => self.reset(),
        }
    }
}

impl Drafter for MtpDrafter {
    fn name(&self) -> &'static str {
        "mtp"
    }

    fn sources(&self) -> &'static [&'static str] {
        &["mtp"]
    }

    fn needs_hidden(&self) -> bool {
        true
    }

    fn observe(&mut self, first: usize, hidden: &[f32], history: &[u32]) {
        let h = self.head.hidden_size();
        let next = self.start.map(|s| s + self.cache.len() + self.pending.len() / h);
        if next != Some(first) {
            // Not the continuation of what the head holds (the first rows, or a gap): start over.
            self.reset();
            self.start = Some(first);
        }
        self.pending.extend_from_slice(hidden);
        if self.pending.len() / h >= CATCH_UP_ROWS {
            self.catch_up(history);
        }
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) {
        out.clear();
        let Some(start) = self.start else { return };
        if max == 0 {
            return;
        }
        self.catch_up(history);
        // The trunk holds every position but the pending token's; the head must hold them too.
        let trunk_len = history.len().saturating_sub(1);
        if start + self.cache.len() != trunk_len || !self.pending.is_empty() {
            return;
        }
        let (Some(trunk), Some(last)) = (self.model.mtp_trunk(), self.last.as_ref()) else { return };
        let aligned = self.cache.len();
        // A full head cache ends the chain early in `chain`'s error: no draft this step.
        if let Ok(drafts) = self.head.chain(trunk, &mut self.cache, last, max) {
            out.extend(drafts.into_iter().map(|(token, _)| token));
        }
        self.cache.truncate(aligned);
    }
}
