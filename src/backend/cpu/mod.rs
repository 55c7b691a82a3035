//! The CPU backend: quantized kernels with runtime SIMD dispatch and a worker pool.
