//! A permessage-deflate "zip bomb" (a message of about 1 MB on the wire
//! that inflates to 1 GiB) is refused with 1009 by a connection whose
//! messages are bounded at 1 MiB, and costs it no more than that bound in
//! memory: a counting global allocator sees the receive path allocate
//! the bound and less than 256 KiB more in all.
//!
//! Runs without the libtest harness (`harness = false`): the allocator counts
//! every thread, and libtest's would allocate concurrently.

use std::alloc::System;
use std::time::Instant;

use bytes::{BufMut, BytesMut};
use flate2::{Compress, Compression, FlushCompress};
use plexus_http::websocket::handshake::Extensions;
use plexus_http::websocket::{
    CloseCode, DeflateConfig, DeflateParams, Role, WebSocket, WsConfig, WsEvent,
};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const MAX_MESSAGE: usize = 1 << 20;

/// What the receive path may allocate besides the message: the
/// decompressor's window and a frame's bookkeeping.
const SLACK: usize = 256 << 10;

fn main() {
    let name = "a_zip_bomb_costs_no_more_than_the_message_bound";
    println!("\nrunning 1 test");
    a_zip_bomb_costs_no_more_than_the_message_bound();
    println!("test {name} ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
}

/// A masked, compressed binary frame that inflates to `mib` MiB of zeros:
/// a first MiB of zeros, then the same block of back references (each onto
/// zeros) over and over.
fn bomb(mib: usize) -> BytesMut {
    let mut compress = Compress::new(Compression::best(), false);
    let zeros = vec![0u8; 1 << 20];
    let block = |compress: &mut Compress| {
        let mut out = Vec::with_capacity(64 << 10);
        let before = compress.total_in();
        compress
            .compress_vec(&zeros, &mut out, FlushCompress::Sync)
            .expect("zeros compress");
        assert_eq!(compress.total_in() - before, 1 << 20, "all taken");
        out
    };
    let first = block(&mut compress);
    let again = block(&mut compress);
    let mut payload = first;
    for _ in 1..mib {
        payload.extend_from_slice(&again);
    }
    // The sync flush's tail goes, as RFC 7692 says.
    payload.truncate(payload.len() - 4);
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut frame = BytesMut::with_capacity(payload.len() + 14);
    frame.put_u8(0x80 | 0x40 | 0x2); // FIN, RSV1, binary
    frame.put_u8(0x80 | 127);
    frame.put_u64(payload.len() as u64);
    frame.put_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

fn a_zip_bomb_costs_no_more_than_the_message_bound() {
    let mut wire = bomb(1024);
    let bomb_len = wire.len();
    assert!(wire.len() < 4 << 20, "{} bytes on the wire", wire.len());
    let config = WsConfig {
        max_frame: 16 << 20,
        max_message: MAX_MESSAGE,
        deflate: Some(DeflateConfig::default()),
        ..WsConfig::default()
    };
    let extensions = Extensions {
        deflate: Some(DeflateParams::default()),
    };
    let mut server = WebSocket::new(Role::Server, config, 0).with_extensions(extensions);

    let region = Region::new(GLOBAL);
    let event = server.handle_receive(Instant::now(), &mut wire);
    let stats = region.change();

    assert!(
        matches!(
            event,
            Some(WsEvent::Closed {
                code: Some(CloseCode::MESSAGE_TOO_BIG),
                by_us: true,
                ..
            })
        ),
        "{event:?}"
    );
    // Every allocation and every growth of one (frees not taken off): an
    // upper bound of what the bomb held at once.
    let grown = stats.bytes_allocated;
    assert!(
        grown < MAX_MESSAGE + SLACK,
        "the bomb cost {grown} bytes: {stats:?}"
    );
    // Control: the counter moves (the inflated bytes took about the bound).
    assert!(grown > MAX_MESSAGE, "{stats:?}");
    println!(
        "a {} byte frame inflating to 1 GiB: refused with 1009 after {grown} bytes allocated",
        bomb_len
    );
}
