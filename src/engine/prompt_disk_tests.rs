//! Unit tests of the disk tier: blocks round-trip, eviction, damage, restart, clearing.

use super::*;
use crate::backend::KvFormat;

fn cache_of(tokens: usize, salt: f32) -> KvCache {
    let kvd = 4;
    let mut c = KvCache::new(2, kvd, 4096, KvFormat::F16);
    let rows: Vec<f32> = (0..tokens * kvd).map(|i| (i as f32 * 0.01 + salt).sin()).collect();
    for l in 0..2 {
        c.append(l, &rows, &rows);
    }
    c.advance(tokens);
    c
}

fn wait_for(tier: &DiskTier, blocks: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tier.status().stored_blocks < blocks as u64 || !tier.lock().pending.is_empty() {
        assert!(Instant::now() < deadline, "{:?}", tier.status());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn blocks_round_trip_are_evicted_oldest_first_and_damage_is_caught() {
    let dir = std::env::temp_dir().join(format!("mtplx-disk-tier-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".tmp-1-1"), b"a write a crash cut short").unwrap();
    let shape = shape_of(&cache_of(0, 0.0));
    // Room for four blocks.
    let cfg = DiskConfig { dir: dir.clone(), max_bytes: 4 * shape.file_len() as u64, identity: [3; 32] };
    let tier = DiskTier::open(cfg.clone()).unwrap();
    assert!(!dir.join(".tmp-1-1").exists(), "a stray temporary file is deleted at start");

    let a: Vec<u32> = (0..600).collect();
    let ca = cache_of(600, 0.0);
    tier.store(&a, &ca);
    wait_for(&tier, 2);
    // A fresh cache gets the prompt's two whole blocks, bit for bit.
    let mut fresh = cache_of(0, 0.0);
    assert_eq!(tier.load(&a, 0, &mut fresh), (512, Lookup::Hit));
    for l in 0..2 {
        assert_eq!(ca.stored(l, 0, 512), fresh.stored(l, 0, 512));
    }
    // A cache holding 300 positions from memory is rewritten from 256 on, to 512.
    let mut part = cache_of(300, 0.0);
    assert_eq!(tier.load(&a, 300, &mut part), (512, Lookup::Hit));
    assert_eq!(tier.load(&a[..300], 0, &mut cache_of(0, 0.0)).1, Lookup::Hit);
    assert_eq!(tier.load(&a[..256], 0, &mut cache_of(0, 0.0)), (0, Lookup::TooShort));
    assert_eq!(tier.load(&a, 520, &mut cache_of(520, 0.0)), (520, Lookup::Held));

    // Three more blocks of another prompt: the least recently used block goes, a's second
    // (the 300-token lookups touched only its first).
    let b: Vec<u32> = (1000..1800).collect();
    tier.store(&b, &cache_of(800, 0.5));
    wait_for(&tier, 5);
    assert_eq!(tier.status().blocks, 4);
    assert_eq!(tier.load(&a, 0, &mut cache_of(0, 0.0)), (256, Lookup::Hit));
    assert_eq!(tier.load(&a, 256, &mut cache_of(256, 0.0)), (256, Lookup::Evicted));
    assert_eq!(tier.load(&b, 0, &mut cache_of(0, 0.0)), (768, Lookup::Hit));
    let other: Vec<u32> = (5000..5600).collect();
    assert_eq!(tier.load(&other, 0, &mut cache_of(0, 0.0)), (0, Lookup::NoEntry));

    // A restart finds the blocks; a truncated one is deleted, not used; another model's
    // identity finds none.
    drop(tier);
    let tier = DiskTier::open(cfg.clone()).unwrap();
    assert_eq!(tier.status().blocks, 4);
    let keys = prompt_block::chain(&cfg.identity, &b[..768]);
    let second = file_of(&dir, &keys[1]);
    let bytes = std::fs::read(&second).unwrap();
    std::fs::write(&second, &bytes[..bytes.len() - 7]).unwrap();
    assert_eq!(tier.load(&b, 0, &mut cache_of(0, 0.0)), (256, Lookup::Hit), "the first block still loads");
    assert!(!second.exists());
    assert_eq!(tier.status().bad_blocks, 1);
    let foreign = DiskTier::open(DiskConfig { identity: [4; 32], ..cfg }).unwrap();
    assert_eq!(foreign.load(&b, 0, &mut cache_of(0, 0.0)), (0, Lookup::NoEntry));
    assert_eq!(tier.clear().0, 3);
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}
