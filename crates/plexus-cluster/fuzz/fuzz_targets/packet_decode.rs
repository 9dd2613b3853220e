//! The membership packet decoder on arbitrary bytes: never panics, and
//! whatever decodes encodes back to bytes that decode to the same packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_cluster::wire::Packet;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::decode(data) {
        let again = Packet::decode(&p.encode()).expect("an encoded packet decodes");
        assert_eq!(again, p);
    }
});
