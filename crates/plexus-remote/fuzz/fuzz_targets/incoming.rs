//! The session's incoming half on one link fed arbitrary frames (split
//! from the input at 0xff bytes, all queued): never panics, each arrival
//! takes exactly its frames (a run: 2 to RUN_MAX messages to one actor
//! without receipts), message kinds never reach the session as control
//! frames, only malformed frames are refused (the checks:
//! `plexus_remote::fuzzing::incoming_bytes`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| plexus_remote::fuzzing::incoming_bytes(data));
