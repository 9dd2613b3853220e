//! The peer session fed arbitrary frames (split from the input at 0xff
//! bytes, undecodable pieces skipped): never panics, answers each request
//! at most once, tells or counts every answer, hands back only messages
//! (the checks: `plexus_remote::fuzzing::session_frames`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| plexus_remote::fuzzing::session_bytes(data));
