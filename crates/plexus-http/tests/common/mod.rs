//! What the tests share: reading HTTP responses off a socket (or a TLS
//! stream).
#![allow(dead_code)] // not every includer uses all of it

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response as the test reads it.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (with a Content-Length) from `stream`, buffering
/// what follows in `buf`. `None` once the server closed the connection.
pub async fn read_response<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Option<Got> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(buf[..end].to_vec()).unwrap();
            let mut lines = head.split("\r\n");
            let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
            let headers: Vec<(String, String)> = lines
                .map(|l| {
                    let (n, v) = l.split_once(':').unwrap();
                    (n.to_owned(), v.trim().to_owned())
                })
                .collect();
            let len: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map_or(0, |(_, v)| v.parse().unwrap());
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed inside a body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..end + 4 + len].to_vec();
            buf.drain(..end + 4 + len);
            return Some(Got {
                status,
                headers,
                body,
            });
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

pub async fn ask(addr: std::net::SocketAddr, request: &[u8]) -> Got {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    read_response(&mut s, &mut Vec::new()).await.unwrap()
}

/// A new directory for one server's files: the tests run at once, and a
/// file rewritten under a server that is sending it is sent as it is then.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    static DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("plexus-{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
