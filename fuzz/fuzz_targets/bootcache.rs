#![no_main]
//! `meshnft_fuzz_targets::bootcache` (its docs say what it covers).
libfuzzer_sys::fuzz_target!(|data: &[u8]| meshnft_fuzz_targets::bootcache(data));
