//! The KV caches of every sequence: admission against the context length and the memory
//! budget, prefix reuse from idle caches, and least-recently-used eviction.
//!
//! Budget policy: a sequence is admitted only when its worst case (prompt plus `max_tokens`,
//! capped at the context) fits beside the worst cases of the active sequences and the caches kept
//! idle; idle caches are evicted, least recently used first, to make that room. Active sequences
//! therefore never run out of memory mid-answer (no preemption is needed), while storage is still
//! allocated lazily, in chunks, as positions are written. A job that does not fit waits.

use super::job::KvSnapshot;
use crate::model::{KvCache, KvFootprint};

/// Cache storage grows by this many positions at a time: few reallocations, little slack.
pub const ALLOC_CHUNK_POSITIONS: usize = 256;

/// A sequence's handle in the manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(u64);

/// Why a prompt can never be admitted (as opposed to having to wait for room).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmitError {
    EmptyPrompt,
    /// The prompt leaves no position to generate into.
    PromptTooLong {
        prompt: usize,
        ctx: usize,
    },
    /// Even alone, the sequence's worst case exceeds the whole budget.
    OverBudget {
        needed: usize,
        budget: usize,
    },
}

impl std::fmt::Display for AdmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdmitError::EmptyPrompt => write!(f, "the prompt is empty; at least one token is needed"),
            AdmitError::PromptTooLong { prompt, ctx } => {
                write!(f, "the prompt has {prompt} tokens but the context holds {ctx}, leaving no room to generate")
            }
            AdmitError::OverBudget { needed, budget } => {
                write!(f, "the sequence may need {needed} bytes of KV cache but the budget is {budget} bytes")
            }
        }
    }
}

impl std::error::Error for AdmitError {}

/// An admitted sequence: its handle and how much of its prompt is already in its cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    pub id: SeqId,
    /// Prompt tokens reused from an idle cache; prefill starts at this position.
    pub cached_tokens: usize,
}

struct Slot {
    id: SeqId,
    /// The tokens whose keys and values the cache holds, in order.
    tokens: Vec<u32>,
    cache: KvCache,
    /// Positions reserved while active; `None` when idle.
    reserved: Option<usize>,
    /// The prompt's length while active: positions certain to be written.
    prompt: usize,
    last_used: u64,
}

pub struct KvCacheManager {
    ctx: usize,
    budget: usize,
    footprint: KvFootprint,
    slots: Vec<Slot>,
    next_id: u64,
    clock: u64,
}

impl KvCacheManager {
    /// `footprint` is what the caches' storage costs (`KvCache::footprint`), so that what is
    /// counted against `budget_bytes` is what the buffers really take.
    pub fn new(ctx: usize, budget_bytes: usize, footprint: KvFootprint) -> KvCacheManager {
        KvCacheManager { ctx, budget: budget_bytes, footprint, slots: Vec::new(), next_id: 0, clock: 0 }
    }

    pub fn ctx(&self) -> usize {
        self.ctx
    }

    /// What a slot counts against the budget.
    fn charge(&self, s: &Slot) -> usize {
        match s.reserved {
            Some(p) => self.footprint.bytes(p).max(s.cache.bytes()),
            None => s.cache.bytes(),
        }
    }

    fn used(&self) -> usize {
        self.slots.iter().map(|s| self.charge(s)).sum()
    }

