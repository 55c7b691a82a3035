//! One sequence on the decode thread, and what happens to it when its logits come back:
//! sampling, verification of a draft, streaming, and the decision to go on or end.

use super::constraint::Constraint;
use super::detok::{StreamDecoder, TokenDecoder};
use super::job::{Event, FinishReason, Job};
use super::kv_cache::SeqId;
use super::sampler::{Sampled, Sampler};
use super::speculate::SpecState;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(super) struct Seq {
    pub(super) job: Job,
    pub(super) id: SeqId,
    pub(super) sampler: Sampler,
    pub(super) detok: StreamDecoder,
    /// Next prompt index to feed; prefill is over when it reaches the prompt's length.
    pub(super) fed: usize,
    /// Steps that fed part of the prompt.
    pub(super) prefill_chunks: usize,
    /// The last sampled token, fed at the next step.
    pub(super) pending: u32,
    /// The prompt and every token generated so far (what drafters read).
    pub(super) history: Vec<u32>,
    /// What this step feeds while decoding: `pending`, then the draft.
    pub(super) feed: Vec<u32>,
    /// The sequence's drafter and its account; `None` decodes plainly.
    pub(super) spec: Option<SpecState>,
    pub(super) generated: usize,
    /// `max_tokens`, capped by what the context leaves.
    pub(super) max_new: usize,
    pub(super) cached: usize,
    /// Of `cached`, the positions the disk tier supplied.
    pub(super) from_disk: usize,
    /// What the disk tier's lookup found; `None` where the tier is off.
    pub(super) disk_lookup: Option<super::prompt_disk::Lookup>,
    pub(super) admitted: Instant,
    pub(super) first_token: Option<Instant>,
    pub(super) last_token: Option<Instant>,
    pub(super) max_batch: usize,
    /// Set when the sequence ends; it is removed after the step.
    pub(super) done: Option<(FinishReason, bool)>,
    /// A logits row as the request's grammar allows it (reused; empty without a grammar).
    pub(super) masked: Vec<f32>,
}

/// `row` with what the grammar forbids masked out (`row` itself without a grammar); `None`
/// when the matcher failed, which ends the sequence with its error.
fn constrain<'a>(
    c: &mut Option<Constraint>,
    masked: &'a mut Vec<f32>,
    row: &'a [f32],
    done: &mut Option<(FinishReason, bool)>,
) -> Option<&'a [f32]> {
    let Some(c) = c else { return Some(row) };
    match c.mask(row, masked) {
        Ok(()) => Some(&masked[..]),
        Err(e) => {
            *done = Some((FinishReason::Error(e.to_string()), false));
            None
        }
    }
}

