//! Sampler cost per token on a vocabulary the size of the demo model's (49152), for the
//! settings the API uses most. Run: `cargo bench --bench engine_sampler`.

use mtplx_lite::engine::sampler::{Rng, Sampler};
use mtplx_lite::engine::SamplingParams;
use std::time::Instant;

const VOCAB: usize = 49152;
const TOKENS: usize = 2000;

fn main() {
    let mut rng = Rng::new(1);
    // Logits shaped like a language model's: most mass on a few dozen tokens.
    let rows: Vec<Vec<f32>> =
        (0..8).map(|_| (0..VOCAB).map(|_| (rng.next_f64().powi(8) * 30.0 - 5.0) as f32).collect()).collect();
    let cases: [(&str, SamplingParams, bool, usize); 7] = [
        ("greedy", SamplingParams::greedy(), false, 0),
        ("temperature 0.8", SamplingParams { temperature: 0.8, seed: Some(1), ..Default::default() }, false, 0),
        (
            "t 0.8 top-k 40 top-p 0.95",
            SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed: Some(1), ..Default::default() },
            false,
            0,
        ),
        (
            "t 0.8 top-p 0.95",
            SamplingParams { temperature: 0.8, top_p: 0.95, seed: Some(1), ..Default::default() },
            false,
            0,
        ),
        (
            "t 0.8 + penalties",
            SamplingParams {
                temperature: 0.8,
                presence_penalty: 0.5,
                frequency_penalty: 0.5,
                seed: Some(1),
                ..Default::default()
            },
            false,
            0,
        ),
        (
            "t 0.8 top-p 0.95 min-p 0.05 + penalties",
            SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                min_p: 0.05,
                presence_penalty: 0.5,
                frequency_penalty: 0.5,
                seed: Some(1),
                ..Default::default()
            },
            false,
            0,
        ),
        ("greedy + logprobs + top 20", SamplingParams::greedy(), true, 20),
    ];
    for (name, params, lp, top) in cases {
        let mut s = Sampler::new(&params);
        let t = Instant::now();
        let mut sum = 0u64;
        for i in 0..TOKENS {
            sum += s.sample(&rows[i % rows.len()], lp, top).id as u64;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / TOKENS as f64;
        println!("{name:<42} {us:>8.1} us/token  (checksum {sum})");
    }
}
