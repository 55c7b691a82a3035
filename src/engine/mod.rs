//! The decode thread and everything it owns: job intake, scheduling with continuous batching,
//! sampling, streaming detokenization and the KV caches of all sequences.
//!
//! The API layer builds a [`Job`] (with [`Job::new`] for the reply channel), submits it with
//! [`Engine::submit`], and reads [`Event`]s until `Event::Done`.
#![forbid(unsafe_code)]

pub mod bench;
pub mod detok;
pub mod job;
pub mod kv_cache;
pub mod sampler;
pub mod scheduler;
#[cfg(test)]
pub(crate) mod testing;
pub mod thread;

pub use detok::{StreamDecoder, TokenDecoder};
pub use job::{Event, FinishReason, GenStats, Job, KvSnapshot, SamplingParams, MAX_TOP_LOGPROBS};
pub use thread::{Engine, EngineConfig, SubmitError, DEFAULT_KV_CACHE_BYTES};
