//! Speculative decoding inside a scheduler step: how deep each sequence drafts, and how the
//! rows of a verify pass become accepted tokens.
//!
//! A decoding sequence normally feeds its last token and gets one row of logits. With a draft
//! `d1..dk` it feeds `[last, d1..dk]` and gets k+1 rows: row j is the model's distribution after
//! `d1..dj`. Row 0 verifies d1, row 1 verifies d2, and so on; the first rejection ends the round
//! with a token drawn from the residual distribution, and a fully accepted draft earns a bonus
//! token from row k. The cache then keeps only the positions of tokens that were emitted.
//!
//! Depth is chosen per step to maximise expected tokens per second of the whole step: the
//! expected accepted length comes from the request's running acceptance by draft position, and
//! the cost of a pass of r rows from the passes this decode thread has timed (`CostModel`), so a
//! cheap multi-row pass makes deep drafts pay, and a busy batch turns drafting off.

use super::draft::{Depth, Drafter, MAX_DRAFT_DEPTH};
use super::job::SpecCounts;
use super::spec_prior::SpecPrior;
use std::time::Duration;

/// Acceptance assumed at a draft position before the request has verified any there: high
/// enough that a cheap verify is tried, low enough that an expensive one is not.
const PRIOR_ACCEPT: f64 = 0.5;
/// Weight of the latest verification in the running acceptance once a request is past its first
/// rounds (an exponential moving average over about ten rounds, so a request that changes
/// character is followed quickly).
const ACCEPT_EWMA: f64 = 0.1;
/// How many verifications the starting acceptance (built in or measured by `tune`) is worth.
/// Until the moving average takes over, a position's acceptance is the mean of its verifications
/// with the start counted this many times: a chat request that starts from a profile pooled
/// over chat, code and editing (0.6 at the first position) is at 0.3 after one rejection and
/// 0.2 after two, where the moving average alone would take seven rounds of costly deep drafts.
const PRIOR_WEIGHT: f64 = 1.0;
/// Weight of the latest timing of a pass of a given row count.
const COST_EWMA: f64 = 0.2;
/// Rows the cost model tracks one by one; larger passes are prefill chunks, not verify rounds.
const COST_ROWS: usize = 64;
/// Extra cost per row relative to a one-row pass, assumed until measured (a 4-row pass costs
/// about 1.9x a 1-row pass on the CPU backend: docs/performance.md).
const PRIOR_ROW_COST: f64 = 0.3;
/// Every this many steps at depth 0 by cost, one round drafts a single token anyway, so that a
/// request whose text turned repetitive (or a machine that got faster) is noticed.
const EXPLORE_EVERY: u32 = 16;

/// The measured time of forward passes by the number of rows they fed.
pub struct CostModel {
    secs: Vec<Option<f64>>,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel { secs: vec![None; COST_ROWS + 1] }
    }
}

impl CostModel {
    /// A cost model that starts from the pass times `tune` measured: until the decode thread
    /// has timed a row count itself, the measured time stands for it (not the prior slope).
    pub fn from_prior(prior: &SpecPrior) -> CostModel {
        let mut c = CostModel::default();
        for (r, &t) in prior.pass_secs.iter().enumerate().take(COST_ROWS) {
            if t.is_finite() && t > 0.0 {
                c.secs[r + 1] = Some(t);
            }
        }
        c
    }

    pub fn observe(&mut self, rows: usize, took: Duration) {
        if let Some(slot) = self.secs.get_mut(rows) {
            let t = took.as_secs_f64();
            *slot = Some(slot.map_or(t, |old| old + COST_EWMA * (t - old)));
        }
    }

    /// The expected time of a pass of `rows` rows: measured, interpolated between the nearest
    /// measured counts, or extrapolated with the prior slope.
    pub fn cost(&self, rows: usize) -> f64 {
        let rows = rows.clamp(1, COST_ROWS);
        if let Some(t) = self.secs[rows] {
            return t;
        }
        let below = (1..rows).rev().find_map(|r| self.secs[r].map(|t| (r, t)));
        let above = (rows + 1..=COST_ROWS).find_map(|r| self.secs[r].map(|t| (r, t)));
        match (below, above) {
            (Some((r0, t0)), Some((r1, t1))) => t0 + (t1 - t0) * (rows - r0) as f64 / (r1 - r0) as f64,
            (Some((r0, t0)), None) => {
                // Past the largest measured count, the slope measured below it, if any.
                let slope = (1..r0).find_map(|r| self.secs[r].map(|t| (t0 - t) / (r0 - r) as f64));
                t0 + slope.unwrap_or(t0 * PRIOR_ROW_COST).max(0.0) * (rows - r0) as f64
            }
            (None, Some((r1, t1))) => t1 / (1.0 + PRIOR_ROW_COST * (r1 - rows) as f64),
            (None, None) => 1.0 + PRIOR_ROW_COST * (rows - 1) as f64,
        }
    }
}

