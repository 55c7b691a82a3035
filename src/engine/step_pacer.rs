//! How many prompt tokens a step may feed beside decoding streams, chosen by time.
//!
//! A prompt token costs more the longer its context is (its attention reads every earlier
//! position), and beside a 4,000-token prompt a stream's p99 gap was 14-16x its plain one
//! with a fixed token budget. So the pacer measures what a step of the decodes alone takes and what each prompt
//! token adds to it, and gives prompts as many tokens as keep a step within `ratio` times the
//! decodes alone: every stream's gap between tokens stays bounded from the first prompt token
//! to the last, and prompts take whatever time is left. A step feeds at least one prompt token
//! so that prompts always move; late in a long prompt that one token (its attention reads the
//! whole prompt's cache) costs more than a decode step: that is the gap's floor.

use std::time::Duration;

/// Most a step beside a prefill may take, as a multiple of a step of the decodes alone, when not
/// configured (`--max-step-ratio`). The trade-off it sets (stream gaps against the long
/// prompt's own time) is measured in docs/performance.md.
pub const DEFAULT_MAX_STEP_RATIO: f64 = 2.5;
/// Steps with prompt tokens between two steps of the decodes alone: the decodes' own cost
/// changes as streams come and go and their contexts grow, so it is measured again.
const REMEASURE_EVERY: u32 = 32;
/// Weight of the newest measurement in the running average of a prompt token's cost.
const EWMA_WEIGHT: f64 = 0.25;
/// The same for the decodes alone, higher: during a prefill they are measured only once every
/// [`REMEASURE_EVERY`] steps, and a stale figure misprices every prompt token.
const PLAIN_EWMA_WEIGHT: f64 = 0.5;
/// Most prompt tokens a step feeds, as a multiple of the last step's: one or two more rows on a
/// pass cost less each than many (they share the weights' reads, where many rows are bound by
/// the arithmetic), so a cost learned from a few tokens would let the next step take far too
/// many (a 4,000-token prompt's second step took 31 tokens and 33 ms, 5x a plain step).
const RAMP: usize = 2;
/// Least cost of one prompt token, in seconds, so a noisy step cannot make prompts look free.
const MIN_TOKEN_COST_S: f64 = 1e-6;

/// Running estimates of a step's cost, and the prompt tokens they allow.
#[derive(Clone, Debug)]
pub struct StepPacer {
    /// Most step time beside a prefill over the decodes alone; 0 or less turns pacing off.
    ratio: f64,
    /// Seconds of a step that feeds only decoding streams.
    plain: Option<f64>,
    /// Seconds each prompt token adds to such a step.
    per_token: Option<f64>,
    /// Steps with prompt tokens since the decodes alone were last measured.
    since_plain: u32,
    /// Prompt tokens of the last step that fed some beside decoding streams.
    last_rows: usize,
}

impl StepPacer {
    pub fn new(ratio: f64) -> StepPacer {
        StepPacer { ratio, plain: None, per_token: None, since_plain: 0, last_rows: 0 }
    }

    /// Prompt tokens the next step may feed beside decoding streams, at most `cap`. Zero asks for
    /// a step of the decodes alone, which measures them; otherwise at least one token, so prompts
    /// always move.
    pub fn allowance(&self, cap: usize) -> usize {
        if self.ratio <= 0.0 {
            return cap;
        }
        let Some(plain) = self.plain.filter(|_| self.since_plain < REMEASURE_EVERY) else {
            return 0;
        };
        let Some(per_token) = self.per_token else {
            return cap.min(1);
        };
        let room = plain * (self.ratio - 1.0).max(0.0);
        let cap = cap.max(1).min(RAMP * self.last_rows.max(1));
        ((room / per_token) as usize).clamp(1, cap)
    }

    /// Learns from a finished step that fed `prompt_rows` prompt tokens and `decode_rows` rows
    /// of decoding streams (their drafts included). Steps without a decoding stream protect no
    /// one's gap, and teach nothing.
    pub fn observe(&mut self, prompt_rows: usize, decode_rows: usize, took: Duration) {
        if decode_rows == 0 {
            return;
        }
        let t = took.as_secs_f64();
        if prompt_rows == 0 {
            self.plain = Some(ewma(self.plain, t, PLAIN_EWMA_WEIGHT));
            self.since_plain = 0;
            return;
        }
        self.since_plain += 1;
        self.last_rows = prompt_rows;
        if let Some(plain) = self.plain {
            let per_token = ((t - plain) / prompt_rows as f64).max(MIN_TOKEN_COST_S);
            self.per_token = Some(ewma(self.per_token, per_token, EWMA_WEIGHT));
        }
    }
}

