//! How many tokens each sequence feeds in one scheduler step.
//!
//! A step's time grows with the tokens it feeds (on a CPU, prefill tokens are compute-bound:
//! each costs about as much as a quarter to a half of a one-token decode step). So:
//! - while any sequence decodes, the step feeds at most `max_batch_tokens` tokens, its decode
//!   tokens first, which bounds the gap between two tokens of every running stream;
//! - while none decodes, prompts are prefilled in chunks of `prefill_chunk` tokens, large enough
//!   to keep the matrix kernels efficient and small enough that a request arriving meanwhile
//!   waits at most one chunk.
//!
//! Prompts share the prefill budget shortest remaining first, so a short request gets its first
//! token after one step even behind a long prompt, and the oldest prefilling prompt is always
//! given a quarter of it (rounded down), so a stream of short requests cannot starve a long one.
//!
//! Beside decoding streams, short prompts (all of the prompt within `max_batch_tokens`: a short
//! request, not a long prompt's last tokens, whose attention reads all before them) go whole on
//! top of what the pacer allows the others, within that bound in all. Late in a long prompt the
//! pacer allows one token a step (its attention reads the whole prompt's cache); the oldest
//! prompt's quarter took it, and short requests beside it waited up to 12.4 s for their first
//! token. While none decodes, a step in which a prompt ends (its request's first token comes out
//! of it) gives the others a quarter of a chunk, not the rest of one: late in a 4,000-token prompt
//! a whole chunk took 0.44-0.61 s, which every new request's first token waited for.

use super::step_pacer::DEFAULT_MAX_STEP_RATIO;

/// Most tokens per step while some sequence decodes, when not configured (`--max-batch-tokens`);
/// the step pacer (`--max-step-ratio`) usually gives prompts fewer (docs/performance.md).
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 32;
/// Prompt tokens per step while no sequence decodes, when not configured (`--prefill-chunk`).
pub const DEFAULT_PREFILL_CHUNK: usize = 256;

/// The per-step budget; both token counts are at least 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepBudget {
    /// Most tokens a step feeds, summed over sequences, while any sequence decodes.
    pub max_batch_tokens: usize,
    /// Most prompt tokens a step feeds while no sequence decodes.
    pub prefill_chunk: usize,
    /// Most time a step beside a prefill may take, as a multiple of the decodes alone
    /// (`step_pacer.rs`); 0 leaves only `max_batch_tokens`.
    pub max_step_ratio: f64,
}

impl Default for StepBudget {
    fn default() -> Self {
        StepBudget {
            max_batch_tokens: DEFAULT_MAX_BATCH_TOKENS,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            max_step_ratio: DEFAULT_MAX_STEP_RATIO,
        }
    }
}

/// One candidate of a step, in admission order (oldest first).
#[derive(Clone, Copy, Debug)]
pub struct Want {
    /// Prompt tokens still to prefill; 0 for a decoding sequence (it feeds one token).
    pub prompt_left: usize,
    /// Prompt tokens already in its cache (fed, or reused from an earlier request's prefix).
    pub prompt_fed: usize,
}

impl StepBudget {
    /// Most prompt tokens a step may feed, given how many sequences decode in it (beside
    /// decodes, the pacer may give fewer).
    fn prefill_cap(&self, decoding: usize) -> usize {
        if decoding == 0 {
            return self.prefill_chunk.max(1);
        }
        let max = self.max_batch_tokens.max(1);
        // Decodes come first, but prompts always move: many streams must not freeze a prefill.
        max.saturating_sub(decoding).max(max.div_ceil(4))
    }

    /// Prompt tokens of a step in which no sequence decodes: a chunk, or the shortest prompt's
    /// rest and a quarter of a chunk when that is less.
    fn prefill_alone(&self, wants: &[Want]) -> usize {
        let chunk = self.prefill_chunk.max(1);
        match wants.iter().map(|w| w.prompt_left).min() {
            Some(shortest) if wants.len() > 1 => chunk.min(shortest + chunk.div_ceil(4)),
            _ => chunk,
        }
    }