/// What a sequence has learned of one drafting source (a drafter, or one of the drafters an
/// `auto` drafter chooses between).
#[derive(Clone)]
struct Learned {
    /// P(draft position j accepted | positions before it accepted), running.
    accept: [f64; MAX_DRAFT_DEPTH],
    /// Whether position j was ever verified (or measured by `tune`); an unverified position is
    /// assumed to do as well as the deepest verified one before it (drafts that hold up tend to
    /// go on holding up).
    seen: [bool; MAX_DRAFT_DEPTH],
    /// Verifications of position j so far in this request.
    verified: [u32; MAX_DRAFT_DEPTH],
    /// Steps since this source last drafted while it was the one asked.
    idle_steps: u32,
    /// Running seconds the source takes per drafted token (a head's forward; about 0 for n-gram
    /// lookup), weighed beside the verify pass's cost.
    draft_cost: f64,
}

impl Learned {
    fn new() -> Learned {
        Learned {
            accept: [PRIOR_ACCEPT; MAX_DRAFT_DEPTH],
            seen: [false; MAX_DRAFT_DEPTH],
            verified: [0; MAX_DRAFT_DEPTH],
            idle_steps: 0,
            draft_cost: 0.0,
        }
    }

    /// Expected tokens a round of depth `k` yields: the bonus-or-correction token, plus each
    /// draft position reached and accepted.
    fn expected_tokens(&self, k: usize) -> f64 {
        let (mut reach, mut sum, mut last) = (1.0, 1.0, PRIOR_ACCEPT);
        for j in 0..k {
            if self.seen[j] {
                last = self.accept[j];
            }
            reach *= last;
            sum += reach;
        }
        sum
    }
}

/// One sequence's speculation: its drafter, what it has learned, and what it reports.
pub struct SpecState {
    pub drafter: Box<dyn Drafter>,
    pub depth: Depth,
    /// One per source of the drafter ([`Drafter::sources`]).
    learned: Vec<Learned>,
    /// The source of the current step's draft.
    source: usize,
    /// The draft of the current step (empty: plain decoding this step).
    pub draft: Vec<u32>,
    pub stats: SpecCounts,
}

impl SpecState {
    pub fn new(drafter: Box<dyn Drafter>, depth: Depth) -> SpecState {
        let learned = vec![Learned::new(); drafter.sources().len().max(1)];
        SpecState { drafter, depth, learned, source: 0, draft: Vec::new(), stats: SpecCounts::default() }
    }

    /// Starts each source's running acceptance and drafting cost from what `tune` measured for
    /// it (`None` positions, and sources it did not measure, keep the built-in rule: 0.5, and a
    /// cost learned from the first draft).
    pub fn with_prior(mut self, prior: &SpecPrior) -> SpecState {
        for (l, name) in self.learned.iter_mut().zip(self.drafter.sources()) {
            if let Some(t) = prior.draft_secs_for(name).filter(|t| t.is_finite() && *t >= 0.0) {
                l.draft_cost = t;
            }
            for (j, a) in prior.accept_for(name).into_iter().flatten().enumerate() {
                if let Some(a) = a.filter(|a| (0.0..=1.0).contains(a)) {
                    l.accept[j] = a;
                    l.seen[j] = true;
                }
            }
        }
        self
    }

    /// Asks the drafter which of its sources drafts after `history`: the depth is then chosen
    /// from that source's record.
    pub fn pick(&mut self, history: &[u32]) {
        self.source = self.drafter.pick(history).min(self.learned.len() - 1);
    }

