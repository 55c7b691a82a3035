//! Drafters: cheap guesses of the next few tokens, which one batched pass of the model then
//! verifies (`engine/speculate.rs`). A drafter only proposes; exactness is the verifier's job, so
//! a bad drafter costs speed, never correctness.

pub mod auto;
pub mod mtp;
pub mod ngram;

use crate::model::mtp::MtpHead;
use crate::model::Model;
use std::fmt;
use std::sync::Arc;

/// Deepest draft a step may verify: beyond it the verify pass costs more than the drafts win,
/// even at full acceptance, on the machines measured (docs/speculative.md).
pub const MAX_DRAFT_DEPTH: usize = 8;

/// Which drafter a server (`--draft`) or a request (`"mtplx": {"draft": ...}`) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftMode {
    /// Plain decoding: one token per pass.
    None,
    /// Prompt lookup: continue the latest earlier occurrence of the text's last few tokens.
    Ngram,
    /// The model's multi-token-prediction head.
    Mtp,
    /// The MTP head where one is loaded, and n-gram lookup wherever the text repeats itself (it
    /// then has a draft); n-gram lookup alone without a head. Each keeps its own acceptance, so
    /// the depth chosen by cost drops to 0 for a source that does not pay (docs/speculative.md).
    Auto,
}

impl DraftMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DraftMode::None => "none",
            DraftMode::Ngram => "ngram",
            DraftMode::Mtp => "mtp",
            DraftMode::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Result<DraftMode, DraftError> {
        match s {
            "none" => Ok(DraftMode::None),
            "ngram" => Ok(DraftMode::Ngram),
            "auto" => Ok(DraftMode::Auto),
            "mtp" => Ok(DraftMode::Mtp),
            other => Err(DraftError::UnknownMode(other.to_string())),
        }
    }
}

/// How many tokens a step drafts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Up to this many (1..=[`MAX_DRAFT_DEPTH`]) whenever the drafter has them.
    Fixed(usize),
    /// Chosen each step from the measured cost of a pass and the request's running acceptance.
    Auto,
}

impl Depth {
    pub fn parse(s: &str) -> Result<Depth, DraftError> {
        if s == "auto" {
            return Ok(Depth::Auto);
        }
        match s.parse::<usize>() {
            Ok(n) if (1..=MAX_DRAFT_DEPTH).contains(&n) => Ok(Depth::Fixed(n)),
            _ => Err(DraftError::BadDepth(s.to_string())),
        }
    }
}

/// The server's drafting settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftConfig {
    pub mode: DraftMode,
    pub depth: Depth,
}

impl Default for DraftConfig {
    fn default() -> Self {
        DraftConfig { mode: DraftMode::Auto, depth: Depth::Auto }
    }
}

/// What a request may change: drafting off, another drafter, or a lower depth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraftRequest {
    pub mode: Option<DraftMode>,
    /// At most this many draft tokens per step (1..=[`MAX_DRAFT_DEPTH`]).
    pub max_depth: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraftError {
    UnknownMode(String),
    BadDepth(String),
    NoMtpHead,
}

impl fmt::Display for DraftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DraftError::UnknownMode(m) => write!(f, "unknown drafter '{m}': expected none, ngram, mtp or auto"),
            DraftError::BadDepth(d) => {
                write!(f, "draft depth '{d}' must be auto or an integer from 1 to {MAX_DRAFT_DEPTH}")
            }
            DraftError::NoMtpHead => write!(f, "drafter 'mtp' needs an MTP head, and this model has none loaded"),
        }
    }
}

impl std::error::Error for DraftError {}

/// A drafter proposes tokens to follow a sequence's text so far.
pub trait Drafter: Send {
    /// The name records and metrics show.
    fn name(&self) -> &'static str;

    /// The drafters this one chooses between (its own name alone for a single drafter): the
    /// sequence learns each one's acceptance and cost apart, under these names.
    fn sources(&self) -> &'static [&'static str];

    /// Which of [`Drafter::sources`] drafts next after `history` (asked before the depth is
    /// chosen, since the depth depends on the source).
    fn pick(&mut self, _history: &[u32]) -> usize {
        0
    }

    /// Writes at most `max` tokens likely to follow `history` into `out` (cleared first). An
    /// empty draft means "no guess": the step decodes plainly. `history` is the prompt and every
    /// emitted token; the model's cache holds all of it but the last token.
    fn draft(&mut self, history: &[u32], max: usize, out: &mut Vec<u32>);

    /// Whether the steps that feed this sequence must return the model's hidden rows.
    fn needs_hidden(&self) -> bool {
        false
    }

    /// The model's last-layer rows of positions `first..`, one per position its cache kept after
    /// a step (`history` as in [`Drafter::draft`]).
    fn observe(&mut self, _first: usize, _hidden: &[f32], _history: &[u32]) {}
}

/// A loaded MTP head and what a drafter over it needs.
#[derive(Clone)]
pub struct MtpSource {
    pub model: Arc<dyn Model>,
    pub head: Arc<MtpHead>,
    /// Longest sequence the head's cache must hold: the engine's context.
    pub capacity: usize,
}

impl MtpSource {
    fn drafter(&self) -> mtp::MtpDrafter {
        mtp::MtpDrafter::new(self.model.clone(), self.head.clone(), self.capacity)
    }
}

/// The drafter a request gets, or `None` for plain decoding. `mtp` without a head (refused
/// before a job gets here) decodes plainly.
pub fn drafter_for(mode: DraftMode, head: Option<&MtpSource>) -> Option<Box<dyn Drafter>> {
    match (mode, head) {
        (DraftMode::None, _) | (DraftMode::Mtp, None) => None,
        (DraftMode::Ngram | DraftMode::Auto, None) | (DraftMode::Ngram, Some(_)) => Some(Box::new(ngram::NgramDrafter)),
        (DraftMode::Auto, Some(h)) => Some(Box::new(auto::AutoDrafter::new(h.drafter()))),
        (DraftMode::Mtp, Some(h)) => Some(Box::new(h.drafter())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_depths_parse_and_refusals_name_the_bound() {
        assert_eq!(DraftMode::parse("ngram"), Ok(DraftMode::Ngram));
        assert_eq!(DraftMode::parse("none"), Ok(DraftMode::None));
        assert_eq!(DraftMode::parse("mtp"), Ok(DraftMode::Mtp));
        assert!(DraftMode::parse("eagle").unwrap_err().to_string().contains("'eagle'"));
        assert_eq!(Depth::parse("auto"), Ok(Depth::Auto));
        assert_eq!(Depth::parse("3"), Ok(Depth::Fixed(3)));
        for bad in ["0", "9", "-1", "two"] {
            assert!(Depth::parse(bad).unwrap_err().to_string().contains("from 1 to 8"), "{bad}");
        }
    }
}