    /// A step beside decoding streams in which the pacer allows `allowance` prompt tokens of at
    /// most `cap` ([`prefill_cap`](Self::prefill_cap)): short prompts (all of the prompt within
    /// `cap`) that fit whole in what `cap` leaves above the allowance, shortest first, go whole
    /// on top; the others share `allowance` as in [`plan_with`](Self::plan_with). An allowance of
    /// 0 (a step that measures the decodes alone) feeds no prompt. Also returns the tokens on top.
    fn plan_paced(&self, wants: &[Want], cap: usize, allowance: usize) -> (Vec<(usize, usize)>, usize) {
        let mut room = if allowance == 0 { 0 } else { cap.saturating_sub(allowance) };
        let short = |w: &Want| w.prompt_left > 0 && w.prompt_fed + w.prompt_left <= cap;
        let mut prompts: Vec<usize> = (0..wants.len()).filter(|&i| short(&wants[i])).collect();
        prompts.sort_by_key(|&i| wants[i].prompt_left);
        let mut whole = vec![false; wants.len()];
        for i in prompts {
            if wants[i].prompt_left > room {
                break;
            }
            room -= wants[i].prompt_left;
            whole[i] = true;
        }
        let others: Vec<usize> = (0..wants.len()).filter(|&i| !whole[i]).collect();
        let sub: Vec<Want> = others.iter().map(|&i| wants[i]).collect();
        let mut plan: Vec<(usize, usize)> =
            self.plan_with(&sub, allowance).into_iter().map(|(j, n)| (others[j], n)).collect();
        let on_top: Vec<(usize, usize)> =
            (0..wants.len()).filter(|&i| whole[i]).map(|i| (i, wants[i].prompt_left)).collect();
        let extra = on_top.iter().map(|p| p.1).sum();
        plan.extend(on_top);
        plan.sort_unstable();
        (plan, extra)
    }

    /// `(index into wants, tokens)` for every sequence that feeds in this step, in index order,
    /// and the prompt tokens beyond the pacer's allowance: `allowance(cap)` is what the pacer
    /// allows beside decoding streams, at most `cap`.
    pub fn plan(&self, wants: &[Want], allowance: impl FnOnce(usize) -> usize) -> (Vec<(usize, usize)>, usize) {
        match wants.iter().filter(|w| w.prompt_left == 0).count() {
            0 => (self.plan_with(wants, self.prefill_alone(wants)), 0),
            decoding => {
                let cap = self.prefill_cap(decoding);
                self.plan_paced(wants, cap, allowance(cap))
            }
        }
    }

