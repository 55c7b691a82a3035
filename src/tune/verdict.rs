//! The arithmetic of `tune`'s table: acceptance by draft position from counts, the expected
//! tokens of a verify pass at depth d, and its speed-up over plain decoding given what a pass of
//! d + 1 rows and d drafted tokens cost against a one-row pass.

use crate::engine::draft::MAX_DRAFT_DEPTH;
use std::fmt;

/// Fewest verifications at a draft position for its acceptance to count as measured: below it
/// one lucky or unlucky draft would decide the figure.
pub const MIN_VERIFIED: u64 = 4;

/// Acceptance at each draft position given every earlier one was accepted; `None`: not measured.
pub type Accept = [Option<f64>; MAX_DRAFT_DEPTH];

/// Acceptance by position from counts of verified and accepted drafts at each position.
pub fn acceptance(verified: &[u64], accepted: &[u64]) -> Accept {
    let mut a = [None; MAX_DRAFT_DEPTH];
    for (j, slot) in a.iter_mut().enumerate() {
        let n = verified.get(j).copied().unwrap_or(0);
        if n >= MIN_VERIFIED {
            *slot = Some(accepted.get(j).copied().unwrap_or(0).min(n) as f64 / n as f64);
        }
    }
    a
}

/// The mean over classes at each position, of the classes that measured it: every class
/// weighs the same, however many drafts it made.
pub fn mean(per_class: &[Accept]) -> Accept {
    let mut a = [None; MAX_DRAFT_DEPTH];
    for (j, slot) in a.iter_mut().enumerate() {
        let got: Vec<f64> = per_class.iter().filter_map(|c| c[j]).collect();
        if !got.is_empty() {
            *slot = Some(got.iter().sum::<f64>() / got.len() as f64);
        }
    }
    a
}

/// The acceptance a depth is planned with at each position, by the engine's rule: measured,
/// else as good as the deepest measured position before it, else 0 (never seen to draft).
pub fn planned(a: &Accept) -> [f64; MAX_DRAFT_DEPTH] {
    let mut last = 0.0;
    a.map(|x| {
        last = x.unwrap_or(last);
        last
    })
}

/// Expected tokens of one verify pass at depth `d`: 1 + a1 + a1·a2 + … + a1·…·ad.
pub fn expected_tokens(a: &Accept, d: usize) -> f64 {
    let (mut reach, mut sum) = (1.0, 1.0);
    for p in planned(a).iter().take(d) {
        reach *= p;
        sum += reach;
    }
    sum
}

/// Costs against a one-row pass.
#[derive(Clone, Debug, PartialEq)]
pub struct RelCost {
    /// A pass of `r` rows over a pass of 1 row, at index `r - 1`.
    pub pass: Vec<f64>,
    /// The drafter's own time per drafted token over a pass of 1 row (an MTP head's forward;
    /// about 0 for n-gram lookup).
    pub draft_per_token: f64,
}

impl RelCost {
    /// From seconds per pass (index `r - 1`) and the drafter's seconds per drafted token.
    pub fn from_secs(pass_secs: &[f64], draft_secs_per_token: f64) -> RelCost {
        let one = pass_secs.first().copied().unwrap_or(1.0);
        RelCost { pass: pass_secs.iter().map(|t| t / one).collect(), draft_per_token: draft_secs_per_token / one }
    }

    /// A pass of `d + 1` rows against a pass of 1 row (the last measured ratio past the end).
    pub fn pass_ratio(&self, d: usize) -> f64 {
        self.pass.get(d).or(self.pass.last()).copied().unwrap_or(1.0)
    }

    /// A round of depth `d`: the verify pass plus drafting `d` tokens, against a plain step.
    pub fn round(&self, d: usize) -> f64 {
        self.pass_ratio(d) + d as f64 * self.draft_per_token
    }
}

/// Expected decode speed of depth `d` over plain decoding (one token per one-row pass).
pub fn speedup(a: &Accept, cost: &RelCost, d: usize) -> f64 {
    expected_tokens(a, d) / cost.round(d)
}

