//! What a spike of connections leaves in the server's memory: a per-core
//! server (as `plexus serve` runs it) with one small file, then `rounds`
//! times `connections` connections opened at once, held a second (idle,
//! or after one request each with `--request`), and closed; the process's
//! resident set size (`VmRSS`) before, at each peak and after each round.
//!
//! ```text
//! cargo run --release -p plexus-http --example rss_after_spike -- 2000 5 [--request]
//! ```
//!
//! The figures are in `docs/HTTP.md` ("Memory"). The clients run in the
//! same process (a socket and a few bytes each).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use plexus_http::server::WebServer;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let connections: usize = args.first().map_or(Ok(2000), |a| a.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(5), |a| a.parse())?;
    let request = args.iter().any(|a| a == "--request");

    let dir = std::env::temp_dir().join(format!("plexus-rss-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("a.txt"), "hello\n")?;
    let server = WebServer::new()
        .static_dir("/", &dir, 1 << 20)?
        .listen_per_core("127.0.0.1:0", 2)?;
    let addr = server.local_addr();
    let settle = || std::thread::sleep(Duration::from_secs(1));
    settle();
    println!(
        "{connections} connections x {rounds} rounds ({}): before {:.1} MiB",
        if request { "one request each" } else { "idle" },
        rss_mib()
    );
    let get = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    for round in 0..rounds {
        let mut open = Vec::with_capacity(connections);
        for _ in 0..connections {
            let mut s = TcpStream::connect(addr)?;
            if request {
                s.write_all(get)?;
            }
            open.push(s);
        }
        if request {
            for s in &mut open {
                let mut got = Vec::new();
                let mut buf = [0u8; 512];
                while !got.ends_with(b"hello\n") {
                    let n = s.read(&mut buf)?;
                    if n == 0 {
                        return Err("closed before the response".into());
                    }
                    got.extend_from_slice(&buf[..n]);
                }
            }
        }
        settle();
        let peak = rss_mib();
        drop(open);
        settle();
        println!(
            "round {round}: {peak:.1} MiB with the connections open, {:.1} MiB after they closed",
            rss_mib()
        );
    }
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
