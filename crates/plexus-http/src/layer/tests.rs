use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_net::{Frame, Layer, Output};

use super::*;

/// One connection's layer with a fake clock.
struct Conn {
    layer: HttpLayer,
    out: Output,
    now: Instant,
}

impl Conn {
    fn new(config: HttpConfig) -> Self {
        let now = Instant::now();
        Self {
            layer: HttpLayer::new(config, now),
            out: Output::new(),
            now,
        }
    }

    fn receive(&mut self, bytes: &[u8]) {
        self.layer
            .handle_receive(
                self.now,
                Frame::from_payload(Bytes::copy_from_slice(bytes)),
                &mut self.out,
            )
            .unwrap();
    }

    fn requests(&mut self) -> Vec<RequestMessage> {
        std::iter::from_fn(|| self.out.pop_up())
            .map(|f| RequestMessage::decode(f.into_bytes()).unwrap())
            .collect()
    }

    fn respond(&mut self, part: ResponseMessage) {
        self.layer
            .handle_send(self.now, part.encode(), &mut self.out)
            .unwrap();
    }

    fn written(&mut self) -> String {
        let mut s = Vec::new();
        while let Some(f) = self.out.pop_down() {
            s.extend_from_slice(&f.to_bytes());
        }
        String::from_utf8(s).unwrap()
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        if self.layer.poll_timeout().is_some_and(|t| t <= self.now) {
            self.layer.handle_timeout(self.now, &mut self.out);
        }
    }

    fn closed(&self) -> bool {
        self.out.close_reason().is_some()
    }
}

fn whole(id: u64, body: &'static str) -> ResponseMessage {
    ResponseMessage::Whole {
        id,
        response: Response::new(200, body),
    }
}

#[test]
fn pipelined_requests_are_answered_in_order_whatever_order_the_answers_come() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(b"GET /0 HTTP/1.1\r\nHost: h\r\n\r\nGET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
    let got: Vec<(u64, String)> = c
        .requests()
        .into_iter()
        .map(|m| (m.id, m.request.target))
        .collect();
    assert_eq!(got, [(0, "/0".into()), (1, "/1".into()), (2, "/2".into())]);
    c.respond(whole(2, "two"));
    c.respond(whole(1, "one"));
    assert_eq!(c.written(), "", "nothing before the first request's answer");
    c.respond(whole(0, "zero"));
    assert_eq!(
        c.written(),
        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nzero\
         HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none\
         HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\ntwo"
    );
    assert!(!c.closed());
    assert_eq!(c.layer.stats().responses, 3);
    // An answer to no open request is refused.
    assert!(c
        .layer
        .handle_send(c.now, whole(7, "x").encode(), &mut c.out)
        .is_err());
}

#[test]
fn connection_close_ends_the_link_after_its_response() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.requests().len(), 1, "nothing after close is read");
    assert!(!c.closed());
    c.respond(whole(0, "bye"));
    assert!(c.written().contains("connection: close\r\n"));
    assert!(c.closed());
}

#[test]
fn a_refused_request_is_answered_after_the_ones_before_it_then_the_link_closes() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(
        b"GET /ok HTTP/1.1\r\nHost: h\r\n\r\nPOST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert_eq!(c.requests().len(), 1);
    assert_eq!(
        c.written(),
        "",
        "the refusal waits for the answer before it"
    );
    c.respond(whole(0, "fine"));
    let w = c.written();
    let ok = w.find("fine").unwrap();
    let refusal = w.find("HTTP/1.1 400 Bad Request").unwrap();
    assert!(ok < refusal, "{w}");
    assert!(w.ends_with("(request smuggling)\n"), "{w}");
    assert!(c.closed());
    assert_eq!(c.layer.stats().refused, 1);
}