    /// The depth of this step's draft, at most `cap`, given a pass that would otherwise feed
    /// `rows` rows and yield `tokens` tokens for the other sequences.
    pub fn choose_depth(&mut self, cap: usize, rows: usize, tokens: usize, costs: &CostModel) -> usize {
        let cap = cap.min(MAX_DRAFT_DEPTH);
        let l = &mut self.learned[self.source];
        let k = match self.depth {
            Depth::Fixed(n) => n.min(cap),
            Depth::Auto => {
                let rate = |k: usize| {
                    (tokens as f64 + l.expected_tokens(k)) / (costs.cost(rows + 1 + k) + k as f64 * l.draft_cost)
                };
                let best = (0..=cap).fold(0, |b, k| if rate(k) > rate(b) { k } else { b });
                if best == 0 && cap > 0 && l.idle_steps >= EXPLORE_EVERY {
                    1
                } else {
                    best
                }
            }
        };
        l.idle_steps = if k == 0 { l.idle_steps + 1 } else { 0 };
        k
    }

    /// Records that drafting `n` tokens took `took`.
    pub fn drafted(&mut self, took: Duration, n: usize) {
        self.stats.draft_time += took;
        if n > 0 {
            let per_token = took.as_secs_f64() / n as f64;
            let l = &mut self.learned[self.source];
            l.draft_cost += COST_EWMA * (per_token - l.draft_cost);
        }
    }

    /// Records that position `j` of the current draft was verified, and whether it was accepted.
    pub fn learn(&mut self, j: usize, accepted: bool) {
        let l = &mut self.learned[self.source];
        if !l.seen[j] {
            // Start from the prior this position was planned with, not from 0.5.
            l.accept[j] = (0..j).rev().find(|&i| l.seen[i]).map_or(PRIOR_ACCEPT, |i| l.accept[i]);
            l.seen[j] = true;
        }
        l.verified[j] += 1;
        let weight = (1.0 / (PRIOR_WEIGHT + l.verified[j] as f64)).max(ACCEPT_EWMA);
        l.accept[j] += weight * (accepted as u32 as f64 - l.accept[j]);
        grow(&mut self.stats.drafted_by_depth, j);
        self.stats.drafted_by_depth[j] += 1;
        if accepted {
            grow(&mut self.stats.accepted_by_depth, j);
            self.stats.accepted_by_depth[j] += 1;
        }
    }
}

