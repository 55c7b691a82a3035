//! The decode thread and everything it owns: job intake, scheduling with continuous batching,
//! sampling, streaming detokenization and the KV caches of all sequences.

pub mod detok;
pub mod job;
pub mod kv_cache;
pub mod sampler;