#[test]
fn a_slowloris_client_gets_408_at_the_request_timeout() {
    let config = HttpConfig {
        request_timeout: Duration::from_secs(5),
        ..HttpConfig::default()
    };
    let mut c = Conn::new(config);
    for b in b"GET / HTTP/1.1\r\nX-Slow: " {
        c.receive(&[*b]);
        c.advance(Duration::from_millis(200));
    }
    // 4.6 s of a byte every 200 ms: not yet.
    assert!(!c.closed());
    c.advance(Duration::from_millis(500));
    let w = c.written();
    assert!(w.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{w}");
    assert!(c.closed());
    assert_eq!(c.layer.stats().timeouts, 1);
}

#[test]
fn an_idle_connection_closes_silently_but_not_while_a_response_is_owed() {
    let config = HttpConfig {
        idle_timeout: Duration::from_secs(30),
        ..HttpConfig::default()
    };
    let mut c = Conn::new(config);
    c.receive(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.requests().len(), 1);
    c.advance(Duration::from_secs(60));
    assert!(!c.closed(), "the application still owes a response");
    c.respond(whole(0, "late"));
    assert!(c.written().contains("late"));
    c.advance(Duration::from_secs(29));
    assert!(!c.closed());
    c.advance(Duration::from_secs(2));
    assert!(c.closed());
    assert_eq!(c.written(), "", "an idle close writes nothing");
}

#[test]
fn expect_continue_chunked_responses_and_head_requests() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(b"PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    assert_eq!(c.written(), "HTTP/1.1 100 Continue\r\n\r\n");
    c.receive(b"data");
    let put = c.requests().pop().unwrap();
    assert_eq!(put.request.body, Bytes::from_static(b"data"));
    c.respond(ResponseMessage::ChunkedHead {
        id: 0,
        status: 200,
        headers: vec![("content-type".into(), Bytes::from_static(b"text/plain"))],
    });
    c.respond(ResponseMessage::Chunk {
        id: 0,
        data: Bytes::from_static(b"hello "),
    });
    c.respond(ResponseMessage::Chunk {
        id: 0,
        data: Bytes::from_static(b"world"),
    });
    c.respond(ResponseMessage::End { id: 0 });
    assert_eq!(
        c.written(),
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n\
         6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n"
    );
    c.receive(b"HEAD /f HTTP/1.1\r\nHost: h\r\n\r\n");
    let head = c.requests().pop().unwrap();
    c.respond(whole(head.id, "not sent"));
    assert_eq!(c.written(), "HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n");
}

#[test]
fn reading_pauses_while_the_pipeline_is_full() {
    let config = HttpConfig {
        pipeline: 2,
        ..HttpConfig::default()
    };
    let mut c = Conn::new(config);
    c.receive(b"GET /0 HTTP/1.1\r\nHost: h\r\n\r\nGET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.requests().len(), 2);
    c.respond(whole(0, "a"));
    let next = c.requests();
    assert_eq!(next.len(), 1, "room for one more");
    assert_eq!(next[0].request.target, "/2");
}

#[test]
fn the_spec_option_parses_and_the_layer_stacks_on_a_byte_stream() {
    let mut registry = plexus_net::LayerRegistry::default();
    registry.register_config::<HttpConfig>();
    let spec = plexus_net::StackSpec::parse(
        "tcp / http(max_body=4KiB, request_timeout=2s, pipeline=4)",
        &registry,
    )
    .unwrap();
    let spec = spec
        .fit("tcp", plexus_net::TransportProfile::byte_stream())
        .unwrap();
    let mut stack = spec.build(Instant::now());
    let now = Instant::now();
    stack
        .handle_receive(
            now,
            Bytes::from_static(b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n"),
        )
        .unwrap();
    let up = stack.poll_receive().unwrap();
    assert_eq!(RequestMessage::decode(up).unwrap().request.target, "/s");
    assert!(plexus_net::StackSpec::parse("tcp / http(nope=1)", &registry).is_err());
}

#[test]
fn a_head_request_gets_no_body_even_from_the_500_fallback() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(b"HEAD /x HTTP/1.1\r\nHost: h\r\n\r\n");
    let [request] = c.requests().try_into().ok().unwrap();
    // A header name that is no token: the response cannot be written.
    c.respond(ResponseMessage::Whole {
        id: request.id,
        response: Response::new(200, "body").header("bad name", "v"),
    });
    let written = c.written();
    assert!(written.starts_with("HTTP/1.1 500 "), "{written}");
    assert!(
        written.ends_with("\r\n\r\n"),
        "no body after the head: {written}"
    );
}

/// RFC 9112, C.2.2: an HTTP/1.0 client keeps a connection only if the
/// response says `Connection: keep-alive`; an HTTP/1.1 one needs nothing.
#[test]
fn an_http_1_0_response_on_a_kept_connection_says_keep_alive() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let [a] = c.requests().try_into().ok().unwrap();
    c.respond(whole(a.id, "a"));
    assert_eq!(
        c.written(),
        "HTTP/1.1 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\na"
    );
    assert!(!c.closed());
    c.receive(b"GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let [b] = c.requests().try_into().ok().unwrap();
    c.respond(ResponseMessage::ChunkedHead {
        id: b.id,
        status: 200,
        headers: vec![],
    });
    assert!(c.written().contains("connection: keep-alive\r\n"));
    c.respond(ResponseMessage::End { id: b.id });
    c.written();
    c.receive(b"GET /c HTTP/1.1\r\nHost: h\r\n\r\n");
    let [c11] = c.requests().try_into().ok().unwrap();
    c.respond(whole(c11.id, "c"));
    assert!(
        !c.written().contains("connection:"),
        "HTTP/1.1 keeps by default"
    );
    // Without keep-alive, HTTP/1.0 closes, and says so.
    c.receive(b"GET /d HTTP/1.0\r\n\r\n");
    let [d] = c.requests().try_into().ok().unwrap();
    c.respond(whole(d.id, "d"));
    assert!(c.written().contains("connection: close\r\n"));
    assert!(c.closed());
}

/// A keep-alive HTTP/1.0 request whose connection closes anyway (the
/// request after it was refused) is answered `Connection: close`.
#[test]
fn an_http_1_0_keep_alive_request_before_a_close_is_told_close() {
    let mut c = Conn::new(HttpConfig::default());
    c.receive(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\nHost: h\r\n\r\n");
    let ids: Vec<u64> = c.requests().iter().map(|r| r.id).collect();
    c.respond(whole(ids[0], "a"));
    let w = c.written();
    assert!(w.contains("connection: keep-alive\r\n"), "{w}");
    c.respond(whole(ids[1], "b"));
    assert!(c.written().contains("connection: close\r\n"));
    assert!(c.closed());
}
