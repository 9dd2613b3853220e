//! Section 22 of the demo: a web page served by an actor, and a static
//! file, over `tcp / http`, fetched with a plain TCP client; then two nodes
//! whose link is a WebSocket connection (`ws://`).

use plexus::http::server::{HttpRequest, WebServer};
use plexus::http::{Method, Response};
use plexus::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub async fn tour() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n22. http: an actor serves a page; a static file with its ETag; a smuggling attempt refused; two nodes over ws://");
    let system = ActorSystem::new();
    let mut visits = 0u64;
    let page = system.spawn_fn(move |req: HttpRequest, _ctx| {
        visits += 1;
        let name = req.param("name").unwrap_or("world").to_owned();
        req.reply.send(
            Response::new(
                200,
                format!("<h1>hello, {name}</h1><p>visit {visits}, served by an actor</p>\n"),
            )
            .header("content-type", "text/html; charset=utf-8"),
        );
    });
    let dir = std::env::temp_dir().join(format!("plexus-demo-web-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("style.css"), "h1 { color: teal }\n")?;
    let addr = WebServer::new()
        .route(Method::Get, "/hello/:name", page)?
        .static_dir("/static", &dir, 1 << 20)?
        .listen("127.0.0.1:0")
        .await?;
    println!("  listening on http://{addr}");
    for request in [
        "GET /hello/plexus HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n",
        "GET /static/style.css HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n",
        "POST /hello/x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
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
        println!(
            "  {} -> {status}{etag}: {body}",
            request.lines().next().unwrap_or("")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    system.shutdown().await;
    websocket_nodes().await
}

/// A ping between two nodes over `ws://`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello(String, ReplyTo<String>);
remote_message!(Hello = "demo.web.Hello");

async fn websocket_nodes() -> Result<(), Box<dyn std::error::Error>> {
    let config = || {
        let mut transports = plexus::transport::TransportRegistry::default();
        let _ = transports.register(plexus::http::ws_transport::WsTransport::new());
        NodeConfig::default()
            .cookie("demo-ws")
            .transports(transports)
    };
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, config())?;
    let nb = Node::start(&b, config())?;
    let uri = nb.listen("ws://127.0.0.1:0").await?;
    let greeter = b.spawn_fn(|Hello(from, reply): Hello, _ctx| {
        reply.send(format!("hello {from}, over a WebSocket"));
    });
    nb.publish(&greeter, "greeter")?;
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
    Ok(())
}
