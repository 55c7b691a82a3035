//! The KV caches of every sequence: admission against the context length and the memory
//! budget, prefix reuse from idle caches, and least-recently-used eviction.
//!
//! Budget policy: a sequence is admitted only when its worst case (prompt plus `max_tokens`,
//! capped at the context) fits beside the worst cases of the active sequences and the caches kept
//! idle; idle caches are evicted, least recently used first, to make that room. Active sequences
//! therefore never run out of memory mid-answer (no preemption is needed), while storage is still
//! allocated lazily, in chunks, as positions are written. A job that does not fit waits.

use super::job::KvSnapshot;
use crate::model::KvCache;

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
    bytes_per_position: usize,
    slots: Vec<Slot>,
    next_id: u64,
    clock: u64,
}

impl KvCacheManager {
    /// `bytes_per_position` is what one position costs across layers, keys and values
    /// (`KvCache::bytes_per_position`).
    pub fn new(ctx: usize, budget_bytes: usize, bytes_per_position: usize) -> KvCacheManager {
        KvCacheManager { ctx, budget: budget_bytes, bytes_per_position, slots: Vec::new(), next_id: 0, clock: 0 }
    }

    pub fn ctx(&self) -> usize {
        self.ctx
    }

    /// What a slot counts against the budget.
    fn charge(&self, s: &Slot) -> usize {
        match s.reserved {
            Some(p) => (p * self.bytes_per_position).max(s.cache.bytes()),
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
        let need = positions * self.bytes_per_position;
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
                let kv_dim = s.cache.kv_dim();
                for l in s.cache.k.iter_mut().chain(s.cache.v.iter_mut()) {
                    l.shrink_to(positions * kv_dim);
                }
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

    /// Makes room for `n` more positions without reallocating during the forward pass:
    /// storage grows to the next chunk boundary, but never past the reservation. A growing
    /// cache is copied into its larger buffer while every stream waits for the step, so a
    /// prompt's positions are allocated at once, and growth after it is geometric (by half of
    /// what is held, and at least a chunk): a 4,000-token prompt copied its cache 16 times.
    pub fn prepare(&mut self, id: SeqId, n: usize) {
        let s = self.slot_mut(id);
        let target = s.cache.len() + n;
        let reserved = s.reserved.unwrap_or(target).max(target);
        let kv_dim = s.cache.kv_dim();
        let have = s.cache.k.first().map_or(usize::MAX, |l| l.capacity() / kv_dim.max(1));
        if have >= target {
            return;
        }
        let want = target.max(s.prompt).max(have + have / 2);
        let cap = want.div_ceil(ALLOC_CHUNK_POSITIONS).saturating_mul(ALLOC_CHUNK_POSITIONS).min(reserved);
        for l in s.cache.k.iter_mut().chain(s.cache.v.iter_mut()) {
            l.reserve_exact(cap * kv_dim - l.len());
        }
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

    pub fn snapshot(&self) -> KvSnapshot {
        let active = self.slots.iter().filter(|s| s.reserved.is_some()).count();
        KvSnapshot {
            sequences: self.slots.len(),
            active,
            idle: self.slots.len() - active,
            bytes: self.slots.iter().map(|s| s.cache.bytes()).sum(),
            reserved_bytes: self.slots.iter().filter(|s| s.reserved.is_some()).map(|s| self.charge(s)).sum(),
            budget_bytes: self.budget,
            bytes_per_position: self.bytes_per_position,
        }
    }

    /// Bytes counted against the budget now (never more than the budget).
    pub fn charged_bytes(&self) -> usize {
        self.used()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYERS: usize = 2;
    /// A row of one cache line (the caches hold whole lines, `backend::KvBuf`), so that the
    /// storage counted below is exactly the positions held.
    const KV_DIM: usize = 32;
    /// 2 layers * (k + v) * 32 values * 2 bytes (f16).
    const BPP: usize = LAYERS * 2 * KV_DIM * 2;

    fn mk(cap: usize) -> KvCache {
        KvCache::position_major(LAYERS, KV_DIM, cap)
    }

    /// What a model does to a cache in a forward pass, then what the scheduler records.
    fn feed(m: &mut KvCacheManager, id: SeqId, tokens: &[u32]) {
        m.prepare(id, tokens.len());
        let c = &mut m.caches_mut(&[id])[0];
        let start = c.len();
        let rows: Vec<f32> = tokens
            .iter()
            .enumerate()
            .flat_map(|(i, &t)| std::iter::repeat_n((t as f32) * 1000.0 + (start + i) as f32, KV_DIM))
            .collect();
        for l in 0..LAYERS {
            c.append(l, &rows, &rows);
        }
        c.advance(tokens.len());
        m.record(id, tokens);
    }

    fn admit(m: &mut KvCacheManager, prompt: &[u32], max_new: usize) -> Admission {
        m.admit(prompt, max_new, &mk).unwrap().expect("room")
    }

    #[test]
    fn next_turn_reuses_the_common_prefix_and_leaves_the_last_token() {
        let mut m = KvCacheManager::new(64, 64 * BPP * 4, BPP);
        let a = admit(&mut m, &[1, 2, 3, 4], 8);
        assert_eq!(a.cached_tokens, 0);
        feed(&mut m, a.id, &[1, 2, 3, 4]);
        feed(&mut m, a.id, &[9]); // a generated token, fed back
        m.finish(a.id, true);
        // The next turn extends the whole history: all of it is cached.
        let b = admit(&mut m, &[1, 2, 3, 4, 9, 7, 7], 8);
        assert_eq!((b.id, b.cached_tokens), (a.id, 5));
        assert_eq!(m.tokens(b.id), &[1, 2, 3, 4, 9]);
        m.finish(b.id, true);
        // A diverging prompt reuses up to the divergence; the cache is truncated there.
        let c = admit(&mut m, &[1, 2, 8], 8);
        assert_eq!(c.cached_tokens, 2);
        assert_eq!(m.caches_mut(&[c.id])[0].len(), 2);
        m.finish(c.id, true);
        // The very same prompt again: the last token is still prefilled.
        let d = admit(&mut m, &[1, 2], 8);
        assert_eq!(d.cached_tokens, 1);
        // Nothing in common: a fresh cache, and the idle one is left alone.
        m.finish(d.id, true);
        let e = admit(&mut m, &[5, 5, 5], 8);
        assert_eq!(e.cached_tokens, 0);
        assert_ne!(e.id, d.id);
        assert_eq!(m.snapshot().sequences, 2);
    }

    #[test]
    fn cancelled_sequences_free_their_cache() {
        let mut m = KvCacheManager::new(64, 64 * BPP * 4, BPP);
        let a = admit(&mut m, &[1, 2, 3], 4);
        feed(&mut m, a.id, &[1, 2, 3]);
        assert!(m.snapshot().bytes > 0);
        m.finish(a.id, false);
        assert_eq!(
            m.snapshot(),
            KvSnapshot { budget_bytes: 64 * BPP * 4, bytes_per_position: BPP, ..Default::default() }
        );
    }

    #[test]
    fn storage_grows_in_chunks_within_the_reservation() {
        let mut m = KvCacheManager::new(4096, 4096 * BPP, BPP);
        let a = admit(&mut m, &[1; 10], 290);
        feed(&mut m, a.id, &[1; 10]);
        assert_eq!(m.snapshot().bytes, ALLOC_CHUNK_POSITIONS * BPP);
        for _ in 0..260 {
            feed(&mut m, a.id, &[2]);
        }
        // 270 positions: grown once more, but capped at the 300 reserved.
        assert_eq!(m.snapshot().bytes, 300 * BPP);
        assert_eq!(m.snapshot().reserved_bytes, 300 * BPP);
    }

    #[test]
    fn admission_waits_for_room_and_evicts_idle_caches_lru_first() {
        // Room for exactly two worst cases of 16 positions.
        let mut m = KvCacheManager::new(64, 32 * BPP, BPP);
        let a = admit(&mut m, &[1, 1, 1, 1], 12);
        let b = admit(&mut m, &[2, 2, 2, 2], 12);
        assert_eq!(m.admit(&[3, 3, 3, 3], 12, &mk), Ok(None), "both active: must wait");
        feed(&mut m, a.id, &[1, 1, 1, 1]);
        feed(&mut m, b.id, &[2, 2, 2, 2]);
        m.finish(a.id, true); // a is now the least recently used idle cache
        m.finish(b.id, true);
        assert_eq!(m.snapshot().idle, 2);
        let c = admit(&mut m, &[3, 3, 3, 3], 12);
        assert_eq!(c.cached_tokens, 0);
        let s = m.snapshot();
        assert_eq!((s.active, s.idle), (1, 1));
        assert!(m.charged_bytes() <= 32 * BPP);
        // b's prefix survived, a's was evicted.
        m.finish(c.id, false);
        assert_eq!(admit(&mut m, &[2, 2, 9], 4).cached_tokens, 2);
        assert_eq!(admit(&mut m, &[1, 1, 9], 4).cached_tokens, 0);
    }

    #[test]
    fn impossible_prompts_are_refused_with_the_bound() {
        let mut m = KvCacheManager::new(8, 16 * BPP, BPP);
        assert_eq!(m.admit(&[], 4, &mk), Err(AdmitError::EmptyPrompt));
        assert_eq!(m.admit(&[1; 8], 4, &mk), Err(AdmitError::PromptTooLong { prompt: 8, ctx: 8 }));
        let mut small = KvCacheManager::new(64, 10 * BPP, BPP);
        let e = small.admit(&[1; 5], 20, &mk).unwrap_err();
        assert_eq!(e, AdmitError::OverBudget { needed: 25 * BPP, budget: 10 * BPP });
        assert!(e.to_string().contains(&(10 * BPP).to_string()));
        // max_tokens beyond the context is capped by it, so this fits.
        assert!(m.admit(&[1; 4], 1000, &mk).unwrap().is_some());
    }

    /// Storage a sequence holds, in positions (keys of layer 0).
    fn held(m: &mut KvCacheManager, id: SeqId) -> usize {
        m.caches_mut(&[id])[0].k[0].capacity() / KV_DIM
    }

    #[test]
    fn a_prompt_is_allocated_at_once_and_growth_after_it_is_geometric() {
        let mut m = KvCacheManager::new(8192, 8192 * BPP, BPP);
        let prompt = vec![3u32; 1000];
        let a = admit(&mut m, &prompt, 5000);
        // The first chunk of a paced prompt already holds the whole prompt, in chunks.
        feed(&mut m, a.id, &prompt[..16]);
        assert_eq!(held(&mut m, a.id), 1024);
        for chunk in prompt[16..].chunks(100) {
            feed(&mut m, a.id, chunk);
        }
        assert_eq!(held(&mut m, a.id), 1024, "no growth while the prompt is fed");
        // Generation past it: by half of what is held, rounded up to chunks.
        feed(&mut m, a.id, &[4; 25]);
        assert_eq!(held(&mut m, a.id), 1536);
        feed(&mut m, a.id, &[5; 1000]);
        assert_eq!(held(&mut m, a.id), 2304);
        feed(&mut m, a.id, &[5; 2000]);
        assert_eq!(held(&mut m, a.id), 4096);
        // Never past the reservation (prompt plus max_tokens).
        feed(&mut m, a.id, &[5; 1975]);
        assert_eq!(held(&mut m, a.id), 6000);
    }
}
