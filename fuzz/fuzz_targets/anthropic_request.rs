#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mtplx_fuzz_harness::anthropic_request::run(data));
