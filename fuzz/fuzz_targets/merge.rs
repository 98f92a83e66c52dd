#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz::merge(data));
