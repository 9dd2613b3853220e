use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::response::{encode_chunk, encode_last_chunk, encode_response, Response};

fn decode_all(input: &[u8]) -> Result<Vec<Decoded>, RequestError> {
    decode_all_with(input, Limits::default())
}

fn decode_all_with(input: &[u8], limits: Limits) -> Result<Vec<Decoded>, RequestError> {
    let mut d = RequestDecoder::new(limits);
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(x) = d.decode(&mut buf)? {
        out.push(x);
    }
    Ok(out)
}

fn request(input: &[u8]) -> Request {
    match decode_all(input).unwrap().as_slice() {
        [Decoded::Request(r)] => r.clone(),
        other => panic!("expected one request, got {other:?}"),
    }
}

fn refused(input: &[u8]) -> RequestError {
    decode_all(input).unwrap_err()
}

#[test]
fn a_get_decodes_with_its_fields_and_keeps_the_connection() {
    let r = request(b"GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\nX-Y:  z \r\n\r\n");
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.target, "/a/b?x=1");
    assert_eq!(r.path(), "/a/b");
    assert_eq!(r.version, Version::Http11);
    assert_eq!(r.header("host"), Some(&b"h"[..]));
    assert_eq!(r.header("x-y"), Some(&b"z"[..]));
    assert!(r.keep_alive);
    assert!(r.body.is_empty());
}

