//! Turning one row of logits into the next token.
//!
//! Order of the transforms (each works on the output of the one before):
//! 1. presence and frequency penalties, on the raw logits (OpenAI defines them on logits:
//!    `l[j] -= count[j] * frequency + (count[j] > 0) * presence`, counting generated tokens only,
//!    as vLLM does, so a long prompt does not penalise the words the answer must repeat);
//! 2. temperature 0 stops here and takes the argmax (lowest id on ties);
//! 3. temperature (divide), then softmax, so that every cut below sees the distribution that is
//!    actually sampled from, as in transformers and vLLM;
//! 4. top-k (a partial selection, no full sort), which also shrinks what top-p must order;
//! 5. top-p over the survivors, renormalised (smallest most-likely set with mass >= top_p);
//! 6. min-p: keep tokens with probability >= min_p * the largest (a ratio, so unaffected by the
//!    renormalisations before it);
//! 7. draw one token from what is left with the sequence's own PRNG.
//!
//! Logprobs are those of the model's raw distribution (log-softmax of the unprocessed logits),
//! as OpenAI reports them: they do not change with temperature or penalties, they exist at
//! temperature 0 (where the sampled distribution is a point mass), and `top_logprobs` can list N
//! alternatives even when top-k keeps fewer.

use super::job::{SamplingParams, MAX_TOP_LOGPROBS};

/// Power-of-two probability bands top-p sums before sorting; below 2^-40 of the maximum a token
/// weighs nothing next to it, so one band collects all of them.
const NUCLEUS_BANDS: usize = 40;

/// xoshiro256** seeded through splitmix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut st = seed;
        Rng { s: [splitmix64(&mut st), splitmix64(&mut st), splitmix64(&mut st), splitmix64(&mut st)] }
    }

    /// A seed that differs between calls (clock and a counter), for requests without one.
    pub fn fresh_seed() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut st = t ^ COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(0xA24B_AED4_963E_E407);
        splitmix64(&mut st)
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The token chosen and what the job asked to know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    pub id: u32,
    /// Raw log-softmax of the chosen token (only when asked; otherwise 0.0).
    pub logprob: f32,
    /// The `top_n` most likely tokens under the raw distribution, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// One sequence's sampler: its parameters, PRNG, counts of generated tokens, and a scratch
/// buffer reused for every token.
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Generated-token counts for the penalties, as (id, count); short, so a Vec beats a map.
    counts: Vec<(u32, u32)>,
    /// (token id, value) candidates; reused across tokens.
    scratch: Vec<(u32, f32)>,
}

