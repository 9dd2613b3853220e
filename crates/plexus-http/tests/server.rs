//! The actor web server over real TCP: routes to actors, static files with
//! ETag and Range, pipelined requests answered in order, and hostile
//! clients (smuggling, slowloris) refused while others are served.

use std::sync::Arc;
use std::time::Duration;

use plexus_core::ActorSystem;
use plexus_http::server::{HttpRequest, WebServer};
use plexus_http::{HttpConfig, HttpTotals, Method, Response};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod common;

use common::{ask, fresh_dir, read_response};

async fn server(config: HttpConfig) -> (ActorSystem, std::net::SocketAddr, Arc<HttpTotals>) {
    let system = ActorSystem::new();
    let hello = system.spawn_fn(|req: HttpRequest, _ctx| {
        let name = req.param("name").unwrap_or("?").to_owned();
        req.reply.send(
            Response::new(200, format!("hello, {name}")).header("content-type", "text/plain"),
        );
    });
    // Holds the reply of /held/:key until /release/:key comes: pipelined
    // requests to it finish out of order.
    // (The two requests are asked concurrently, so either may reach it
    // first.)
    let mut held: std::collections::HashMap<String, plexus_core::ReplyTo<Response>> =
        std::collections::HashMap::new();
    let mut released = std::collections::HashSet::new();
    let latch = system.spawn_fn(move |req: HttpRequest, _ctx| {
        let key = req.param("key").unwrap_or("").to_owned();
        if req.request.path().starts_with("/held/") {
            if released.remove(&key) {
                req.reply.send(Response::new(200, format!("held {key}")));
            } else {
                held.insert(key, req.reply);
            }
        } else {
            match held.remove(&key) {
                Some(reply) => reply.send(Response::new(200, format!("held {key}"))),
                None => {
                    released.insert(key.clone());
                }
            }
            req.reply
                .send(Response::new(200, format!("released {key}")));
        }
    });
    let dir = fresh_dir("http-test");
    std::fs::create_dir_all(dir.join("css")).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>plexus</h1>").unwrap();
    std::fs::write(dir.join("css/site.css"), "body { margin: 0 }").unwrap();
    std::fs::write(dir.join("big.bin"), big_file()).unwrap();
    let server = WebServer::new()
        .http(config)
        .route(Method::Get, "/hello/:name", hello)
        .unwrap()
        .route(Method::Get, "/held/:key", latch.clone())
        .unwrap()
        .route(Method::Get, "/release/:key", latch)
        .unwrap()
        .static_dir("/static", &dir, 1 << 20)
        .unwrap();
    let totals = server.totals();
    let addr = server.listen("127.0.0.1:0").await.unwrap();
    (system, addr, totals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_static_files_and_errors() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    let r = ask(addr, b"GET /hello/ada HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!((r.status, &r.body[..]), (200, &b"hello, ada"[..]));
    assert_eq!(r.header("content-type"), Some("text/plain"));

    let r = ask(addr, b"GET /static/ HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!((r.status, &r.body[..]), (200, &b"<h1>plexus</h1>"[..]));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let etag = r.header("etag").unwrap().to_owned();
    let again =
        format!("GET /static/index.html HTTP/1.1\r\nHost: h\r\nIf-None-Match: {etag}\r\n\r\n");
    assert_eq!(ask(addr, again.as_bytes()).await.status, 304);
    let r = ask(
        addr,
        b"GET /static/css/site.css HTTP/1.1\r\nHost: h\r\nRange: bytes=0-3\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (206, &b"body"[..]));
    assert_eq!(r.header("content-range"), Some("bytes 0-3/18"));

    assert_eq!(
        ask(addr, b"GET /nope HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .status,
        404
    );
    assert_eq!(
        ask(addr, b"POST /hello/x HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .status,
        405
    );
    assert_eq!(
        ask(
            addr,
            b"GET /static/%2e%2e/secret HTTP/1.1\r\nHost: h\r\n\r\n"
        )
        .await
        .status,
        400
    );
}

/// Metrics (issue 31): requests by status class from the server's totals,
/// published on demand, and each request's latency in the histogram the
/// server looked up when it started listening. A current-thread runtime
/// inside a debugging recorder installed for this thread only, so the
/// connection tasks record there too.
#[test]
fn responses_are_counted_by_status_class_and_timed() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let (_system, addr, totals) = server(HttpConfig::default()).await;
            for path in ["/hello/a", "/hello/b", "/nope"] {
                let req = format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n");
                ask(addr, req.as_bytes()).await;
            }
            totals.record_metrics();
        })
    });
    let m: std::collections::HashMap<String, DebugValue> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, _, _, v)| {
            let labels: Vec<String> = k
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (format!("{}{{{}}}", k.key().name(), labels.join(",")), v)
        })
        .collect();
    let counter = |key: &str| match m.get(key) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!(counter("plexus_http_requests_total{}"), 3);
    assert_eq!(counter("plexus_http_responses_total{status=2xx}"), 2);
    assert_eq!(counter("plexus_http_responses_total{status=4xx}"), 1);
    assert_eq!(counter("plexus_http_responses_total{status=5xx}"), 0);
    match m.get("plexus_http_request_seconds{}") {
        Some(DebugValue::Histogram(v)) => assert_eq!(v.len(), 3),
        other => panic!("latency: {other:?}"),
    }
}

