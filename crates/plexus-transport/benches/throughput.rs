//! Throughput of each transport with its usual stack against a plain tokio
//! program moving the same bytes in the same run.
//!
//! ```text
//! cargo bench -p plexus-transport --bench throughput [-- FILTER]
//! ```
//!
//! Prints one `RESULT workload=transport-<t>-<size> system=<plexus|baseline>
//! msgs_per_s=.. mbytes_per_s=.. vs_baseline=..` line per measurement (the
//! best of three runs, alternating plexus and baseline). Baselines: TCP and
//! UDS write length-prefixed messages through a `BufWriter` and read them
//! with a `BufReader`; UDP sends plain datagrams without any reliability
//! (what arrives is counted); mem moves `Bytes` through a bounded tokio
//! channel.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_net::StackSpec;
use plexus_transport::udp::UdpEndpoint;
use plexus_transport::{mem, tcp, uds, Link};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};

const RUNS: usize = 3;

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cases: [(&str, usize, usize); 9] = [
        ("tcp", 64, 2_000_000),
        ("tcp", 64 << 10, 20_000),
        ("uds", 64, 2_000_000),
        ("uds", 64 << 10, 20_000),
        ("udp", 64, 300_000),
        ("udp", 8 << 10, 50_000),
        // The same with a delivery window that fits the default socket
        // receive buffer (64 x 8 KiB in flight overflow it; there is no
        // congestion control yet).
        ("udp-w16", 8 << 10, 50_000),
        ("mem", 64, 1_000_000),
        ("mem", 64 << 10, 100_000),
    ];
    for (transport, size, n) in cases {
        let workload = format!("transport-{transport}-{}", label(size));
        if filter
            .as_ref()
            .is_some_and(|f| !workload.ends_with(f.as_str()))
        {
            continue;
        }
        let (mut best_p, mut best_b) = (0f64, 0f64);
        for _ in 0..RUNS {
            let p = rt.block_on(plexus(transport, size, n));
            let b = rt.block_on(baseline(transport, size, n));
            best_p = best_p.max(p.0 as f64 / p.1.as_secs_f64());
            best_b = best_b.max(b.0 as f64 / b.1.as_secs_f64());
        }
        for (system, rate) in [("plexus", best_p), ("baseline", best_b)] {
            println!(
                "RESULT workload={workload} system={system} msgs_per_s={:.0} mbytes_per_s={:.1} vs_baseline={:.2}",
                rate,
                rate * size as f64 / 1e6,
                rate / best_b
            );
        }
    }
}

fn label(size: usize) -> String {
    if size >= 1024 {
        format!("{}k", size >> 10)
    } else {
        size.to_string()
    }
}

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().expect("valid address")
}

fn sock_path() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plexus-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bench.sock");
    let _ = std::fs::remove_file(&path);
    path
}

/// Messages received and the time it took.
async fn plexus(transport: &str, size: usize, n: usize) -> (usize, Duration) {
    let message = Bytes::from(vec![0xa5u8; size]);
    let (a, b): (Link, Link) = match transport {
        "tcp" => {
            let spec: StackSpec = "tcp / framing".parse().expect("spec");
            let l = tcp::TcpListener::bind(&spec, local()).await.expect("bind");
            let a = tcp::connect(&spec, l.local_addr()).await.expect("connect");
            (a, l.accept().await.expect("accept"))
        }
        "uds" => {
            let spec: StackSpec = "uds / framing".parse().expect("spec");
            let path = sock_path();
            let l = uds::UdsListener::bind(&spec, &path).expect("bind");
            let a = uds::connect(&spec, &path).await.expect("connect");
            (a, l.accept().await.expect("accept"))
        }
        "udp" | "udp-w16" => {
            let spec: StackSpec = if transport == "udp" {
                "udp / slicing / delivery / ordering"
            } else {
                "udp / slicing / delivery(send_window=16) / ordering"
            }
            .parse()
            .expect("spec");
            let ea = UdpEndpoint::bind(&spec, local()).await.expect("bind");
            let eb = UdpEndpoint::bind(&spec, local()).await.expect("bind");
            let a = ea.connect(eb.local_addr()).await.expect("connect");
            a.send(message.clone()).await.expect("first");
            let mut b = eb.accept().await.expect("accept");
            b.recv_message().await.expect("first");
            // The endpoints must outlive the links: leak them for the run.
            std::mem::forget((ea, eb));
            (a, b)
        }
        _ => mem::pair(&"mem / ordering".parse().expect("spec")),
    };
    let (tx, _a_rx) = a.split();
    let (_b_tx, mut rx) = b.split();
    timed(
        async move {
            for _ in 0..n {
                tx.send(message.clone()).await.expect("send");
            }
            tx
        },
        async move {
            for _ in 0..n {
                rx.recv_message().await.expect("recv");
            }
            n
        },
    )
    .await
}

