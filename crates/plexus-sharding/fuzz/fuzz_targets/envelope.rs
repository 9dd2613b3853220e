//! The entity envelope's header decoder on arbitrary bytes: never panics,
//! and whatever decodes encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    plexus_sharding::envelope::fuzz_decode(data);
});