fn ewma(old: Option<f64>, new: f64, weight: f64) -> f64 {
    old.map_or(new, |o| o + weight * (new - o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    /// A machine whose step costs `plain_ms` for the decodes plus `token_ms` per prompt token.
    fn run(p: &mut StepPacer, plain_ms: f64, token_ms: f64, steps: usize, cap: usize) -> Vec<(usize, f64)> {
        (0..steps)
            .map(|_| {
                let n = p.allowance(cap);
                let took = plain_ms + token_ms * n as f64;
                p.observe(n, 1, ms(took));
                (n, took)
            })
            .collect()
    }

    #[test]
    fn the_first_step_measures_the_decodes_alone() {
        let p = StepPacer::new(2.5);
        assert_eq!(p.allowance(32), 0);
        let mut p = p;
        p.observe(0, 1, ms(10.0));
        assert_eq!(p.allowance(32), 1, "one token until a prompt token's cost is known");
    }

    #[test]
    fn steps_settle_within_the_ratio_and_use_it() {
        let mut p = StepPacer::new(2.5);
        let steps = run(&mut p, 10.0, 1.5, 200, 64);
        for &(n, took) in &steps[20..] {
            assert!(took <= 25.0 + 1e-9, "a step of {n} prompt tokens took {took} ms, over 2.5 x 10 ms");
        }
        // 15 ms of room at 1.5 ms a token: 10 tokens, except on the steps that measure the decodes.
        let mixed: Vec<usize> = steps[20..].iter().map(|s| s.0).filter(|&n| n > 0).collect();
        assert!(mixed.iter().all(|&n| n == 10), "{mixed:?}");
    }

    #[test]
    fn prompt_tokens_that_grow_dearer_get_fewer_per_step() {
        let mut p = StepPacer::new(3.0);
        let cheap = run(&mut p, 10.0, 1.0, 100, 64).iter().rev().find(|s| s.0 > 0).unwrap().0;
        let dear = run(&mut p, 10.0, 2.0, 100, 64).iter().rev().find(|s| s.0 > 0).unwrap().0;
        assert_eq!((cheap, dear), (20, 10));
    }

    #[test]
    fn the_decodes_are_measured_again_every_so_often() {
        let mut p = StepPacer::new(2.0);
        let steps = run(&mut p, 10.0, 1.0, 5 * REMEASURE_EVERY as usize, 64);
        let plain_steps = steps.iter().filter(|s| s.0 == 0).count();
        assert!((4..=6).contains(&plain_steps), "{plain_steps} steps of the decodes alone");
        // A stream ended and the decodes got cheaper: the same ratio leaves prompts less room,
        // which the pacer finds at its next measurements.
        let before = steps.iter().rev().find(|s| s.0 > 0).unwrap().0;
        let after = run(&mut p, 5.0, 1.0, 3 * REMEASURE_EVERY as usize, 64).iter().rev().find(|s| s.0 > 0).unwrap().0;
        assert!(after < before, "{after} tokens after the decodes got cheaper, {before} before");
    }

    #[test]
    fn prompts_always_move_and_the_cap_holds() {
        // A token dearer than the whole room: still one a step.
        let mut p = StepPacer::new(1.2);
        let steps = run(&mut p, 10.0, 50.0, 50, 64);
        assert!(steps[2..].iter().all(|s| s.0 <= 1), "{steps:?}");
        assert!(steps.iter().filter(|s| s.0 == 1).count() > 40);
        let mut p = StepPacer::new(1.2);
        let steps = run(&mut p, 10.0, 0.1, 20, 3);
        assert!(
            steps.iter().all(|s| s.0 <= 3) && steps.iter().any(|s| s.0 == 3),
            "a cap under the room holds: {steps:?}"
        );
        let mut p = StepPacer::new(100.0);
        assert!(run(&mut p, 10.0, 0.1, 50, 16).iter().all(|s| s.0 <= 16));
    }

    #[test]
    fn a_cheap_first_token_does_not_let_the_next_step_overshoot() {
        // The first prompt row beside a decode costs 0.1 ms (it shares the weights' reads), each
        // further one 1 ms: the cost learned from one token is a tenth of the steady one.
        let mut p = StepPacer::new(2.5);
        p.observe(0, 1, ms(10.0));
        let mut worst: f64 = 0.0;
        for _ in 0..40 {
            let n = p.allowance(64);
            let took = 10.0 + if n > 0 { 0.1 + (n - 1) as f64 } else { 0.0 };
            p.observe(n, 1, ms(took));
            worst = worst.max(took);
        }
        // Without the ramp the second step fed 64 tokens (73 ms); the EWMA's lag still lets one
        // step or two pass the bound of 25 ms.
        assert!(worst <= 37.5, "a step took {worst} ms");
    }

    #[test]
    fn a_ratio_of_zero_turns_pacing_off() {
        let mut p = StepPacer::new(0.0);
        assert!(run(&mut p, 10.0, 50.0, 10, 24).iter().all(|s| s.0 == 24));
    }

    #[test]
    fn steps_without_decodes_teach_nothing() {
        let mut p = StepPacer::new(2.0);
        p.observe(256, 0, ms(900.0));
        assert_eq!(p.allowance(32), 0);
    }
}
