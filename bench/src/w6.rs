//! W6 http (`bench/WORKLOADS.md`): the Plexus web server (per-core mode)
//! and nginx (sendfile on, one worker per core) serve the same 500 pages,
//! each driven by wrk and by `plexus loadgen` with a new connection per
//! request, one after the other in one run; then one small page over
//! keep-alive connections from the Plexus server and from hyper, driven by
//! wrk. Every server and generator is a process of its own: their CPU
//! times (from `/proc` for servers, from the reaped child's usage for
//! generators) give CPU per request, which is what 2 cores can compare
//! when the generator limits requests/s.
//!
//! ```text
//! plexus-bench w6 [--duration 10] [--connections 64] [--threads 2]
//! ```
//!
//! Needs `nginx` and `wrk` (Debian: `apt-get install nginx wrk`). Prints a
//! `RESULT workload=w6 ...` line per server and generator, and the ratios
//! the issue's targets are stated in.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod attacks;
mod drivers;
mod servers;

pub use attacks::{run as run_attacks, Args as AttackArgs};
pub use drivers::{run as run_drivers, serve_tokio, serve_uring, Args as DriversArgs, UringArgs};
use servers::{find_program, Server};
pub use servers::{serve_hyper, serve_plexus, ServeArgs};

/// W6's options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds each generator runs against each server.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Concurrent connections of each generator.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Server threads (Plexus per-core runtimes, nginx workers, hyper
    /// workers) and generator threads; default: one per core.
    #[arg(long)]
    threads: Option<usize>,
    /// Port nginx listens on (Plexus and hyper pick their own).
    #[arg(long, default_value_t = 18080)]
    nginx_port: u16,
    /// Seed of the page sizes and of the generators' page choice.
    #[arg(long, default_value_t = 6)]
    seed: u64,
}

/// Arguments of the hidden `w6-loadgen` role.
#[derive(clap::Args, Debug)]
pub struct LoadgenArgs {
    #[arg(long)]
    addr: std::net::SocketAddr,
    #[arg(long)]
    paths: PathBuf,
    #[arg(long)]
    duration: f64,
    #[arg(long)]
    connections: usize,
    #[arg(long)]
    threads: usize,
    #[arg(long)]
    keep_alive: bool,
    #[arg(long)]
    seed: u64,
}

/// What one generator measured against one server.
#[derive(Debug, Clone, Copy)]
struct Measured {
    rps: f64,
    gbps: f64,
    p99_ms: f64,
    requests: f64,
    server_cpu_s: f64,
    generator_cpu_s: f64,
}

impl Measured {
    fn server_us_per_req(&self) -> f64 {
        self.server_cpu_s * 1e6 / self.requests.max(1.0)
    }
    fn generator_us_per_req(&self) -> f64 {
        self.generator_cpu_s * 1e6 / self.requests.max(1.0)
    }
}

