#![no_main]
//! `meshnft_fuzz_targets::node_watch` (its docs say what it covers), with the
//! structure-aware mutator of `meshnft_fuzz_targets::json` (lines of JSON).
libfuzzer_sys::fuzz_target!(|data: &[u8]| meshnft_fuzz_targets::node_watch(data));

libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    meshnft_fuzz_targets::json::mutate(data, size, max_size, seed, libfuzzer_sys::fuzzer_mutate)
});
