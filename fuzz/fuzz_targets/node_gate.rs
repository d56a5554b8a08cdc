#![no_main]
//! `meshnft_fuzz_targets::node_gate` (its docs say what it covers).
libfuzzer_sys::fuzz_target!(|data: &[u8]| meshnft_fuzz_targets::node_gate(data));
