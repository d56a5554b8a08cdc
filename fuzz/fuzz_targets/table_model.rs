#![no_main]
//! `meshnft_fuzz_targets::table_model` (its docs say what it checks).
libfuzzer_sys::fuzz_target!(|data: &[u8]| meshnft_fuzz_targets::table_model(data));