/// The depth that pays most, or that none does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Drafting `depth` tokens is expected to decode `speedup` times as fast as plain decoding.
    Draft { depth: usize, speedup: f64 },
    /// No depth is above 1: the best one, for the record.
    Plain { best_depth: usize, speedup: f64 },
}

pub fn verdict(a: &Accept, cost: &RelCost) -> Verdict {
    let (depth, s) = (1..=MAX_DRAFT_DEPTH).map(|d| (d, speedup(a, cost, d))).fold((1, f64::NEG_INFINITY), |b, x| {
        if x.1 > b.1 {
            x
        } else {
            b
        }
    });
    if s > 1.0 {
        Verdict::Draft { depth, speedup: s }
    } else {
        Verdict::Plain { best_depth: depth, speedup: s }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Draft { depth, speedup } => write!(f, "best depth {depth}, expected {speedup:.2}x plain decoding"),
            Verdict::Plain { best_depth, speedup } => {
                write!(f, "no depth beats plain decoding here (the best, depth {best_depth}, expects {speedup:.2}x)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &[f64]) -> Accept {
        let mut a = [None; MAX_DRAFT_DEPTH];
        for (j, &x) in v.iter().enumerate() {
            a[j] = Some(x);
        }
        a
    }

    #[test]
    fn acceptance_needs_enough_verifications_and_classes_weigh_the_same() {
        let a = acceptance(&[10, 4, 3], &[5, 1, 3]);
        assert_eq!(a[..4], [Some(0.5), Some(0.25), None, None]);
        let m = mean(&[accept(&[0.5, 0.25]), accept(&[1.0]), [None; MAX_DRAFT_DEPTH]]);
        assert_eq!(m[..3], [Some(0.75), Some(0.25), None]);
    }

    #[test]
    fn expected_tokens_multiply_along_the_draft_and_carry_the_deepest_measured() {
        let a = accept(&[0.5, 0.5]);
        assert!((expected_tokens(&a, 0) - 1.0).abs() < 1e-12);
        assert!((expected_tokens(&a, 2) - 1.75).abs() < 1e-12);
        // Position 3 unmeasured: planned as 0.5 like position 2, as the engine plans it.
        assert!((expected_tokens(&a, 3) - 1.875).abs() < 1e-12);
        // Never measured at all: no drafted token is counted on.
        assert!((expected_tokens(&[None; MAX_DRAFT_DEPTH], 4) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_verdict_weighs_expected_tokens_against_the_measured_round() {
        // 10 ms a row-1 pass, +2 ms a row: depth d costs 1 + 0.2 d.
        let secs: Vec<f64> = (0..9).map(|r| 0.010 + 0.002 * r as f64).collect();
        let c = RelCost::from_secs(&secs, 0.0);
        assert!((c.round(2) - 1.4).abs() < 1e-12);
        // a = 0.8 everywhere: depth 1 gives 1.8 / 1.2 = 1.5x; depth 3 gives 2.952 / 1.6 = 1.845x.
        let a = accept(&[0.8; MAX_DRAFT_DEPTH]);
        assert!((speedup(&a, &c, 1) - 1.5).abs() < 1e-12);
        assert!((speedup(&a, &c, 3) - 2.952 / 1.6).abs() < 1e-12);
        let Verdict::Draft { depth, speedup: s } = verdict(&a, &c) else { panic!("0.8 drafts") };
        assert!((3..=5).contains(&depth) && s > 1.8, "{depth} {s}");
        // a = 0.15: depth 1 gives 1.15 / 1.2 < 1, and deeper is worse: plain wins.
        let low = verdict(&accept(&[0.15]), &c);
        assert!(matches!(low, Verdict::Plain { best_depth: 1, speedup } if (speedup - 1.15 / 1.2).abs() < 1e-12));
        assert!(low.to_string().starts_with("no depth beats plain decoding here"));
        // The drafter's own time counts: 0.8 acceptance with a drafted token costing 0.5 of a
        // pass: depth 1 is 1.8 / 1.7.
        let slow = RelCost::from_secs(&secs, 0.005);
        assert!((speedup(&a, &slow, 1) - 1.8 / 1.7).abs() < 1e-12);
    }
}