    /// Admits a sequence for `prompt` that may generate `max_new` tokens, reusing the idle cache
    /// that shares the longest prefix with it. `Ok(None)`: no room now, try again once an
    /// active sequence ends. `new_cache(capacity)` makes an empty cache.
    pub fn admit(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        new_cache: &dyn Fn(usize) -> KvCache,
    ) -> Result<Option<Admission>, AdmitError> {
        let p = prompt.len();
        if p == 0 {
            return Err(AdmitError::EmptyPrompt);
        }
        if p >= self.ctx {
            return Err(AdmitError::PromptTooLong { prompt: p, ctx: self.ctx });
        }
        let positions = (p + max_new.max(1)).min(self.ctx);
        let need = self.footprint.bytes(positions);
        if need > self.budget {
            return Err(AdmitError::OverBudget { needed: need, budget: self.budget });
        }
        let active: usize = self.slots.iter().filter(|s| s.reserved.is_some()).map(|s| self.charge(s)).sum();
        if active + need > self.budget {
            return Ok(None);
        }
        // The idle cache with the longest common prefix, the most recent on ties. At least the
        // last prompt token is left to prefill, so that the forward pass yields its logits.
        let mut best: Option<(usize, usize)> = None; // (slot index, common prefix)
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.reserved.is_none()) {
            let common = s.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(p - 1);
            let better = match best {
                None => common > 0,
                Some((j, c)) => common > c || (common == c && s.last_used > self.slots[j].last_used),
            };
            if better {
                best = Some((i, common));
            }
        }
        let reuse = best.map(|(i, _)| self.slots[i].id);
        // Evict idle caches, least recently used first, until the new worst case fits.
        loop {
            let others: usize = self.slots.iter().filter(|s| Some(s.id) != reuse).map(|s| self.charge(s)).sum();
            if others + need <= self.budget {
                break;
            }
            let victim = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.reserved.is_none() && Some(s.id) != reuse)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(i, _)| i)
                .expect("active worst cases fit, so some idle cache must be evictable");
            self.slots.swap_remove(victim);
        }
        let (id, cached) = match (reuse, best) {
            (Some(id), Some((_, common))) => {
                let s = self.slots.iter_mut().find(|s| s.id == id).expect("reused slot is present");
                s.tokens.truncate(common);
                s.cache.truncate(common);
                s.cache.shrink_to(positions);
                s.reserved = Some(positions);
                s.prompt = p;
                (id, common)
            }
            _ => {
                let id = SeqId(self.next_id);
                self.next_id += 1;
                let cache = new_cache(self.ctx);
                self.slots.push(Slot {
                    id,
                    tokens: Vec::new(),
                    cache,
                    reserved: Some(positions),
                    prompt: p,
                    last_used: 0,
                });
                (id, 0)
            }
        };
        Ok(Some(Admission { id, cached_tokens: cached }))
    }

    fn slot(&self, id: SeqId) -> &Slot {
        self.slots.iter().find(|s| s.id == id).expect("SeqId refers to a live sequence")
    }

    fn slot_mut(&mut self, id: SeqId) -> &mut Slot {
        self.slots.iter_mut().find(|s| s.id == id).expect("SeqId refers to a live sequence")
    }

    /// The tokens the sequence's cache holds.
    pub fn tokens(&self, id: SeqId) -> &[u32] {
        &self.slot(id).tokens
    }

    /// The sequence's cache, as its tokens stand.
    pub fn cache(&self, id: SeqId) -> (&[u32], &KvCache) {
        let s = self.slot(id);
        (&s.tokens, &s.cache)
    }

    /// Lets `load` extend an admitted sequence's cache with positions of `prompt` from
    /// elsewhere (the disk tier): it gets the cache and the positions held, and gives the new
    /// length, whose positions must be `prompt`'s. The tokens are recorded to match.
    pub fn load_prefix(&mut self, id: SeqId, prompt: &[u32], load: &dyn Fn(&mut KvCache, usize) -> usize) -> usize {
        let s = self.slot_mut(id);
        let len = load(&mut s.cache, s.tokens.len()).min(prompt.len());
        s.tokens.truncate(len);
        let held = s.tokens.len();
        s.tokens.extend_from_slice(&prompt[held..len]);
        debug_assert_eq!(s.tokens.len(), s.cache.len());
        len
    }

    /// Makes room for `n` more positions without reallocating during the forward pass:
    /// storage grows to the next chunk boundary, but never past the reservation. A growing
    /// cache is copied into its larger buffer while every stream waits for the step, so a
    /// prompt's positions are allocated at once, and growth after it is geometric (by half of
    /// what is held, and at least a chunk): a 4,000-token prompt copied its cache 16 times.
    pub fn prepare(&mut self, id: SeqId, n: usize) {
        let s = self.slot_mut(id);
        let target = s.cache.len() + n;
        let reserved = s.reserved.unwrap_or(target).max(target);
        let have = s.cache.room();
        if have >= target {
            return;
        }
        let want = target.max(s.prompt).max(have + have / 2);
        let cap = want.div_ceil(ALLOC_CHUNK_POSITIONS).saturating_mul(ALLOC_CHUNK_POSITIONS).min(reserved);
        s.cache.reserve(cap);
    }

    /// The caches of `ids`, in that order, for one batched forward pass.
    pub fn caches_mut(&mut self, ids: &[SeqId]) -> Vec<&mut KvCache> {
        let mut out: Vec<Option<&mut KvCache>> = (0..ids.len()).map(|_| None).collect();
        for s in self.slots.iter_mut() {
            if let Some(i) = ids.iter().position(|&id| id == s.id) {
                out[i] = Some(&mut s.cache);
            }
        }
        out.into_iter().map(|c| c.expect("every id is a live sequence, listed once")).collect()
    }

    /// Records that `tokens` were appended to the sequence's cache by a forward pass.
    pub fn record(&mut self, id: SeqId, tokens: &[u32]) {
        let s = self.slot_mut(id);
        s.tokens.extend_from_slice(tokens);
        debug_assert_eq!(s.tokens.len(), s.cache.len());
    }

    /// Forgets the sequence's positions from `len` on: the draft tokens verification rejected.
    pub fn truncate(&mut self, id: SeqId, len: usize) {
        let s = self.slot_mut(id);
        s.tokens.truncate(len);
        s.cache.truncate(len);
    }

    /// Ends a sequence: kept idle for prefix reuse (`keep`), or freed at once (cancelled,
    /// failed, or its cache no longer matches its tokens).
    pub fn finish(&mut self, id: SeqId, keep: bool) {
        self.clock += 1;
        let clock = self.clock;
        let Some(i) = self.slots.iter().position(|s| s.id == id) else {
            return;
        };
        let s = &mut self.slots[i];
        if keep && !s.tokens.is_empty() && s.tokens.len() == s.cache.len() {
            s.reserved = None;
            s.last_used = clock;
        } else {
            self.slots.swap_remove(i);
        }
    }

    /// Gives back what idle caches hold beyond their positions (room reserved for answers that
    /// ended early); true if any did. Shrinking copies a cache, so the decode thread calls this
    /// only when nothing runs.
    pub fn trim_idle(&mut self) -> bool {
        let mut trimmed = false;
        for s in self.slots.iter_mut().filter(|s| s.reserved.is_none()) {
            if s.cache.room() > s.cache.len() {
                s.cache.shrink_to(s.cache.len());
                trimmed = true;
            }
        }
        trimmed
    }

    pub fn snapshot(&self) -> KvSnapshot {
        let active = self.slots.iter().filter(|s| s.reserved.is_some()).count();
        KvSnapshot {
            sequences: self.slots.len(),
            active,
            idle: self.slots.len() - active,
            bytes: self.slots.iter().map(|s| s.cache.bytes()).sum(),
            reserved_bytes: self.slots.iter().filter(|s| s.reserved.is_some()).map(|s| self.charge(s)).sum(),
            budget_bytes: self.budget,
            bytes_per_position: self.footprint.bytes_per_position(),
        }
    }

    /// Bytes counted against the budget now (never more than the budget).
    pub fn charged_bytes(&self) -> usize {
        self.used()
    }
}

#[cfg(test)]
#[path = "kv_cache_tests.rs"]
mod tests;
