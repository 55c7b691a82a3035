//! `--draft auto` with an MTP head loaded: prompt lookup where the text repeats itself, the head
//! everywhere else.
//!
//! Where the sequence's last tokens occurred before, the n-gram drafter continues that earlier
//! text: in editing and quoting such drafts are right for many tokens on end, more than a head
//! that guesses one position at a time. Everywhere else it has no draft, and the head drafts.
//! The two are learned apart (`engine/speculate.rs` keeps an acceptance per source), so each
//! drafts only as deep as its own record pays, down to not at all.

use super::mtp::MtpDrafter;
use super::ngram::NgramDrafter;
use super::{Drafter, MAX_DRAFT_DEPTH};

/// Index of each source in [`AutoDrafter`]'s `sources()`.
const NGRAM: usize = 0;
const MTP: usize = 1;

pub struct AutoDrafter {
    ngram: NgramDrafter,
    mtp: MtpDrafter,
    /// The source [`Drafter::pick`] chose for the next draft.
    from: usize,
    /// The lookup's draft found by `pick`, and the length of the history it was found for.
    lookup: Vec<u32>,
    picked_at: usize,
}

impl AutoDrafter {
    pub fn new(mtp: MtpDrafter) -> AutoDrafter {
        AutoDrafter { ngram: NgramDrafter, mtp, from: NGRAM, lookup: Vec::new(), picked_at: usize::MAX }
    }
}

impl Drafter for AutoDrafter {
    fn name(&self) -> &'static str {
        "ngram+mtp"
    }

    fn sources(&self) -> &'static [&'static str] {
        &["ngram", "mtp"]
    }

    fn pick(&mut self, history: &[u32]) -> usize {
        // A lookup is a few microseconds; the head's draft is a forward pass per token.
        self.ngram.draft(history, MAX_DRAFT_DEPTH, &mut self.lookup);
        self.picked_at = history.len();
        self.from = if self.lookup.is_empty() { MTP } else { NGRAM };
        self.from
    }

    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>) {
        match self.from {
            // The lookup `pick` made for this history: its first `max` tokens are the draft.
            NGRAM if self.picked_at == history.len() => {
                out.clear();
                out.extend_from_slice(&self.lookup[..max.min(self.lookup.len())]);
            }
            NGRAM => self.ngram.draft(history, max, out),
            _ => self.mtp.draft(history, max, out),
        }
    }

    fn needs_hidden(&self) -> bool {
        true
    }

    fn observe(&mut self, first: usize, hidden: &[f32], history: &[u32]) {
        // The head holds every row whichever source drafts, so that it can draft the next step.
        self.mtp.observe(first, hidden, history);
    }
}