/// One sequence's share of a step: its rows of logits, or, in a step where every sequence
/// picks greedily and reads nothing else ([`Seq::reads_only_argmax`]), each row's most likely
/// token as the model computed it.
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Logits(&'a [f32]),
    Tokens(&'a [u32]),
}

impl Seq {
    /// Whether this sequence needs nothing of a row but its argmax: greedy and unpenalised, no
    /// logprobs, no grammar.
    pub(super) fn reads_only_argmax(&self) -> bool {
        self.job.constraint.is_none() && !self.job.logprobs && self.job.top_logprobs == 0 && self.sampler.picks_argmax()
    }
}

/// Samples the next token of `s` from its last row, streams it, and decides whether the
/// sequence goes on.
pub(super) fn emit(s: &mut Seq, rows: Rows<'_>, vocab: usize, eos: &[u32], decoder: &dyn TokenDecoder) {
    let picked = match rows {
        Rows::Tokens(ids) => s.sampler.take(ids[ids.len() - 1]),
        Rows::Logits(all) => {
            let row = &all[all.len() - vocab..];
            let Some(row) = constrain(&mut s.job.constraint, &mut s.masked, row, &mut s.done) else { return };
            s.sampler.sample(row, s.job.logprobs, s.job.top_logprobs)
        }
    };
    deliver(s, picked, eos, decoder);
}

/// Walks the rows of a verify pass (row j follows draft token j): each draft token is kept or
/// replaced by exact rejection sampling, up to the first replacement; a fully accepted draft
/// earns a bonus token from its last row. Every token goes out as plain decoding would send it,
/// and the sequence may end at any of them. Under a grammar, row j is masked with the mask of
/// its own prefix (the matcher has taken every token emitted before it), so that a draft token
/// the grammar forbids has probability 0 and is rejected by the rule itself. Returns how many
/// tokens were emitted.
pub(super) fn verify(
    s: &mut Seq,
    rows: Rows<'_>,
    vocab: usize,
    eos: &[u32],
    decoder: &dyn TokenDecoder,
    took: Duration,
) -> usize {
    let mut spec = s.spec.take().expect("a verifying sequence has a drafter");
    let draft = std::mem::take(&mut spec.draft);
    let (want, top) = (s.job.logprobs, s.job.top_logprobs);
    let mut emitted = 0;
    let n = match rows {
        Rows::Logits(l) => l.len() / vocab.max(1),
        Rows::Tokens(ids) => ids.len(),
    };
    for j in 0..n.min(draft.len() + 1) {
        let (picked, accepted) = match rows {
            // The target is a point mass on the argmax: the draft survives only if it is that
            // token, as `Sampler::verify` decides from the row.
            Rows::Tokens(ids) => (s.sampler.take(ids[j]), draft.get(j) == Some(&ids[j])),
            Rows::Logits(l) => {
                let row = &l[j * vocab..(j + 1) * vocab];
                let Some(row) = constrain(&mut s.job.constraint, &mut s.masked, row, &mut s.done) else { break };
                match draft.get(j) {
                    Some(&d) => s.sampler.verify(row, d, None, want, top),
                    None => (s.sampler.sample(row, want, top), false),
                }
            }
        };
        if j < draft.len() {
            spec.learn(j, accepted);
            spec.stats.accepted += accepted as usize;
            spec.stats.correction += !accepted as usize;
        } else {
            spec.stats.bonus += 1;
        }
        emitted += 1;
        deliver(s, picked, eos, decoder);
        if s.done.is_some() || !accepted {
            break;
        }
    }
    spec.stats.drafted += draft.len();
    spec.stats.verify_calls += 1;
    spec.stats.verify_time += took;
    spec.draft = draft;
    s.spec = Some(spec);
    emitted
}

/// Streams a chosen token and decides whether the sequence goes on.
fn deliver(s: &mut Seq, picked: Sampled, eos: &[u32], decoder: &dyn TokenDecoder) {
    s.history.push(picked.id);
    let now = Instant::now();
    s.first_token.get_or_insert(now);
    s.last_token = Some(now);
    s.generated += 1;
    if !s.job.ignore_eos && (eos.contains(&picked.id) || s.job.stop_tokens.contains(&picked.id)) {
        s.done = Some((FinishReason::Stop, true));
        return;
    }
    if let Some(Err(e)) = s.job.constraint.as_mut().map(|c| c.accept(picked.id)) {
        s.done = Some((FinishReason::Error(e.to_string()), false));
        return;
    }
    let ev = Event::Token {
        id: picked.id,
        text: s.detok.push(decoder, picked.id),
        logprob: s.job.logprobs.then_some(picked.logprob),
        top_logprobs: picked.top,
    };
    if s.job.reply.try_send(ev).is_err() {
        s.done = Some((FinishReason::Cancelled, false));
    } else if s.job.constraint.as_ref().is_some_and(Constraint::is_complete) {
        // The grammar allows nothing more (a JSON value closed): the answer is complete.
        s.done = Some((FinishReason::Stop, true));
    } else if s.generated >= s.max_new {
        s.done = Some((FinishReason::Length, true));
    } else {
        s.pending = picked.id;
    }
}

pub(super) fn cancelled(job: &Job) -> bool {
    job.cancel.load(Ordering::Relaxed) || job.reply.is_closed()
}
