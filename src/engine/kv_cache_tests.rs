//! The KV cache manager: prefix reuse, budget, eviction and storage growth.

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

fn fp() -> KvFootprint {
    mk(0).footprint()
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
    let mut m = KvCacheManager::new(64, 64 * BPP * 4, fp());
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
    let mut m = KvCacheManager::new(64, 64 * BPP * 4, fp());
    let a = admit(&mut m, &[1, 2, 3], 4);
    feed(&mut m, a.id, &[1, 2, 3]);
    assert!(m.snapshot().bytes > 0);
    m.finish(a.id, false);
    assert_eq!(m.snapshot(), KvSnapshot { budget_bytes: 64 * BPP * 4, bytes_per_position: BPP, ..Default::default() });
}

#[test]
fn storage_grows_in_chunks_within_the_reservation() {
    let mut m = KvCacheManager::new(4096, 4096 * BPP, fp());
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
    let mut m = KvCacheManager::new(64, 32 * BPP, fp());
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
    let mut m = KvCacheManager::new(8, 16 * BPP, fp());
    assert_eq!(m.admit(&[], 4, &mk), Err(AdmitError::EmptyPrompt));
    assert_eq!(m.admit(&[1; 8], 4, &mk), Err(AdmitError::PromptTooLong { prompt: 8, ctx: 8 }));
    let mut small = KvCacheManager::new(64, 10 * BPP, fp());
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
    let mut m = KvCacheManager::new(8192, 8192 * BPP, fp());
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

/// [`feed`] for caches in `format`, whose keys are stored in whole groups of positions.
fn grouped(format: crate::backend::KvFormat) -> impl Fn(usize) -> KvCache {
    move |cap| KvCache::new(LAYERS, KV_DIM, cap, format)
}

/// Sequences whose worst cases end inside a group of keys (37 positions; 45 at the context's
/// end), several at once, fed to their ends: what the buffers hold never exceeds the budget,
/// which holds exactly their worst cases. A reservation of whole positions once let the last
/// partial group reallocate the keys and double them.
#[test]
fn the_budget_holds_when_positions_end_inside_a_group() {
    use crate::backend::KvFormat;
    for format in [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles] {
        let new_cache = grouped(format);
        let footprint = new_cache(0).footprint();
        // (context, prompt, max_new): 11 + 26 = 37 positions; 37 + 100 capped at a context of 45.
        for (ctx, prompt, max_new) in [(300, 11, 26), (45, 37, 100)] {
            let positions = (prompt + max_new).min(ctx);
            let budget = 3 * footprint.bytes(positions);
            let mut m = KvCacheManager::new(ctx, budget, footprint);
            let ids: Vec<SeqId> = (0..3)
                .map(|i| m.admit(&vec![i as u32 + 1; prompt], max_new, &new_cache).unwrap().expect("room").id)
                .collect();
            assert_eq!(m.admit(&[9; 5], max_new, &new_cache), Ok(None), "{format:?}: a fourth must wait");
            for &id in &ids {
                feed(&mut m, id, &vec![1; prompt]);
            }
            for _ in prompt..positions {
                for &id in &ids {
                    feed(&mut m, id, &[2]);
                    let s = m.snapshot();
                    assert!(s.bytes <= budget, "{format:?} {positions} positions: {} bytes > {budget}", s.bytes);
                    assert!(m.charged_bytes() <= budget, "{format:?}: charged {} > {budget}", m.charged_bytes());
                }
            }
            assert_eq!(m.snapshot().bytes, budget, "{format:?}: the worst cases, exactly");
        }
    }
}

/// An answer that ends long before its `max_tokens` leaves room reserved in its cache; once the
/// engine is idle, the idle cache gives it back and keeps only its positions (still reusable).
#[test]
fn idle_caches_give_back_the_room_their_answers_did_not_use() {
    let new_cache = grouped(crate::backend::KvFormat::F16);
    let footprint = new_cache(0).footprint();
    let mut m = KvCacheManager::new(4096, 4096 * BPP, footprint);
    let a = m.admit(&[1; 300], 3000, &new_cache).unwrap().expect("room");
    feed(&mut m, a.id, &[1; 300]);
    feed(&mut m, a.id, &[2; 5]);
    assert!(m.snapshot().bytes > footprint.bytes(305), "room for the answer was reserved");
    m.finish(a.id, true);
    assert!(m.trim_idle());
    assert_eq!(m.snapshot().bytes, footprint.bytes(305));
    assert!(!m.trim_idle(), "nothing more to give back");
    let b = m.admit(&[[1; 300].as_slice(), &[2; 5], &[7]].concat(), 8, &new_cache).unwrap().expect("room");
    assert_eq!(b.cached_tokens, 305);
}

/// The most positions a budget holds is what the footprint says fits, and one more does not.
#[test]
fn positions_within_a_budget_count_whole_groups() {
    let f = grouped(crate::backend::KvFormat::Bf16Tiles)(0).footprint();
    for budget in [f.bytes(37), f.bytes(37) + 1, 1_000_000, 123_457] {
        let n = f.positions_within(budget);
        assert!(f.bytes(n) <= budget && f.bytes(n + 1) > budget, "{budget}: {n}");
    }
}
