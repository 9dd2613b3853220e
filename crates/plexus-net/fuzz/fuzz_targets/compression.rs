//! Arbitrary bytes into the decompressor: never panics, never allocates more
//! than the bound.
#![no_main]
use libfuzzer_sys::fuzz_target;
use plexus_net::layers::compression;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(out)) = compression::decode(data, 1 << 20) {
        assert!(out.len() <= 1 << 20);
    }
});
