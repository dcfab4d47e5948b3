//! Fuzz target: see [`relaymq::fuzzing::storage_record`] and docs/security.md §7.2.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relaymq::fuzzing::storage_record(data));