async fn timed<S, R, T>(send: S, recv: R) -> (usize, Duration)
where
    S: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    R: Future<Output = usize> + Send + 'static,
{
    let start = Instant::now();
    let s = tokio::spawn(send);
    let got = tokio::spawn(recv).await.expect("receiver");
    let elapsed = start.elapsed();
    drop(s.await.expect("sender"));
    (got, elapsed)
}

async fn baseline(transport: &str, size: usize, n: usize) -> (usize, Duration) {
    let message = Bytes::from(vec![0xa5u8; size]);
    match transport {
        "tcp" => {
            let l = TcpListener::bind(local()).await.expect("bind");
            let a = TcpStream::connect(l.local_addr().expect("addr"))
                .await
                .expect("connect");
            let (b, _) = l.accept().await.expect("accept");
            a.set_nodelay(true).expect("nodelay");
            b.set_nodelay(true).expect("nodelay");
            stream_baseline(a, b, message, n).await
        }
        "uds" => {
            let path = sock_path();
            let l = UnixListener::bind(&path).expect("bind");
            let a = UnixStream::connect(&path).await.expect("connect");
            let (b, _) = l.accept().await.expect("accept");
            stream_baseline(a, b, message, n).await
        }
        "udp" | "udp-w16" => {
            let a = UdpSocket::bind(local()).await.expect("bind");
            let b = UdpSocket::bind(local()).await.expect("bind");
            let to = b.local_addr().expect("addr");
            timed(
                async move {
                    for _ in 0..n {
                        a.send_to(&message, to).await.expect("send");
                    }
                },
                async move {
                    let mut buf = vec![0u8; 65_536];
                    let mut got = 0;
                    // Plain UDP loses what overflows the receive buffer:
                    // stop after 100 ms of silence and count what came.
                    while got < n {
                        match tokio::time::timeout(Duration::from_millis(100), b.recv(&mut buf))
                            .await
                        {
                            Ok(r) => {
                                r.expect("recv");
                                got += 1;
                            }
                            Err(_) => break,
                        }
                    }
                    got
                },
            )
            .await
        }
        _ => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(1024);
            timed(
                async move {
                    for _ in 0..n {
                        tx.send(message.clone()).await.expect("send");
                    }
                },
                async move {
                    for _ in 0..n {
                        rx.recv().await.expect("recv");
                    }
                    n
                },
            )
            .await
        }
    }
}

async fn stream_baseline<S>(a: S, b: S, message: Bytes, n: usize) -> (usize, Duration)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    timed(
        async move {
            let mut w = BufWriter::new(a);
            for _ in 0..n {
                w.write_u32(message.len() as u32).await.expect("write");
                w.write_all(&message).await.expect("write");
            }
            w.flush().await.expect("flush");
            w
        },
        async move {
            let mut r = BufReader::new(b);
            let mut buf = vec![0u8; 1 << 20];
            for _ in 0..n {
                let len = r.read_u32().await.expect("read") as usize;
                r.read_exact(&mut buf[..len]).await.expect("read");
            }
            n
        },
    )
    .await
}