/// A file above the sendfile threshold (kept open, sent from the page
/// cache), larger than a socket buffer.
fn big_file() -> Vec<u8> {
    (0..(3 << 19)).map(|i: u32| (i % 241) as u8).collect()
}

/// A large file is sent from the file (its body never in the server's
/// memory) and arrives whole: all of it, a range, its head alone for HEAD,
/// not modified for its ETag; pipelined behind and before other responses
/// on one connection, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_are_sent_from_the_file_whole_in_ranges_and_in_order() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    let big = big_file();
    let r = ask(addr, b"GET /static/big.bin HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!(r.status, 200);
    assert!(r.body == big, "the whole file");
    let etag = r.header("etag").unwrap().to_owned();
    let again = format!("GET /static/big.bin HTTP/1.1\r\nHost: h\r\nIf-None-Match: {etag}\r\n\r\n");
    assert_eq!(ask(addr, again.as_bytes()).await.status, 304);
    let r = ask(
        addr,
        b"GET /static/big.bin HTTP/1.1\r\nHost: h\r\nRange: bytes=100000-1199999\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 206);
    assert!(r.body == big[100_000..1_200_000], "the range");
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"HEAD /static/big.bin HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut head = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut s, &mut head)
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains(&format!("content-length: {}\r\n", big.len())));
    assert!(head.ends_with("\r\n\r\n"), "no body after the head");

    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /static/big.bin HTTP/1.1\r\nHost: h\r\n\r\nGET /hello/x HTTP/1.1\r\nHost: h\r\n\r\n\
          GET /static/big.bin HTTP/1.1\r\nHost: h\r\nRange: bytes=-10\r\n\r\nGET /static/big.bin HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let first = read_response(&mut s, &mut buf).await.unwrap();
    assert!(first.body == big);
    let second = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(second.body, b"hello, x");
    let third = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(third.body, big[big.len() - 10..]);
    let fourth = read_response(&mut s, &mut buf).await.unwrap();
    assert!(fourth.body == big);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_request_order() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The first answer is ready last: after the other two.
    s.write_all(
        b"GET /held/a HTTP/1.1\r\nHost: h\r\n\r\nGET /hello/x HTTP/1.1\r\nHost: h\r\n\r\nGET /release/a HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..3 {
        bodies.push(read_response(&mut s, &mut buf).await.unwrap().body);
    }
    assert_eq!(
        bodies,
        [&b"held a"[..], &b"hello, x"[..], &b"released a"[..]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_get_their_status_and_others_are_served() {
    let config = HttpConfig {
        request_timeout: Duration::from_millis(300),
        ..HttpConfig::default()
    };
    let (_system, addr, totals) = server(config).await;

    // A slowloris client: a head that never ends.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /hello/slow HTTP/1.1\r\nHost: h\r\nX-Slow: a")
        .await
        .unwrap();

    // Smuggling: both framings.
    let mut smuggler = TcpStream::connect(addr).await.unwrap();
    smuggler
        .write_all(b"POST /hello/x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /hello/smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut smuggler, &mut buf).await.unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        read_response(&mut smuggler, &mut buf).await.is_none(),
        "nothing after the refusal: the smuggled request is never served"
    );

    // A well-behaved client meanwhile.
    for i in 0..20 {
        let r = ask(
            addr,
            format!("GET /hello/{i} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200);
    }

    // The slowloris client gets 408 when its time is up, and is closed.
    let mut buf = Vec::new();
    let r = read_response(&mut slow, &mut buf).await.unwrap();
    assert_eq!(r.status, 408);
    assert!(read_response(&mut slow, &mut buf).await.is_none());

    // Oversized head: 431.
    let mut big = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 20_000));
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(ask(addr, &big).await.status, 431);
    // A malformed request line, an invalid chunk size, a body over the
    // bound: each its status.
    assert_eq!(
        ask(addr, b"GET\x01/ HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .status,
        400
    );
    let bad_chunk =
        b"POST /hello/c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert_eq!(ask(addr, bad_chunk).await.status, 400);
    let huge = format!(
        "POST /hello/b HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
        HttpConfig::default().limits.max_body + 1
    );
    assert_eq!(ask(addr, huge.as_bytes()).await.status, 413);

    // Every refusal and the timeout are counted in the server's totals
    // (their answers are not responses); the 20 well-behaved requests were
    // answered.
    let counted = totals.snapshot();
    assert_eq!((counted.refused, counted.timeouts), (5, 1));
    assert_eq!(counted.responses, 20);
}

/// RFC 9112, 3.2: an HTTP/1.1 request without `Host`, or with two, is
/// answered 400 and the connection closes; HTTP/1.0 needs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_repeated_host_is_answered_400() {
    let (_system, addr, totals) = server(HttpConfig::default()).await;
    for request in [
        &b"GET /static/ HTTP/1.1\r\n\r\n"[..],
        b"GET /static/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut buf = Vec::new();
        let r = read_response(&mut s, &mut buf).await.unwrap();
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(request));
        assert_eq!(r.header("connection"), Some("close"));
        assert!(read_response(&mut s, &mut buf).await.is_none());
    }
    assert_eq!(totals.snapshot().refused, 2);
    let r = ask(addr, b"GET /static/ HTTP/1.0\r\n\r\n").await;
    assert_eq!((r.status, &r.body[..]), (200, &b"<h1>plexus</h1>"[..]));
}

/// An encoded separator (`%2F`, `%5C`) is never decoded into one: such a
/// path names no nested file (and no route), it is refused 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoded_slash_does_not_reach_a_nested_file() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    for target in [
        "/static/css%2fsite.css",
        "/static/css%2Fsite.css",
        "/static%2findex.html",
        "/static/css%5csite.css",
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
        let r = ask(addr, request.as_bytes()).await;
        assert_eq!(r.status, 400, "{target}");
    }
    // The file itself is there.
    let r = ask(
        addr,
        b"GET /static/css/site.css HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"body { margin: 0 }"[..]));
}

/// RFC 9112, 3.2.2: a target in absolute form is served as its path in
/// origin form would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_form_target_is_served_like_its_origin_form() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    let r = ask(
        addr,
        b"GET http://example.org/static/css/site.css HTTP/1.1\r\nHost: example.org\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"body { margin: 0 }"[..]));
    let r = ask(
        addr,
        b"GET http://example.org:8080/hello/ada?x=1 HTTP/1.1\r\nHost: example.org:8080\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"hello, ada"[..]));
}

/// An HTTP/1.0 client keeps its connection only if the response says
/// `Connection: keep-alive` (RFC 9112, C.2.2): the server says it when it
/// keeps the connection, and serves the next request on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_keep_alive_response_says_keep_alive() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    for _ in 0..2 {
        s.write_all(b"GET /static/css/site.css HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await
            .unwrap();
        let r = read_response(&mut s, &mut buf).await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
    // Without keep-alive: closed after the response, and said so.
    s.write_all(b"GET /static/css/site.css HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s, &mut buf).await.unwrap();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(read_response(&mut s, &mut buf).await.is_none());
}

/// RFC 9110, 14.2: an invalid range (last before first) is ignored and
/// the whole file sent; a range starting past the end is 416.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_range_is_ignored_and_an_unsatisfiable_one_is_416() {
    let (_system, addr, _) = server(HttpConfig::default()).await;
    let r = ask(
        addr,
        b"GET /static/css/site.css HTTP/1.1\r\nHost: h\r\nRange: bytes=5-2\r\n\r\n",
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"body { margin: 0 }"[..]));
    let r = ask(
        addr,
        b"GET /static/css/site.css HTTP/1.1\r\nHost: h\r\nRange: bytes=18-20\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */18"));
}
