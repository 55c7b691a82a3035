//! Kernels. `cpu` is the default backend; a Metal backend on mlx-rs (macOS) implements the same
//! operations later.

pub mod cpu;
pub mod dtype;

pub use dtype::DType;
