//! The Autobahn test suite's echo peer (`.ci/autobahn` runs it; results in
//! `docs/autobahn.md`): the crate's sans-IO [`WebSocket`] driven over
//! tokio TCP, every message echoed with its kind (text as text, binary as
//! binary), with permessage-deflate offered (client) and accepted (server)
//! with the default [`DeflateConfig`], as the suite's 12.* and 13.* cases
//! need.
//!
//! ```text
//! autobahn server 127.0.0.1:9001     # for `wstest -m fuzzingclient`
//! autobahn client ws://127.0.0.1:9001 # against `wstest -m fuzzingserver`
//! ```
//!
//! The client asks the suite for `getCaseCount`, runs every case
//! (`runCase?case=N&agent=plexus`) and asks for `updateReports`.
//!
//! It drives [`WebSocket`] itself rather than a stack with the
//! `WebSocketLayer`: that layer carries a stack's frames, each one binary
//! message, and has no text kind to echo; it is a thin adapter over this
//! same `WebSocket`, where all the framing, masking, UTF-8, ping and close
//! logic the suite checks lives.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use plexus_http::websocket::handshake::{check_server_response, client_request, server_response};
use plexus_http::websocket::{DeflateConfig, Role, WebSocket, WsConfig, WsEvent, WsMessage};
use plexus_http::{encode_response, Decoded, Limits, RequestDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a closed connection waits for the peer's end of the TCP
/// connection before dropping it.
const LINGER: Duration = Duration::from_secs(2);

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The defaults, with permessage-deflate.
fn config() -> WsConfig {
    WsConfig {
        deflate: Some(DeflateConfig::default()),
        ..WsConfig::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", addr] => server(addr).await,
        ["client", url] => client(url).await,
        _ => Err("usage: autobahn server ADDR | autobahn client ws://HOST:PORT".into()),
    }
}

async fn server(addr: &str) -> Result<(), Error> {
    let listener = TcpListener::bind(addr).await?;
    println!("autobahn echo server on ws://{}", listener.local_addr()?);
    loop {
        let (socket, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = serve(socket).await {
                eprintln!("connection: {e}");
            }
        });
    }
}

/// The opening handshake as a server, then the echo.
async fn serve(mut socket: TcpStream) -> Result<(), Error> {
    socket.set_nodelay(true)?;
    let mut decoder = RequestDecoder::new(Limits {
        max_body: 0,
        ..Limits::default()
    });
    let mut buf = BytesMut::with_capacity(4096);
    let request = loop {
        match decoder.decode(&mut buf)? {
            Some(Decoded::Request(r)) => break r,
            Some(Decoded::Continue) | None => {}
        }
        if socket.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    };
    let mut head = BytesMut::new();
    let extensions = match server_response(&request, &config()) {
        Ok((response, extensions)) => {
            encode_response(&mut head, &response, true, false)?;
            socket.write_all(&head).await?;
            extensions
        }
        Err(e) => {
            encode_response(&mut head, &e.response(), false, false)?;
            socket.write_all(&head).await?;
            return Ok(());
        }
    };
    let ws = WebSocket::new(Role::Server, config(), 0).with_extensions(extensions);
    drive(socket, buf, ws, Role::Server, |_| {}).await
}

async fn client(url: &str) -> Result<(), Error> {
    let host = url
        .strip_prefix("ws://")
        .ok_or("the URL must start with ws://")?
        .trim_end_matches('/');
    let count = match run(host, "/getCaseCount").await? {
        Some(WsMessage::Text(t)) => t.trim().parse::<u32>()?,
        other => return Err(format!("getCaseCount answered {other:?}").into()),
    };
    println!("{count} cases");
    for case in 1..=count {
        run(host, &format!("/runCase?case={case}&agent=plexus")).await?;
        if case % 50 == 0 {
            println!("{case} / {count}");
        }
    }
    run(host, "/updateReports?agent=plexus").await?;
    println!("reports updated");
    Ok(())
}

/// One client connection to `path`, echoing until it closes: the first
/// message received, if any.
async fn run(host: &str, path: &str) -> Result<Option<WsMessage>, Error> {
    let mut socket = TcpStream::connect(host).await?;
    socket.set_nodelay(true)?;
    let (request, offer) = client_request(host, path, nonce(), &config());
    socket.write_all(&request).await?;
    let mut buf = BytesMut::with_capacity(4096);
    let extensions = loop {
        if let Some(extensions) = check_server_response(&mut buf, &offer)? {
            break extensions;
        }
        if socket.read_buf(&mut buf).await? == 0 {
            return Err(format!("{path}: closed during the handshake").into());
        }
    };
    let ws = WebSocket::new(Role::Client, config(), random_u64()).with_extensions(extensions);
    let mut first = None;
    drive(socket, buf, ws, Role::Client, |m| {
        first.get_or_insert_with(|| m.clone());
    })
    .await?;
    Ok(first)
}

/// The driver: bytes from the socket into the state machine, every
/// message back as it came, the machine's output to the socket, until the
/// closing handshake is done; then a lingering close (our half closed, the
/// peer's read to its end) so the close frame is not lost to a reset.
async fn drive(
    mut socket: TcpStream,
    mut buf: BytesMut,
    mut ws: WebSocket,
    role: Role,
    mut seen: impl FnMut(&WsMessage),
) -> Result<(), Error> {
    let mut closing = false;
    loop {
        while let Some(event) = ws.handle_receive(Instant::now(), &mut buf) {
            match event {
                WsEvent::Message(m) => {
                    seen(&m);
                    // Fails only once closing: nothing more is echoed then.
                    let _ = ws.send(&m);
                }
                WsEvent::Closed { .. } => closing = true,
            }
        }
        while let Some(bytes) = ws.poll_transmit() {
            socket.write_all(&bytes).await?;
        }
        if closing {
            break;
        }
        buf.reserve(64 << 10);
        if socket.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
    // RFC 6455, 7.1.1: the server closes the TCP connection first; the
    // client waits for it.
    if role == Role::Server {
        socket.shutdown().await?;
    }
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 4096];
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    Ok(())
}

/// 16 random bytes for a `Sec-WebSocket-Key`.
fn nonce() -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&random_u64().to_le_bytes());
    out[8..].copy_from_slice(&random_u64().to_le_bytes());
    out
}

/// A random number from the standard library's hash keys (random per
/// thread, and each `RandomState` gets new ones): enough for a test peer's
/// masking keys without a dependency.
fn random_u64() -> u64 {
    RandomState::new().build_hasher().finish()
}
