//! Fuzz target: see [`relaymq::fuzzing::amqp_frame`] and docs/fuzzing-notes.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relaymq::fuzzing::amqp_frame(data));
