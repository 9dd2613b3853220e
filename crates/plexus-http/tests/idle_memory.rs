//! A connection that has been served and is idle holds none of the
//! buffers its requests came in: after a 512 KiB upload, or a 12 KiB head,
//! is answered, its `http` layer keeps less than a few KiB, under a
//! counting allocator. (Idle keep-alive connections would otherwise each
//! hold the largest request they ever received, until they close.)
//!
//! Runs without the libtest harness (`harness = false`): the allocator counts
//! every thread, and libtest's would allocate concurrently.

use std::alloc::System;
use std::time::Instant;

use bytes::Bytes;
use plexus_http::wire::{RequestMessage, ResponseMessage};
use plexus_http::{HttpConfig, HttpLayer, Response};
use plexus_net::{Frame, Layer, Output};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const BODY_LEN: usize = 512 << 10;
static BODY: [u8; BODY_LEN] = [b'x'; BODY_LEN];

/// What an idle connection's layer may keep: its bookkeeping, and a
/// receive buffer of a small request.
const IDLE_BOUND: usize = 8 << 10;

fn main() {
    let name = "an_idle_connection_holds_no_request_buffer";
    println!("\nrunning 1 test");
    an_idle_connection_holds_no_request_buffer();
    println!("test {name} ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
}

/// Feeds `request` to `layer`, answers it, and drops everything but the
/// layer.
fn serve_one(layer: &mut HttpLayer, out: &mut Output, now: Instant, request: Frame) {
    layer.handle_receive(now, request, out).unwrap();
    let up = out.pop_up().expect("the request goes up");
    let id = RequestMessage::decode(up.into_bytes()).unwrap().id;
    let answer = ResponseMessage::Whole {
        id,
        response: Response::new(200, "ok"),
    };
    layer.handle_send(now, answer.encode(), out).unwrap();
    while out.pop_down().is_some() {}
    assert!(out.close_reason().is_none());
}

/// Bytes allocated and not freed since `region` began.
fn held(region: &Region<'_, System>) -> isize {
    let s = region.change();
    // (A reallocation's growth or shrinking is counted in these two.)
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn an_idle_connection_holds_no_request_buffer() {
    let now = Instant::now();
    let mut layer = HttpLayer::new(HttpConfig::default(), now);
    let mut out = Output::new();
    // A small request first: the layer's and the output's queues take
    // their sizes.
    let small = || Frame::from_payload(Bytes::from_static(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    serve_one(&mut layer, &mut out, now, small());
    serve_one(&mut layer, &mut out, now, small());

    let region = Region::new(GLOBAL);
    let mut upload = Frame::from_payload(Bytes::from(format!(
        "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: {BODY_LEN}\r\n\r\n"
    )));
    upload.push_payload(Bytes::from_static(&BODY));
    serve_one(&mut layer, &mut out, now, upload);
    let after_upload = held(&region);
    assert!(
        after_upload < IDLE_BOUND as isize,
        "after a {BODY_LEN} byte upload, the idle connection holds {after_upload} bytes"
    );

    let region = Region::new(GLOBAL);
    let mut head = b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 12 << 10));
    head.extend_from_slice(b"\r\n\r\n");
    serve_one(
        &mut layer,
        &mut out,
        now,
        Frame::from_payload(Bytes::from(head)),
    );
    let after_head = held(&region);
    assert!(
        after_head < IDLE_BOUND as isize,
        "after a 12 KiB head, the idle connection holds {after_head} bytes"
    );
    println!(
        "held after a {BODY_LEN} byte upload: {after_upload} bytes; after a 12 KiB head: {after_head} bytes"
    );
}