fn grow(v: &mut Vec<u64>, j: usize) {
    if v.len() <= j {
        v.resize(j + 1, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::draft::ngram::NgramDrafter;

    fn state(depth: Depth) -> SpecState {
        SpecState::new(Box::new(NgramDrafter), depth)
    }

    fn ngram_prior(accept: [Option<f64>; MAX_DRAFT_DEPTH]) -> SpecPrior {
        SpecPrior { accept: vec![("ngram".into(), accept)], ..Default::default() }
    }

    /// A drafter of two sources that drafts from the one its field names.
    struct TwoSources(usize);

    impl Drafter for TwoSources {
        fn name(&self) -> &'static str {
            "a+b"
        }
        fn sources(&self) -> &'static [&'static str] {
            &["a", "b"]
        }
        fn pick(&mut self, _history: &[u32]) -> usize {
            self.0
        }
        fn draft(&mut self, _history: &[u32], max: usize, out: &mut Vec<u32>) {
            out.clear();
            out.resize(max, 1);
        }
    }

    fn costs(per_row: f64) -> CostModel {
        let mut c = CostModel::default();
        for r in 1..=12 {
            c.observe(r, Duration::from_secs_f64(0.010 * (1.0 + per_row * (r - 1) as f64)));
        }
        c
    }

    #[test]
    fn cost_model_interpolates_and_extrapolates() {
        let mut c = CostModel::default();
        c.observe(1, Duration::from_millis(10));
        c.observe(5, Duration::from_millis(30));
        assert!((c.cost(3) - 0.020).abs() < 1e-9);
        // Past the largest measured count, the measured slope (5 ms per row) goes on.
        assert!((c.cost(7) - 0.040).abs() < 1e-9);
        let mut lone = CostModel::default();
        lone.observe(2, Duration::from_millis(10));
        assert!((lone.cost(3) - 0.010 * (1.0 + PRIOR_ROW_COST)).abs() < 1e-9);
        // The running average follows new timings.
        c.observe(1, Duration::from_millis(20));
        assert!((c.cost(1) - 0.012).abs() < 1e-9);
    }

    #[test]
    fn auto_depth_drafts_deep_when_rows_are_cheap_and_acceptance_high() {
        let mut s = state(Depth::Auto);
        for _ in 0..60 {
            for j in 0..MAX_DRAFT_DEPTH {
                s.learn(j, true);
            }
        }
        assert!(s.choose_depth(8, 0, 0, &costs(0.05)) >= 6);
        // The same acceptance, but every row costs as much as a pass: plain decoding wins.
        assert_eq!(s.choose_depth(8, 0, 0, &costs(1.0)), 0);
    }

    #[test]
    fn auto_depth_turns_off_when_drafts_are_rejected_and_when_the_batch_is_busy() {
        let mut s = state(Depth::Auto);
        for _ in 0..60 {
            s.learn(0, false);
        }
        assert_eq!(s.choose_depth(8, 0, 0, &costs(0.1)), 0);
        let mut good = state(Depth::Auto);
        for _ in 0..60 {
            good.learn(0, true);
            good.learn(1, false);
        }
        assert_eq!(good.choose_depth(8, 0, 0, &costs(0.1)), 1);
        // Rows are nearly free up to 4 (memory-bound), then each costs a full pass (compute-
        // bound): alone, a draft pays; beside 8 other streams, the same draft does not.
        let mut busy = CostModel::default();
        for r in 1..=12 {
            let t = if r <= 4 { 1.0 + 0.1 * (r - 1) as f64 } else { 1.3 + (r - 4) as f64 };
            busy.observe(r, Duration::from_secs_f64(0.010 * t));
        }
        assert_eq!(good.choose_depth(8, 0, 0, &busy), 1);
        assert_eq!(good.choose_depth(8, 8, 8, &busy), 0);
    }

    #[test]
    fn auto_depth_explores_after_a_run_of_plain_steps_and_fixed_depth_obeys_the_cap() {
        let mut s = state(Depth::Auto);
        for _ in 0..60 {
            s.learn(0, false);
        }
        let picks: Vec<usize> = (0..=EXPLORE_EVERY).map(|_| s.choose_depth(8, 0, 0, &costs(0.1))).collect();
        assert_eq!(picks.iter().filter(|&&k| k == 1).count(), 1, "{picks:?}");
        assert_eq!(picks[EXPLORE_EVERY as usize], 1);
        let mut f = state(Depth::Fixed(4));
        assert_eq!(f.choose_depth(8, 0, 0, &costs(0.1)), 4);
        assert_eq!(f.choose_depth(2, 0, 0, &costs(0.1)), 2);
    }

    #[test]
    fn positions_never_reached_are_assumed_as_good_as_the_deepest_one_verified() {
        let mut s = state(Depth::Auto);
        for _ in 0..60 {
            s.learn(0, true);
        }
        // Only position 0 was ever verified, always kept: cheap rows make deeper drafts worth
        // trying, where a prior of 0.5 for position 1 onwards would stop at depth 1.
        assert!(s.choose_depth(8, 0, 0, &costs(0.1)) >= 4);
    }

    #[test]
    fn a_measured_prior_turns_drafting_off_where_the_built_in_one_would_draft() {
        // Cheap rows: with 0.5 assumed at every position, drafting pays.
        assert!(state(Depth::Auto).choose_depth(8, 0, 0, &costs(0.1)) >= 1);
        // tune measured this drafter at 0.05: the same rows no longer pay for a draft.
        let low = [Some(0.05); MAX_DRAFT_DEPTH];
        assert_eq!(state(Depth::Auto).with_prior(&ngram_prior(low)).choose_depth(8, 0, 0, &costs(0.1)), 0);
        // Before any pass is timed the prior slope makes a 2-row pass cost 1.3x, so 0.5 drafts;
        // tune measured every row as dear as a whole pass, and then it does not.
        assert!(state(Depth::Auto).choose_depth(8, 0, 0, &CostModel::default()) >= 1);
        let steep = SpecPrior { pass_secs: (1..=9).map(|r| 0.010 * r as f64).collect(), ..Default::default() };
        assert_eq!(state(Depth::Auto).choose_depth(8, 0, 0, &CostModel::from_prior(&steep)), 0);
        // A drafter the profile did not measure keeps the built-in start.
        assert!(state(Depth::Auto).with_prior(&SpecPrior::default()).choose_depth(8, 0, 0, &costs(0.1)) >= 1);
    }

    #[test]
    fn a_prior_is_a_starting_point_that_verification_moves() {
        let mut s = state(Depth::Auto).with_prior(&ngram_prior([Some(0.05); MAX_DRAFT_DEPTH]));
        for _ in 0..60 {
            s.learn(0, true);
            s.learn(1, true);
        }
        assert!(s.choose_depth(8, 0, 0, &costs(0.1)) >= 2);
        let mut c = CostModel::from_prior(&SpecPrior { pass_secs: vec![0.010, 0.020], ..Default::default() });
        assert!((c.cost(2) - 0.020).abs() < 1e-12);
        c.observe(2, Duration::from_millis(10));
        assert!((c.cost(2) - 0.018).abs() < 1e-12);
    }

    #[test]
    fn a_young_request_leaves_a_pooled_prior_after_a_few_rejections() {
        // What `tune` measured on the demo model: pass times of 1..9 rows (2 rows 1.2x, 9 rows
        // 3.1x a 1-row pass) and n-gram acceptance pooled over chat, code and editing.
        let ms = [7.84, 9.38, 10.37, 11.74, 14.27, 16.25, 19.40, 22.06, 23.98];
        let costs =
            CostModel::from_prior(&SpecPrior { pass_secs: ms.iter().map(|t| t / 1e3).collect(), ..Default::default() });
        let pooled = [0.63, 0.83, 0.94, 0.93, 0.95, 0.97, 0.97, 0.96].map(Some);
        let mut s = state(Depth::Auto).with_prior(&ngram_prior(pooled));
        assert!(s.choose_depth(8, 0, 0, &costs) >= 3, "the pooled prior drafts deep at once");
        // A chat request whose first drafted token is always wrong: the moving average alone
        // would keep drafting for about 13 rounds (0.63 x 0.9^n falls below the 2-row break-even
        // only then); counted as one verification, the prior yields after three.
        let mut rounds = 0;
        while s.choose_depth(8, 0, 0, &costs) > 0 {
            s.learn(0, false);
            rounds += 1;
            assert!(rounds <= 3, "still drafting after {rounds} rejections: {:?}", s.learned[0].accept);
        }
        // Past the first rounds the moving average rules: one acceptance moves a position by
        // ACCEPT_EWMA, not by a share of a short count.
        let mut old = state(Depth::Auto);
        for _ in 0..20 {
            old.learn(0, false);
        }
        let before = old.learned[0].accept[0];
        old.learn(0, true);
        assert!((old.learned[0].accept[0] - (before + ACCEPT_EWMA * (1.0 - before))).abs() < 1e-12);
    }

    #[test]
    fn each_source_of_a_drafter_keeps_its_own_acceptance_and_prior() {
        let prior = SpecPrior { accept: vec![("b".into(), [Some(0.9); MAX_DRAFT_DEPTH])], ..Default::default() };
        let mut s = SpecState::new(Box::new(TwoSources(0)), Depth::Auto).with_prior(&prior);
        // Source a is rejected every time it drafts: it stops drafting.
        s.pick(&[]);
        for _ in 0..30 {
            s.learn(0, false);
        }
        assert_eq!(s.choose_depth(8, 0, 0, &costs(0.1)), 0);
        // Source b, never verified in this request, still drafts deep from its measured prior.
        s.drafter = Box::new(TwoSources(1));
        s.pick(&[]);
        assert!(s.choose_depth(8, 0, 0, &costs(0.1)) >= 4);
        assert_eq!(s.learned[1].verified, [0; MAX_DRAFT_DEPTH], "a's rejections were not b's");
        // The request's counts add up both sources' rounds.
        s.learn(0, true);
        assert_eq!((s.stats.drafted_by_depth[0], s.stats.accepted_by_depth[0]), (31, 1));
    }

    #[test]
    fn a_measured_drafting_cost_counts_from_the_first_step() {
        // Accepted at 0.3 with cheap rows, a free drafter pays at depth 1; `tune` measured this
        // one at a third of a pass per drafted token, and then it does not.
        let accept = [Some(0.3); MAX_DRAFT_DEPTH];
        let free = ngram_prior(accept);
        assert!(state(Depth::Auto).with_prior(&free).choose_depth(8, 0, 0, &costs(0.1)) >= 1);
        let slow = SpecPrior { draft_secs: vec![("ngram".into(), 0.010 / 3.0)], ..free };
        assert_eq!(state(Depth::Auto).with_prior(&slow).choose_depth(8, 0, 0, &costs(0.1)), 0);
    }

    #[test]
    fn learning_counts_by_position() {
        let mut s = state(Depth::Auto);
        s.learn(0, true);
        s.learn(1, false);
        s.learn(0, true);
        assert_eq!(s.stats.drafted_by_depth, vec![2, 1]);
        assert_eq!(s.stats.accepted_by_depth, vec![2]);
    }
}
