//! The request decoder on arbitrary bytes, fed in pieces whose sizes the
//! input's first byte picks: never panics, refuses with a status it
//! documents, holds no more than a head and a body, and decodes the same
//! requests whichever way the bytes are cut.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use plexus_http::{Decoded, Limits, RequestDecoder, RequestError};

const LIMITS: Limits = Limits {
    max_head: 1024,
    max_headers: 16,
    max_body: 4096,
    max_chunk_line: 64,
    max_trailers: 512,
};

fn run(input: &[u8], piece: usize) -> (Vec<Decoded>, Option<RequestError>) {
    let mut d = RequestDecoder::new(LIMITS);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for part in input.chunks(piece.max(1)) {
        buf.extend_from_slice(part);
        loop {
            match d.decode(&mut buf) {
                Ok(Some(x)) => out.push(x),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
        assert!(buf.len() <= LIMITS.max_head + LIMITS.max_body + 2 + piece.max(1) + 64);
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let (whole, whole_err) = run(input, input.len());
    let (pieces, pieces_err) = run(input, usize::from(first % 32) + 1);
    if let Some(e) = &whole_err {
        assert!(matches!(e.status(), 400 | 413 | 417 | 431 | 501 | 505));
    }
    // Requests are the same either way (an interim Continue may be asked
    // only when the body is not there yet, so compare requests alone).
    let requests = |v: &[Decoded]| -> Vec<plexus_http::Request> {
        v.iter()
            .filter_map(|d| match d {
                Decoded::Request(r) => Some(r.clone()),
                Decoded::Continue => None,
            })
            .collect()
    };
    if whole_err.is_none() && pieces_err.is_none() {
        assert_eq!(requests(&whole), requests(&pieces));
    }
});