#[test]
fn keep_alive_follows_the_version_and_connection_field() {
    assert!(!request(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
    assert!(!request(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").keep_alive);
    assert!(
        !request(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, close\r\n\r\n").keep_alive
    );
}

/// RFC 9112, 3.2: an HTTP/1.1 request without `Host`, any request with
/// two, and a `Host` that is not a host and port, are answered 400.
#[test]
fn a_missing_repeated_or_invalid_host_is_refused_400() {
    let cases: [(&[u8], RequestError); 5] = [
        (b"GET / HTTP/1.1\r\n\r\n", RequestError::MissingHost),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            RequestError::RepeatedHost,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
            RequestError::RepeatedHost,
        ),
        (
            b"GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n",
            RequestError::RepeatedHost,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n",
            RequestError::InvalidHost,
        ),
    ];
    for (input, error) in cases {
        let e = refused(input);
        assert_eq!(
            (&e, e.status()),
            (&error, 400),
            "{}",
            String::from_utf8_lossy(input)
        );
    }
    // HTTP/1.0 has no Host requirement; an empty Host is allowed (RFC
    // 9110, 7.2), and so are ports and IP literals.
    for input in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: example.org:8080\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
    ] {
        request(input);
    }
}

/// RFC 9112, 3.2.2: an origin server accepts the absolute form of a
/// target; its path is the path of the URI, and its authority is the host
/// the request is for, whatever `Host` says.
#[test]
fn an_absolute_form_target_has_the_path_and_host_of_its_uri() {
    let r =
        request(b"GET http://example.org:8080/static/a.txt?x=1 HTTP/1.1\r\nHost: other\r\n\r\n");
    assert_eq!(r.target, "http://example.org:8080/static/a.txt?x=1");
    assert_eq!(r.path(), "/static/a.txt");
    assert_eq!(r.host(), Some(&b"example.org:8080"[..]));
    let r = request(b"GET HTTPS://example.org?x HTTP/1.1\r\nHost: example.org\r\n\r\n");
    assert_eq!((r.path(), r.host()), ("/", Some(&b"example.org"[..])));
    // Origin form: the Host field.
    let r = request(b"GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((r.path(), r.host()), ("/a", Some(&b"h"[..])));
    let r = request(b"GET /a HTTP/1.0\r\n\r\n");
    assert_eq!((r.path(), r.host()), ("/a", None));
}

#[test]
fn pipelined_requests_come_out_in_order() {
    let out = decode_all(
        b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /3 HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .unwrap();
    let targets: Vec<(String, Bytes)> = out
        .into_iter()
        .map(|d| match d {
            Decoded::Request(r) => (r.target, r.body),
            Decoded::Continue => panic!("no Expect here"),
        })
        .collect();
    assert_eq!(
        targets,
        vec![
            ("/1".to_owned(), Bytes::new()),
            ("/2".to_owned(), Bytes::from_static(b"abc")),
            ("/3".to_owned(), Bytes::new()),
        ]
    );
}

#[test]
fn a_chunked_body_with_extensions_and_trailers_decodes() {
    let r = request(
        b"POST /u HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Sum: 13\r\n\r\n",
    );
    assert_eq!(r.body, Bytes::from_static(b"abc0123456789"));
    assert_eq!(r.header("x-sum"), Some(&b"13"[..]));
}

#[test]
fn expect_100_continue_asks_for_the_interim_response_once() {
    let mut d = RequestDecoder::default();
    let mut buf = BytesMut::from(
        &b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"[..],
    );
    assert_eq!(d.decode(&mut buf), Ok(Some(Decoded::Continue)));
    assert_eq!(d.decode(&mut buf), Ok(None));
    assert!(d.in_request());
    buf.extend_from_slice(b"ok");
    match d.decode(&mut buf) {
        Ok(Some(Decoded::Request(r))) => assert_eq!(r.body, Bytes::from_static(b"ok")),
        other => panic!("{other:?}"),
    }
    // A body already there needs no interim response.
    let out = decode_all(
        b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    )
    .unwrap();
    assert!(matches!(out.as_slice(), [Decoded::Request(_)]));
    assert_eq!(
        refused(b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: magic\r\n\r\n").status(),
        417
    );
}

#[test]
fn smuggling_shapes_are_refused() {
    let cases: &[(&[u8], u16)] = &[
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            501,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            501,
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            400,
        ),
    ];
    for (input, status) in cases {
        let e = refused(input);
        assert_eq!(
            e.status(),
            *status,
            "{} -> {e}",
            String::from_utf8_lossy(input)
        );
    }
    // The same length twice is one length.
    let r =
        request(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc");
    assert_eq!(r.body, Bytes::from_static(b"abc"));
}

#[test]
fn invalid_chunks_are_refused() {
    let head = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for (body, why) in [
        (&b"g\r\n"[..], "not hexadecimal"),
        (b"\r\n", "missing"),
        (b"1000000000000000\r\n", "too large"),
        (b"3\r\nabcX\r\n", "CRLF"),
        (b"3 x\r\nabc\r\n", "junk"),
    ] {
        let mut input = head.clone();
        input.extend_from_slice(body);
        let e = refused(&input);
        assert_eq!(e.status(), 400);
        assert!(e.to_string().contains(why), "{e} lacks {why:?}");
    }
    let mut endless = head.clone();
    endless.extend(std::iter::repeat_n(b'0', 300));
    assert_eq!(
        refused(&endless),
        RequestError::BadChunk("chunk-size line too long")
    );
}

#[test]
fn sizes_over_the_limits_are_refused_before_they_are_buffered() {
    let limits = Limits {
        max_head: 256,
        max_headers: 4,
        max_body: 10,
        ..Limits::default()
    };
    let e = decode_all_with(
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n",
        limits,
    )
    .unwrap_err();
    assert_eq!(e.status(), 413, "declared too large: refused at the head");
    let e = decode_all_with(
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\n",
        limits,
    )
    .unwrap_err();
    assert_eq!(e.status(), 413, "chunks add up past the limit");
    let mut long = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 300));
    let e = decode_all_with(&long, limits).unwrap_err();
    assert_eq!(e.status(), 431, "a head that never ends within the limit");
    let e = decode_all_with(
        b"GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n",
        limits,
    )
    .unwrap_err();
    assert_eq!(e.status(), 431, "too many fields");
}

#[test]
fn malformed_heads_and_versions_are_refused_and_the_refusal_sticks() {
    assert_eq!(refused(b"GET\r\n\r\n").status(), 400);
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n\r\n").status(),
        400
    );
    assert_eq!(refused(b"GET / HTTP/2.0\r\n\r\n").status(), 505);
    assert_eq!(
        refused(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03").status(),
        400
    );
    let mut d = RequestDecoder::default();
    let mut buf = BytesMut::from(&b"GET / HTTP/9.9\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"[..]);
    let first = d.decode(&mut buf).unwrap_err();
    assert_eq!(
        d.decode(&mut buf).unwrap_err(),
        first,
        "nothing after a refusal"
    );
}

#[test]
fn responses_encode_with_their_length_and_refuse_split_headers() {
    let mut out = BytesMut::new();
    let r = Response::new(200, "hi").header("Content-Type", "text/plain");
    encode_response(&mut out, &r, true, false).unwrap();
    assert_eq!(
        &out[..],
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 2\r\n\r\nhi"
    );
    out.clear();
    encode_response(&mut out, &r, false, true).unwrap();
    assert_eq!(
        &out[..],
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nconnection: close\r\ncontent-length: 2\r\n\r\n"
    );
    out.clear();
    encode_response(&mut out, &Response::new(304, "ignored"), true, false).unwrap();
    assert_eq!(&out[..], b"HTTP/1.1 304 Not Modified\r\n\r\n");
    out.clear();
    let split = Response::new(200, "").header("X", "a\r\nSet-Cookie: evil");
    assert!(encode_response(&mut out, &split, true, false).is_err());
    assert!(out.is_empty(), "nothing written for a refused response");
    assert!(encode_response(
        &mut out,
        &Response::new(200, "").header("Bad Name", "x"),
        true,
        false
    )
    .is_err());
    assert!(encode_response(&mut out, &Response::new(42, ""), true, false).is_err());
}

proptest! {
    /// A request arriving in pieces cut anywhere decodes as it does whole.
    #[test]
    fn requests_decode_the_same_however_the_bytes_arrive(
        body in proptest::collection::vec(any::<u8>(), 0..300),
        chunked in any::<bool>(),
        cuts in proptest::collection::vec(0usize..400, 0..8),
        chunk_sizes in proptest::collection::vec(1usize..64, 1..10),
    ) {
        let mut input = Vec::new();
        if chunked {
            input.extend_from_slice(b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
            let mut rest = &body[..];
            let mut sizes = chunk_sizes.iter().cycle();
            let mut enc = BytesMut::new();
            while !rest.is_empty() {
                let n = (*sizes.next().unwrap()).min(rest.len());
                encode_chunk(&mut enc, &rest[..n]);
                rest = &rest[n..];
            }
            encode_last_chunk(&mut enc);
            input.extend_from_slice(&enc);
        } else {
            input.extend_from_slice(format!("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
            input.extend_from_slice(&body);
        }
        // A second, pipelined request behind it.
        input.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
        cuts.sort_unstable();
        let mut d = RequestDecoder::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut from = 0;
        for to in cuts.into_iter().chain([input.len()]) {
            buf.extend_from_slice(&input[from..to]);
            from = to;
            while let Some(x) = d.decode(&mut buf).unwrap() {
                got.push(x);
            }
        }
        prop_assert_eq!(got.len(), 2);
        match &got[0] {
            Decoded::Request(r) => {
                prop_assert_eq!(&r.body[..], &body[..]);
                prop_assert_eq!(r.target.as_str(), "/p");
            }
            Decoded::Continue => prop_assert!(false, "no Expect sent"),
        }
        match &got[1] {
            Decoded::Request(r) => prop_assert_eq!(r.target.as_str(), "/next"),
            Decoded::Continue => prop_assert!(false, "no Expect sent"),
        }
        prop_assert!(buf.is_empty());
    }

    /// Whatever the bytes, the decoder answers or waits, never panics, and
    /// never holds more than its bounds.
    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(input in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let limits = Limits { max_head: 512, max_body: 512, ..Limits::default() };
        let mut d = RequestDecoder::new(limits);
        let mut buf = BytesMut::new();
        for piece in input.chunks(97) {
            buf.extend_from_slice(piece);
            loop {
                match d.decode(&mut buf) {
                    Ok(Some(_)) => continue,
                    Ok(None) => {
                        // Waiting for more: what is held is within a head
                        // plus a body.
                        prop_assert!(buf.len() <= 512 + 512 + 2 + 2000);
                        break;
                    }
                    Err(e) => {
                        prop_assert!(matches!(e.status(), 400 | 413 | 417 | 431 | 501 | 505));
                        break;
                    }
                }
            }
        }
    }
}