/// The sizes of W6's 500 pages: smallest 3.5 KB, largest 1.1 MB, 70 %
/// under 150 KB, 90 % under 300 KB, 3 % over 500 KB; log-uniform within
/// each band, fixed by the seed.
pub fn page_sizes(count: usize, seed: u64) -> Vec<usize> {
    // (share of pages, smallest, largest) per band.
    const BANDS: [(f64, f64, f64); 4] = [
        (0.70, 3_500.0, 150_000.0),
        (0.20, 150_000.0, 300_000.0),
        (0.07, 300_000.0, 500_000.0),
        (0.03, 500_000.0, 1_100_000.0),
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut sizes = Vec::with_capacity(count);
    let mut start = 0usize;
    for (i, (share, lo, hi)) in BANDS.into_iter().enumerate() {
        let end = if i == BANDS.len() - 1 {
            count
        } else {
            start + (share * count as f64).round() as usize
        };
        for j in start..end {
            // The band's ends are pages too: the smallest and largest exist.
            let size = if j == start && i == 0 {
                lo
            } else if j + 1 == end && i == BANDS.len() - 1 {
                hi
            } else {
                (lo.ln() + rng.gen::<f64>() * (hi.ln() - lo.ln())).exp()
            };
            sizes.push(size as usize);
        }
        start = end;
    }
    sizes
}

/// Writes the pages under `dir/pages` and their paths (one per line) to
/// `dir/paths.txt`; returns the pages' directory and the paths file.
fn write_pages(dir: &Path, seed: u64) -> (PathBuf, PathBuf) {
    let pages = dir.join("pages");
    std::fs::create_dir_all(&pages).expect("create the pages directory");
    let mut paths = String::new();
    let line = "<p>Plexus W6: a static page of a fixed size, served from memory or sendfile.</p>\n";
    for (i, size) in page_sizes(500, seed).into_iter().enumerate() {
        let name = format!("page-{i:03}.html");
        let mut body = String::with_capacity(size);
        body.push_str("<!doctype html><title>W6</title>\n");
        while body.len() < size {
            body.push_str(line);
        }
        body.truncate(size);
        std::fs::write(pages.join(&name), body).expect("write a page");
        paths.push('/');
        paths.push_str(&name);
        paths.push('\n');
    }
    let list = dir.join("paths.txt");
    std::fs::write(&list, paths).expect("write the paths");
    (pages, list)
}

/// `w6-loadgen`: `plexus loadgen` as a process of its own; prints its
/// `RESULT` line.
pub fn loadgen_role(args: &LoadgenArgs) {
    use plexus::http::loadgen::{self, LoadgenConfig};
    let paths: Vec<String> = std::fs::read_to_string(&args.paths)
        .expect("read the paths")
        .lines()
        .map(str::to_owned)
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .expect("runtime");
    let report = runtime
        .block_on(loadgen::run(LoadgenConfig {
            addr: args.addr,
            host: "w6".into(),
            paths,
            connections: args.connections,
            duration: Duration::from_secs_f64(args.duration),
            rate: None,
            keep_alive: args.keep_alive,
            seed: args.seed,
            progress: None,
        }))
        .expect("loadgen");
    println!("{}", report.result_line());
}

/// Runs `command` to its end and returns its output and the CPU time it
/// used (from the usage of reaped children).
fn run_child(command: &mut Command) -> (String, f64) {
    use nix::sys::resource::{getrusage, UsageWho};
    let cpu = || {
        let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
        t(usage.user_time()) + t(usage.system_time())
    };
    let before = cpu();
    let output = command.output().expect("run a generator");
    let used = cpu() - before;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        panic!(
            "{command:?} failed: {}\n{text}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    (text, used)
}

/// The value after `key` in a `RESULT` line.
fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// wrk's figures: requests/s, bytes/s and p99 (with `--latency`).
fn parse_wrk(out: &str) -> (f64, f64, f64, f64) {
    let mut rps = f64::NAN;
    let mut bytes_per_s = f64::NAN;
    let mut p99_ms = f64::NAN;
    let mut requests = f64::NAN;
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => rps = v.parse().unwrap_or(f64::NAN),
            ["Transfer/sec:", v] => bytes_per_s = parse_size(v),
            ["99%", v] => p99_ms = parse_duration_ms(v),
            [n, "requests", "in", ..] => requests = n.parse().unwrap_or(f64::NAN),
            _ => {}
        }
    }
    (rps, bytes_per_s, p99_ms, requests)
}

fn parse_size(v: &str) -> f64 {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    n * match unit {
        "KB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        _ => 1.0,
    }
}

fn parse_duration_ms(v: &str) -> f64 {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    n * match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        _ => f64::NAN,
    }
}

struct Run<'a> {
    args: &'a Args,
    threads: usize,
    dir: &'a Path,
}

