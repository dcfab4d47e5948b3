//! Fuzz target: see [`relaymq::fuzzing::storage_record`] and docs/fuzzing-notes.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relaymq::fuzzing::storage_record(data));
