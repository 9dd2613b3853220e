//! Section 22 of the demo: one port for a web site and a node. A page
//! served by an actor, whose script asks another actor for a count; a
//! static file; a smuggling attempt refused; and another node asking an
//! actor over `ws://`, through the same port. `crates/plexus/tests/browser.rs`
//! loads the same site in headless Chromium.

use std::path::Path;

use plexus::http::server::{HttpRequest, WebServer};
use plexus::http::ws_transport::WsTransport;
use plexus::http::{Method, Response};
use plexus::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The page at `/`: its script fills `#visits` from `/api/visits`.
const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Plexus</title>
<link rel="stylesheet" href="/static/style.css"></head>
<body><h1>hello from an actor</h1>
<p id="visits">asking an actor...</p>
<script>
fetch('/api/visits')
  .then(r => r.text())
  .then(t => { document.getElementById('visits').textContent = 'visits: ' + t; });
</script>
</body></html>
"#;

/// The demo's site: `/` a page from an actor, `/api/visits` a count kept
/// by another actor, `/static/` the files of `static_dir`.
pub fn site(
    system: &ActorSystem,
    static_dir: &Path,
) -> Result<WebServer, Box<dyn std::error::Error>> {
    let page = system.spawn_fn(|req: HttpRequest, _ctx| {
        req.reply
            .send(Response::new(200, PAGE).header("content-type", "text/html; charset=utf-8"));
    });
    let mut visits = 0u64;
    let counter = system.spawn_fn(move |req: HttpRequest, _ctx| {
        visits += 1;
        req.reply
            .send(Response::new(200, visits.to_string()).header("content-type", "text/plain"));
    });
    std::fs::create_dir_all(static_dir)?;
    std::fs::write(static_dir.join("style.css"), "h1 { color: teal }\n")?;
    Ok(WebServer::new()
        .route(Method::Get, "/", page)?
        .route(Method::Get, "/api/visits", counter)?
        .static_dir("/static", static_dir, 1 << 20)?)
}

/// A greeting between nodes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello(String, ReplyTo<String>);
remote_message!(Hello = "demo.web.Hello");

fn ws_node(system: &ActorSystem, transport: WsTransport) -> Result<Node, plexus::NodeError> {
    let mut transports = plexus::transport::TransportRegistry::default();
    let _ = transports.register(transport);
    Node::start(
        system,
        NodeConfig::default()
            .cookie("demo-ws")
            .transports(transports),
    )
}

pub async fn tour() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n22. http: one port for a web site and a node: a page from an actor, a static file, a smuggling attempt refused, a node asking over ws://");
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let dir = std::env::temp_dir().join(format!("plexus-demo-web-{}", std::process::id()));
    let nb = ws_node(&b, WsTransport::new().web(site(&b, &dir)?))?;
    let uri = nb.listen("ws://127.0.0.1:0").await?;
    let addr = uri.trim_start_matches("ws://").to_owned();
    println!("  node beta serves http://{addr}/ and {uri}/greeter on one port");
    for request in [
        "GET / HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n",
        "GET /api/visits HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n",
        "GET /static/style.css HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let mut conn = tokio::net::TcpStream::connect(&addr).await?;
        conn.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await?;
        let answer = String::from_utf8_lossy(&answer);
        let status = answer.lines().next().unwrap_or("");
        let etag = answer
            .lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .map(|e| format!(" (etag {e})"))
            .unwrap_or_default();
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").trim();
        let body = body.lines().find(|l| l.contains("<h1>")).unwrap_or(body);
        println!(
            "  {} -> {status}{etag}: {body}",
            request.lines().next().unwrap_or("")
        );
    }

    let greeter = b.spawn_fn(|Hello(from, reply): Hello, _ctx| {
        reply.send(format!("hello {from}, over a WebSocket"));
    });
    nb.publish(&greeter, "greeter")?;
    let na = ws_node(&a, WsTransport::new())?;
    let remote = na.resolve::<Hello>(&format!("{uri}/greeter")).await?;
    let answer = remote
        .ask(
            |r| Hello("alpha".into(), r),
            std::time::Duration::from_secs(5),
        )
        .await?;
    println!("  node alpha asks {uri}/greeter: {answer:?}");
    na.shutdown().await;
    nb.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