impl Run<'_> {
    /// wrk against `server`, a new connection per request unless
    /// `keep_alive`, random pages from `paths` (or `/` alone).
    fn wrk(&self, server: &Server, paths: Option<&Path>, keep_alive: bool) -> Measured {
        let script = self.dir.join("w6.lua");
        let list = paths.map_or_else(String::new, |p| p.display().to_string());
        std::fs::write(
            &script,
            format!(
                "local paths = {{}}\n\
                 if \"{list}\" ~= \"\" then for l in io.lines(\"{list}\") do paths[#paths + 1] = l end end\n\
                 math.randomseed({seed})\n\
                 request = function()\n\
                 \x20 local path = #paths > 0 and paths[math.random(#paths)] or \"/page.html\"\n\
                 \x20 return wrk.format(\"GET\", path)\n\
                 end\n",
                seed = self.args.seed
            ),
        )
        .expect("write the wrk script");
        let mut command = Command::new(find_program("wrk", &["/usr/bin/wrk"]));
        command
            .arg("-t")
            .arg(self.threads.to_string())
            .arg("-c")
            .arg(self.args.connections.to_string())
            .arg("-d")
            .arg(format!("{}s", self.args.duration))
            .arg("--latency")
            .arg("-s")
            .arg(&script);
        if !keep_alive {
            command.args(["-H", "Connection: close"]);
        }
        command.arg(format!("http://{}/", server.addr));
        let cpu_before = server.cpu_seconds();
        let (out, generator_cpu_s) = run_child(&mut command);
        let server_cpu_s = server.cpu_seconds() - cpu_before;
        let (rps, bytes_per_s, p99_ms, requests) = parse_wrk(&out);
        for line in out.lines() {
            let line = line.trim();
            if line.starts_with("Socket errors") || line.starts_with("Non-2xx") {
                eprintln!("w6: wrk against {}: {line}", server.name);
            }
        }
        Measured {
            rps,
            gbps: bytes_per_s * 8.0 / 1e9,
            p99_ms,
            requests,
            server_cpu_s,
            generator_cpu_s,
        }
    }

    /// `plexus loadgen` against `server`.
    fn loadgen(&self, server: &Server, paths: &Path, keep_alive: bool) -> Measured {
        let mut command = Command::new(std::env::current_exe().expect("own path"));
        command
            .arg("w6-loadgen")
            .arg("--addr")
            .arg(server.addr.to_string())
            .arg("--paths")
            .arg(paths)
            .arg("--duration")
            .arg(self.args.duration.to_string())
            .arg("--connections")
            .arg(self.args.connections.to_string())
            .arg("--threads")
            .arg(self.threads.to_string())
            .arg("--seed")
            .arg(self.args.seed.to_string());
        if keep_alive {
            command.arg("--keep-alive");
        }
        let cpu_before = server.cpu_seconds();
        let (out, generator_cpu_s) = run_child(&mut command);
        let server_cpu_s = server.cpu_seconds() - cpu_before;
        let line = out
            .lines()
            .find(|l| l.starts_with("RESULT"))
            .expect("a RESULT line from loadgen");
        let requests = field(line, "requests");
        if field(line, "errors") > 0.0 {
            eprintln!("w6: loadgen against {}: {line}", server.name);
        }
        Measured {
            rps: field(line, "rps"),
            gbps: field(line, "gbps"),
            p99_ms: field(line, "p99_ms"),
            requests,
            server_cpu_s,
            generator_cpu_s,
        }
    }
}

fn print(kind: &str, server: &str, generator: &str, m: &Measured) {
    println!(
        "RESULT workload={kind} server={server} generator={generator} requests={:.0} rps={:.0} gbps={:.3} p99_ms={:.2} server_cpu_us_per_req={:.1} generator_cpu_us_per_req={:.1}",
        m.requests,
        m.rps,
        m.gbps,
        m.p99_ms,
        m.server_us_per_req(),
        m.generator_us_per_req(),
    );
}

