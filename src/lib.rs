//! mtplx-lite: a lean OpenAI-compatible server for local language models, observable by design.
//!
//! Layers, top to bottom (a layer only calls downward; `metrics` sits beside the flow):
//! `http` (bytes to requests and back) → `api` (routes, admission, handlers) → `engine` (decode
//! thread, scheduling, sampling, speculation) → `model` (file formats, tokenizer, architectures)
//! → `backend` (kernels). See `docs/architecture.md` for a page on every file, and `docs/` for users.
//!
//! `unsafe` lives only in the kernels and the memory maps of model files: every unsafe block
//! says why it is sound, and the layers above the model forbid it.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod backend;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod model;
pub mod store;
pub mod tune;
