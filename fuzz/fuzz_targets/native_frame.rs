//! Fuzz target: see [`relaymq::fuzzing::native_frame`] and docs/security.md §7.2.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relaymq::fuzzing::native_frame(data));
