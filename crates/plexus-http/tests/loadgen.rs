//! The load generator against the actor web server: closed loop over
//! keep-alive connections and open loop with a new connection per request
//! both complete, count what they got, and report a parseable line.

use std::time::Duration;

use plexus_core::ActorSystem;
use plexus_http::loadgen::backoff::Backoff;
use plexus_http::loadgen::{self, LoadgenConfig, LoadgenError};
use plexus_http::server::{HttpRequest, WebServer};
use plexus_http::{Method, Response};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_open_loops_run_and_report() {
    let system = ActorSystem::new();
    let page = system.spawn_fn(|req: HttpRequest, _ctx| {
        req.reply.send(Response::new(200, vec![b'x'; 1000]));
    });
    let addr = WebServer::new()
        .route(Method::Get, "/page", page)
        .unwrap()
        .listen("127.0.0.1:0")
        .await
        .unwrap();
    let config = LoadgenConfig {
        addr,
        host: "test".into(),
        paths: vec!["/page".into(), "/missing".into()],
        connections: 2,
        duration: Duration::from_millis(300),
        rate: None,
        keep_alive: true,
        seed: 7,
        progress: None,
    };
    let closed = loadgen::run(config.clone()).await.unwrap();
    assert!(closed.requests > 0);
    assert_eq!(closed.errors, 0);
    // Half the paths are missing: 404s are counted, not errors.
    assert!(closed.non_success > 0 && closed.non_success < closed.requests);
    assert!(closed.bytes > closed.requests * 100);
    let line = closed.result_line();
    assert!(
        line.starts_with("RESULT workload=loadgen mode=closed "),
        "{line}"
    );
    for key in ["rps=", "p99_ms=", "gbps=", "errors=0"] {
        assert!(line.contains(key), "{line} lacks {key}");
    }

    let open = loadgen::run(LoadgenConfig {
        rate: Some(200.0),
        keep_alive: false,
        paths: vec!["/page".into()],
        ..config
    })
    .await
    .unwrap();
    assert!(open.requests > 0);
    assert_eq!((open.errors, open.non_success), (0, 0));
    assert!(open.result_line().contains("mode=open rate=200"));
    assert!(open.ensure_responses().is_ok());

    assert!(loadgen::run(LoadgenConfig {
        paths: vec![],
        ..open_config(addr)
    })
    .await
    .is_err());
}

fn open_config(addr: std::net::SocketAddr) -> LoadgenConfig {
    LoadgenConfig {
        addr,
        host: "test".into(),
        paths: vec!["/".into()],
        connections: 1,
        duration: Duration::from_millis(10),
        rate: Some(10.0),
        keep_alive: true,
        seed: 1,
        progress: None,
    }
}

/// Against a port nobody listens on, each connection backs off instead of
/// retrying as fast as the kernel refuses: its refused connects are at most
/// what the backoff allows in the run's time, they are counted and
/// reported, and the run says nothing succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_backed_off_reported_and_fails_the_run() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let duration = Duration::from_millis(300);
    let connections = 4;
    let report = loadgen::run(LoadgenConfig {
        connections,
        duration,
        rate: None,
        ..open_config(closed)
    })
    .await
    .unwrap();
    assert_eq!(report.requests, 0);
    let most = connections as u64 * Backoff::most_attempts(duration);
    assert!(
        (connections as u64..=most).contains(&report.connects_refused),
        "{} refused connects; the backoff allows {most}",
        report.connects_refused
    );
    assert_eq!(report.connects_failed, 0);
    assert_eq!(report.errors, report.connects_refused);
    let line = report.result_line();
    assert!(
        line.contains(&format!("refused={} ", report.connects_refused)),
        "{line}"
    );
    assert!(report.summary().contains("connects refused"));
    match report.ensure_responses() {
        Err(LoadgenError::NoResponses { refused, .. }) => {
            assert_eq!(refused, report.connects_refused)
        }
        other => panic!("{other:?}"),
    }
}