fn desc(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

impl Sampler {
    pub fn new(params: &SamplingParams) -> Sampler {
        let seed = params.seed.unwrap_or_else(Rng::fresh_seed);
        Sampler { params: params.clone(), rng: Rng::new(seed), counts: Vec::new(), scratch: Vec::new() }
    }

    /// Chooses the next token from `logits`, records it for the penalties, and computes its raw
    /// logprob when `want_logprob`, and the `top_n` (clamped to 20) raw alternatives.
    pub fn sample(&mut self, logits: &[f32], want_logprob: bool, top_n: usize) -> Sampled {
        let id = self.choose(logits);
        self.finish_pick(logits, id, want_logprob, top_n)
    }

    /// Whether this sampler's pick is the row's argmax and nothing else of the row is read:
    /// greedy, with no penalty (the job asks for no logprobs; the caller checks that).
    pub fn picks_argmax(&self) -> bool {
        let p = &self.params;
        (p.temperature.is_nan() || p.temperature <= 0.0) && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0
    }

    /// Takes `id`, the argmax the model computed for a row, as [`Sampler::sample`] would have
    /// picked it from the row (only for a sampler that [`Sampler::picks_argmax`]).
    pub fn take(&mut self, id: u32) -> Sampled {
        debug_assert!(self.picks_argmax());
        self.record(id);
        Sampled { id, logprob: 0.0, top: Vec::new() }
    }

    /// Records the chosen token for the penalties and reports its raw logprob and alternatives.
    fn finish_pick(&mut self, logits: &[f32], id: u32, want_logprob: bool, top_n: usize) -> Sampled {
        let top_n = top_n.min(MAX_TOP_LOGPROBS).min(logits.len());
        let lse = if want_logprob || top_n > 0 { log_sum_exp(logits) } else { 0.0 };
        let mut top = Vec::with_capacity(top_n);
        if top_n > 0 {
            // One pass keeping the best `top_n` in order: almost every logit fails the first
            // comparison, so this beats a selection over a copy of the whole row.
            for (i, &l) in logits.iter().enumerate() {
                if top.len() == top_n && desc(&(i as u32, l), &top[top_n - 1]).is_ge() {
                    continue;
                }
                let at = top.partition_point(|e| desc(e, &(i as u32, l)).is_lt());
                if top.len() == top_n {
                    top.pop();
                }
                top.insert(at, (i as u32, l));
            }
            for e in top.iter_mut() {
                e.1 -= lse;
            }
        }
        self.record(id);
        let logprob = if want_logprob { logits[id as usize] - lse } else { 0.0 };
        Sampled { id, logprob, top }
    }

    fn fill_raw(&mut self, logits: &[f32]) {
        self.scratch.clear();
        self.scratch.extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
    }

    fn record(&mut self, id: u32) {
        match self.counts.iter_mut().find(|(t, _)| *t == id) {
            Some((_, c)) => *c += 1,
            None => self.counts.push((id, 1)),
        }
    }

    /// Steps 1 to 7 of the module comment.
    fn choose(&mut self, logits: &[f32]) -> u32 {
        match self.target(logits) {
            Target::Point(id) => id,
            Target::Weights(total) => {
                let u = self.rng.next_f64() * total;
                draw(&self.scratch, u, None)
            }
        }
    }

    /// Steps 1 to 6: the distribution tokens are drawn from, either one certain token or the
    /// surviving candidates in `scratch` with unnormalised weights summing to the returned total.
    fn target(&mut self, logits: &[f32]) -> Target {
        let p = &self.params;
        let greedy = p.temperature.is_nan() || p.temperature <= 0.0;
        let penalised = p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        if greedy && !penalised {
            return Target::Point(crate::backend::math::argmax(logits));
        }
        self.fill_raw(logits);
        let p = &self.params;
        if penalised {
            for &(id, c) in &self.counts {
                if let Some(e) = self.scratch.get_mut(id as usize) {
                    e.1 -= c as f32 * p.frequency_penalty + p.presence_penalty;
                }
            }
        }
        if greedy {
            return Target::Point(argmax(&self.scratch));
        }
        let inv_t = 1.0 / p.temperature;
        // The shift only keeps exp in range (softmax ignores it): the raw maximum, a contiguous
        // and fast pass, raised by any penalised entry a negative penalty lifted above it.
        let raw_max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let s = &mut self.scratch;
        let lifted = self.counts.iter().filter_map(|&(id, _)| s.get(id as usize)).map(|e| e.1);
        let max = lifted.fold(raw_max, f32::max) * inv_t;
        let mut total = 0.0f64;
        for e in s.iter_mut() {
            e.1 = fast_exp(e.1 * inv_t - max);
            total += e.1 as f64;
        }
        // Probabilities stay unnormalised below: each cut compares against the current total.
        let cut = (p.top_k > 0 && p.top_k < s.len()) || p.top_p < 1.0 || p.min_p > 0.0;
        if p.top_k > 0 && p.top_k < s.len() {
            s.select_nth_unstable_by(p.top_k - 1, desc);
            s.truncate(p.top_k);
        }
        if p.top_p < 1.0 {
            keep_nucleus(s, p.top_p.max(0.0) as f64);
        }
        if p.min_p > 0.0 {
            let best = s.iter().map(|e| e.1).fold(0.0f32, f32::max);
            let cut = p.min_p * best;
            s.retain(|e| e.1 >= cut);
        }
        if cut {
            total = s.iter().map(|e| e.1 as f64).sum();
        }
        if !total.is_finite() || total <= 0.0 {
            return Target::Point(argmax(s));
        }
        Target::Weights(total)
    }

    /// Speculative verification of one drafted token (Leviathan et al. 2023): the target
    /// distribution p comes from `logits` exactly as [`Sampler::sample`] builds it; the draft
    /// distribution q is `draft_q` (sparse, sorted by token id, summing to at most 1), or a point
    /// mass on `draft` when `None` (an n-gram draft). The draft is kept with probability min(1, p(x) / q(x));
    /// otherwise the token is drawn from the normalised max(0, p - q). Either way the token
    /// returned is distributed exactly as p, which is what makes speculation invisible.
    pub fn verify(
        &mut self,
        logits: &[f32],
        draft: u32,
        draft_q: Option<&[(u32, f32)]>,
        want_logprob: bool,
        top_n: usize,
    ) -> (Sampled, bool) {
        debug_assert!(draft_q.is_none_or(|q| q.windows(2).all(|w| w[0].0 < w[1].0)), "q sorted by id");
        // A lookup per survivor: the residual below visits the whole vocabulary, and a draft
        // head's sub-vocabulary holds thousands of ids, so a scan of q each time would not do.
        let q_of = |id: u32| match draft_q {
            None => (id == draft) as u32 as f64,
            Some(q) => q.binary_search_by_key(&id, |e| e.0).map_or(0.0, |i| q[i].1 as f64),
        };
        let (id, accepted) = match self.target(logits) {
            // p is a point mass: the draft survives only if it is that token (q(x) > 0 is given).
            Target::Point(id) => (id, id == draft),
            Target::Weights(total) => {
                let px = self.scratch.iter().find(|e| e.0 == draft).map_or(0.0, |e| e.1 as f64 / total);
                let qx = q_of(draft).max(f64::MIN_POSITIVE);
                if self.rng.next_f64() * qx < px {
                    (draft, true)
                } else {
                    // The residual: each survivor's weight less q's share of the same total.
                    for e in self.scratch.iter_mut() {
                        e.1 = (e.1 as f64 - q_of(e.0) * total).max(0.0) as f32;
                    }
                    let rest: f64 = self.scratch.iter().map(|e| e.1 as f64).sum();
                    let u = self.rng.next_f64() * rest;
                    (
                        if rest > 0.0 { draw(&self.scratch, u, None) } else { draw(&self.scratch, 0.0, Some(draft)) },
                        false,
                    )
                }
            }
        };
        (self.finish_pick(logits, id, want_logprob, top_n), accepted)
    }

    #[cfg(test)]
    pub(crate) fn kept_after_cuts(&mut self, logits: &[f32]) -> Vec<u32> {
        // Runs the cuts without drawing, for the tests: the surviving ids, sorted.
        let saved = self.rng.clone();
        let _ = self.choose(logits);
        self.rng = saved;
        let mut ids: Vec<u32> = self.scratch.iter().map(|e| e.0).collect();
        ids.sort_unstable();
        ids
    }
}

/// What steps 1 to 6 leave to draw from.
enum Target {
    /// One token is certain (greedy, or nothing left with weight).
    Point(u32),
    /// The candidates in the sampler's scratch, with this total weight.
    Weights(f64),
}

/// The candidate where `u` (in `[0, total)`) falls, skipping `except`; the last one with weight
/// when rounding leaves `u` past the end.
fn draw(s: &[(u32, f32)], mut u: f64, except: Option<u32>) -> u32 {
    for &(id, w) in s.iter().filter(|e| Some(e.0) != except) {
        u -= w as f64;
        if u < 0.0 {
            return id;
        }
    }
    s.iter().rev().find(|e| e.1 > 0.0 && Some(e.0) != except).or(s.first()).map_or(0, |e| e.0)
}

/// Keeps the smallest most-likely prefix whose mass reaches `top_p` of the total. Sorting the
/// whole vocabulary is avoided: one pass sums the mass per power-of-two band below the maximum
/// (the f32 exponent), the bands reaching the target bound a top set that holds the nucleus, and
/// only that set is sorted.
fn keep_nucleus(s: &mut Vec<(u32, f32)>, top_p: f64) {
    let total: f64 = s.iter().map(|e| e.1 as f64).sum();
    let target = top_p * total;
    let max = s.iter().map(|e| e.1).fold(0.0f32, f32::max);
    if max <= 0.0 || !max.is_finite() {
        return;
    }
    let max_exp = max.to_bits() >> 23;
    // Band 0 holds [max/2, max], band b [max/2^(b+1), max/2^b), roughly; the last takes the rest.
    let band = |p: f32| ((max_exp.saturating_sub(p.to_bits() >> 23)) as usize).min(NUCLEUS_BANDS - 1);
    let mut mass = [0.0f64; NUCLEUS_BANDS];
    for e in s.iter() {
        mass[band(e.1)] += e.1 as f64;
    }
    let mut acc = 0.0;
    let last = (0..NUCLEUS_BANDS)
        .find(|&b| {
            acc += mass[b];
            acc >= target
        })
        .unwrap_or(NUCLEUS_BANDS - 1);
    if last < NUCLEUS_BANDS - 1 {
        s.retain(|e| band(e.1) <= last);
    }
    s.sort_unstable_by(desc);
    let mut acc = 0.0f64;
    for i in 0..s.len() {
        acc += s[i].1 as f64;
        if acc >= target {
            s.truncate(i + 1);
            return;
        }
    }
}

fn argmax(s: &[(u32, f32)]) -> u32 {
    let mut best = 0;
    for i in 1..s.len() {
        if s[i].1 > s[best].1 {
            best = i;
        }
    }
    s.get(best).map(|e| e.0).unwrap_or(0)
}

/// Below this, `exp` underflows f32: the result is 0 (so masked `-inf` logits stay impossible).
const EXP_MIN_ARG: f32 = -87.0;

/// `exp(x)` for `x <= 0` to about 2e-7 relative error, in plain arithmetic that the compiler
/// vectorises: the sampler takes one exp per vocabulary entry per token, and the library `expf`
/// (one call each) dominated its cost. `x = n ln 2 + y` with integer `n` (placed in the exponent
/// bits) and `|y| <= ln 2 / 2`, whose exp a degree-6 Taylor series gives.
#[inline]
pub fn fast_exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
                                     // ln 2 in two parts (Cody and Waite), so that `n * LN2_HI` is exact and the reduced
                                     // argument keeps full precision even for large `n`.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let xc = x.max(EXP_MIN_ARG);
    let n = (xc * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let y = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0 + y * (1.0 + y * (0.5 + y * (1.0 / 6.0 + y * (1.0 / 24.0 + y * (1.0 / 120.0 + y / 720.0)))));
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    if x < EXP_MIN_ARG {
        0.0
    } else {
        p * scale
    }
}

/// `ln(sum(exp(l)))`, computed stably.
pub fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = logits.iter().map(|&l| fast_exp(l - max) as f64).sum();
    max + sum.ln() as f32
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
