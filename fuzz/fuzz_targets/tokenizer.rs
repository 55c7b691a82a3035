#![no_main]

// Loaded before fuzzing starts, so that the loading time does not count against the first
// input's timeout.
libfuzzer_sys::fuzz_target!(init: mtplx_fuzz_harness::tokenizer::init(), |data: &[u8]| mtplx_fuzz_harness::tokenizer::run(data));
