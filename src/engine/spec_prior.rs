//! Where `--depth auto` starts: what `mtplx-lite tune` measured on this machine for this model
//! (pass costs by rows, each drafter's acceptance by draft position), in place of the built-in
//! guesses (a prior slope per row, 0.5 at every position). The empty prior is today's start.

use super::draft::MAX_DRAFT_DEPTH;

/// Measured starting points for the cost model and each drafter's running acceptance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecPrior {
    /// Seconds of a one-sequence pass of `r` rows at index `r - 1`; empty: not measured.
    pub pass_secs: Vec<f64>,
    /// Per drafter name (`ngram`, `mtp`): acceptance at each draft position given every earlier
    /// one was accepted; `None` where too few drafts reached the position to say.
    pub accept: Vec<(String, [Option<f64>; MAX_DRAFT_DEPTH])>,
    /// Per drafter name: seconds it took per drafted token.
    pub draft_secs: Vec<(String, f64)>,
}

impl SpecPrior {
    /// The measured acceptance of the drafter named `name`, if any.
    pub fn accept_for(&self, name: &str) -> Option<&[Option<f64>; MAX_DRAFT_DEPTH]> {
        self.accept.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The measured seconds per drafted token of the drafter named `name`, if any.
    pub fn draft_secs_for(&self, name: &str) -> Option<f64> {
        self.draft_secs.iter().find(|(n, _)| n == name).map(|&(_, t)| t)
    }

    /// True when nothing was measured: the engine starts from its built-in guesses.
    pub fn is_empty(&self) -> bool {
        self.pass_secs.is_empty() && self.accept.is_empty() && self.draft_secs.is_empty()
    }
}
