//! The load generator against the actor web server: closed loop over
//! keep-alive connections and open loop with a new connection per request
//! both complete, count what they got, and report a parseable line.

use std::time::Duration;

use plexus_core::ActorSystem;
use plexus_http::loadgen::{self, LoadgenConfig};
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