/// Runs W6; see the [module docs](self).
pub fn run(args: &Args) {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let dir = std::env::temp_dir().join(format!("plexus-w6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the run directory");
    let (pages, paths) = write_pages(&dir, args.seed);
    let run = Run {
        args,
        threads,
        dir: &dir,
    };
    eprintln!(
        "w6: 500 pages in {}, {threads} server threads, {} connections, {} s per run",
        pages.display(),
        args.connections,
        args.duration
    );

    let mut results = Vec::new();
    for server in ["plexus", "nginx"] {
        let running = match server {
            "plexus" => Server::own("plexus", "w6-serve", &pages, threads),
            _ => Server::nginx(&dir, &pages, args.nginx_port, threads),
        };
        let by_wrk = run.wrk(&running, Some(&paths), false);
        print("w6", server, "wrk", &by_wrk);
        let by_loadgen = run.loadgen(&running, &paths, false);
        print("w6", server, "loadgen", &by_loadgen);
        results.push((server, by_wrk, by_loadgen));
    }

    // Keep-alive, one small page: Plexus against hyper.
    let small = dir.join("small");
    std::fs::create_dir_all(&small).expect("create the small page's directory");
    std::fs::write(small.join("page.html"), "<!doctype html><p>hello</p>\n")
        .expect("write the small page");
    let plexus = Server::own("plexus", "w6-serve", &small, threads);
    let plexus_ka = run.wrk(&plexus, None, true);
    print("w6-keepalive", "plexus", "wrk", &plexus_ka);
    drop(plexus);
    let hyper = Server::own("hyper", "w6-hyper", &small.join("page.html"), threads);
    let hyper_ka = run.wrk(&hyper, None, true);
    print("w6-keepalive", "hyper", "wrk", &hyper_ka);
    drop(hyper);

    let (_, p_wrk, p_lg) = results[0];
    let (_, n_wrk, n_lg) = results[1];
    println!(
        "RATIO w6 server_cpu_per_req plexus/nginx: {:.2} (wrk) {:.2} (loadgen) (target <= 0.4)",
        p_wrk.server_us_per_req() / n_wrk.server_us_per_req(),
        p_lg.server_us_per_req() / n_lg.server_us_per_req(),
    );
    println!(
        "RATIO w6 generator_cpu_per_req loadgen/wrk: {:.2} (plexus) {:.2} (nginx) (target <= 0.5, at equal or higher rate: rps {:.0}/{:.0}, {:.0}/{:.0})",
        p_lg.generator_us_per_req() / p_wrk.generator_us_per_req(),
        n_lg.generator_us_per_req() / n_wrk.generator_us_per_req(),
        p_lg.rps,
        p_wrk.rps,
        n_lg.rps,
        n_wrk.rps,
    );
    println!(
        "RATIO w6 keepalive rps plexus/hyper: {:.2} (target > 1)",
        plexus_ka.rps / hyper_ka.rps
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_follow_the_workload() {
        let sizes = page_sizes(500, 6);
        assert_eq!(sizes.len(), 500);
        let share = |f: &dyn Fn(usize) -> bool| {
            sizes.iter().filter(|&&s| f(s)).count() as f64 / sizes.len() as f64
        };
        assert_eq!(sizes.iter().min(), Some(&3_500));
        assert_eq!(sizes.iter().max(), Some(&1_100_000));
        assert!((share(&|s| s < 150_000) - 0.70).abs() < 0.01);
        assert!((share(&|s| s < 300_000) - 0.90).abs() < 0.01);
        assert!((share(&|s| s > 500_000) - 0.03).abs() < 0.01);
        assert_eq!(sizes, page_sizes(500, 6), "fixed by the seed");
    }

    #[test]
    fn wrk_output_is_read() {
        let out = "  Latency Distribution\n     50%    1.00ms\n     99%   95.04ms\n  16128 requests in 3.10s, 1.87GB read\nRequests/sec:   5191.20\nTransfer/sec:    615.60MB\n";
        let (rps, bytes, p99, n) = parse_wrk(out);
        assert_eq!((rps, p99, n), (5191.2, 95.04, 16128.0));
        assert!((bytes - 615.6 * 1024.0 * 1024.0).abs() < 1.0);
    }
}