    /// [`plan`](Self::plan) with `prefill` prompt tokens in all, shared as described above.
    fn plan_with(&self, wants: &[Want], prefill: usize) -> Vec<(usize, usize)> {
        let mut left = prefill;
        let mut give = vec![0usize; wants.len()];
        let mut prefilling: Vec<usize> = (0..wants.len()).filter(|&i| wants[i].prompt_left > 0).collect();
        if let Some(&oldest) = prefilling.first() {
            let floor = wants[oldest].prompt_left.min(left / 4);
            give[oldest] = floor;
            left -= floor;
        }
        // Stable: equal lengths keep admission order.
        prefilling.sort_by_key(|&i| wants[i].prompt_left);
        for i in prefilling {
            let n = (wants[i].prompt_left - give[i]).min(left);
            give[i] += n;
            left -= n;
        }
        (0..wants.len())
            .filter_map(|i| match wants[i].prompt_left {
                0 => Some((i, 1)),
                _ => (give[i] > 0).then_some((i, give[i])),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wants(lefts: &[usize]) -> Vec<Want> {
        lefts.iter().map(|&prompt_left| Want { prompt_left, prompt_fed: 0 }).collect()
    }

    #[test]
    fn alone_a_prompt_goes_in_chunks_of_prefill_chunk() {
        let b = StepBudget { max_batch_tokens: 16, prefill_chunk: 256, max_step_ratio: 0.0 };
        assert_eq!(b.plan(&wants(&[4000]), |cap| cap).0, vec![(0, 256)]);
        assert_eq!(b.plan(&wants(&[100]), |cap| cap).0, vec![(0, 100)]);
    }

    #[test]
    fn beside_decodes_a_step_feeds_at_most_max_batch_tokens() {
        let b = StepBudget { max_batch_tokens: 16, prefill_chunk: 256, max_step_ratio: 0.0 };
        let plan = b.plan(&wants(&[0, 4000, 0]), |cap| cap).0;
        assert_eq!(plan, vec![(0, 1), (1, 14), (2, 1)]);
        assert_eq!(plan.iter().map(|p| p.1).sum::<usize>(), 16);
    }

    #[test]
    fn many_decodes_leave_a_quarter_of_the_budget_to_prompts() {
        let b = StepBudget { max_batch_tokens: 16, prefill_chunk: 256, max_step_ratio: 0.0 };
        let mut w = wants(&[0; 20]);
        w.push(Want { prompt_left: 500, prompt_fed: 0 });
        let plan = b.plan(&w, |cap| cap).0;
        assert_eq!(plan.len(), 21);
        assert_eq!(plan[20], (20, 4));
    }

    #[test]
    fn a_short_prompt_passes_a_long_one_which_keeps_moving() {
        let b = StepBudget { max_batch_tokens: 64, prefill_chunk: 256, max_step_ratio: 0.0 };
        // The long prompt is older; the short one still finishes its prefill in this step, beside
        // a quarter of a chunk of the long one.
        let plan = b.plan(&wants(&[4000, 30]), |cap| cap).0;
        assert_eq!(plan, vec![(0, 64), (1, 30)]);
        assert_eq!(b.plan(&wants(&[30, 4000]), |cap| cap).0, vec![(0, 30), (1, 64)]);
        // A prompt that cannot end within the step leaves the chunk whole.
        assert_eq!(b.plan(&wants(&[4000, 300]), |cap| cap).0, vec![(0, 64), (1, 192)]);
        let plan = b.plan(&wants(&[0, 4000, 300, 30]), |cap| cap).0;
        assert_eq!(plan, vec![(0, 1), (1, 15), (2, 18), (3, 30)]);
    }

    #[test]
    fn the_oldest_prompt_gets_a_quarter_even_behind_many_short_ones() {
        let b = StepBudget { max_batch_tokens: 64, prefill_chunk: 64, max_step_ratio: 0.0 };
        let plan = b.plan(&wants(&[1000, 10, 10, 10, 10, 10, 10, 10]), |cap| cap).0;
        let total: usize = plan.iter().map(|p| p.1).sum();
        assert_eq!((plan[0], total), ((0, 6), 26), "a short prompt and a quarter of a chunk: {plan:?}");
        assert_eq!(plan[1], (1, 10));
        let plan = b.plan(&wants(&[1000, 100, 100, 100]), |cap| cap).0;
        assert_eq!(plan, vec![(0, 16), (1, 48)]);
    }

    #[test]
    fn beside_decodes_a_chat_turn_goes_whole_on_top_of_a_small_allowance() {
        let b = StepBudget { max_batch_tokens: 32, prefill_chunk: 256, max_step_ratio: 2.5 };
        // A stream, a long prompt late in its prefill (the pacer allows 1 token), a chat turn:
        // the turn goes whole, the long prompt keeps its token.
        let w = wants(&[0, 3000, 20]);
        assert_eq!(b.plan(&w, |_| 1), (vec![(0, 1), (1, 1), (2, 20)], 20));
        // Within max_batch_tokens in all: a turn of 31 does not fit beside the stream and the
        // allowance, and shares the allowance instead (shortest first).
        assert_eq!(b.plan(&wants(&[0, 3000, 31]), |_| 1), (vec![(0, 1), (2, 1)], 0));
        assert_eq!(b.plan(&wants(&[0, 3000, 31]), |_| 4), (vec![(0, 1), (1, 1), (2, 3)], 0));
        // Two turns fit, a third does not; with pacing off (the whole cap allowed) none goes on top.
        let w = wants(&[0, 3000, 10, 12, 15]);
        assert_eq!(b.plan(&w, |_| 2), (vec![(0, 1), (2, 10), (3, 12), (4, 2)], 22));
        assert_eq!(b.plan(&w, |_| 31).1, 0);
        // A long prompt's last tokens are not a short prompt: they share the allowance.
        let w = [wants(&[0])[0], Want { prompt_left: 20, prompt_fed: 4000 }];
        assert_eq!(b.plan(&w, |_| 2), (vec![(0, 1), (1, 2)], 0));
        // A step that measures the decodes alone feeds no prompt.
        assert_eq!(b.plan(&wants(&[0, 3000, 5]), |_| 0), (vec![(0, 1)], 0));
    }

    #[test]
    fn zero_settings_still_make_progress() {
        let b = StepBudget { max_batch_tokens: 0, prefill_chunk: 0, max_step_ratio: 0.0 };
        assert_eq!(b.plan(&wants(&[10]), |cap| cap).0, vec![(0, 1)]);
        assert_eq!(b.plan(&wants(&[0, 10]), |cap| cap).0, vec![(0, 1), (1, 1)]);
    }
}
