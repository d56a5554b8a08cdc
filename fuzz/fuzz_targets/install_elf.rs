#![no_main]
//! `meshnft_fuzz_targets::install_elf` (its docs say what it covers).
libfuzzer_sys::fuzz_target!(|data: &[u8]| meshnft_fuzz_targets::install_elf(data));
