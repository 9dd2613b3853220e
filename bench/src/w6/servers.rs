//! The servers W6 measures, each a process of its own so that its CPU
//! time is its own: the Plexus web server in per-core mode (this binary,
//! `w6-serve`), hyper's HTTP/1.1 server on a tokio runtime (this binary,
//! `w6-hyper`: the keep-alive baseline) and nginx (Debian's, sendfile on,
//! one worker per core).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use plexus::http::server::{LoadOptions, WebServer};

/// Arguments of the hidden `w6-serve` and `w6-hyper` roles.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// The pages to serve (`w6-serve`), or the page answered to every
    /// request (`w6-hyper`: a file).
    #[arg(long)]
    pub root: PathBuf,
    /// Listen address.
    #[arg(long)]
    pub addr: SocketAddr,
    /// Threads (one runtime each for Plexus; worker threads for hyper).
    #[arg(long)]
    pub threads: usize,
    /// Pages of at least this many bytes are sent with `sendfile`
    /// (`w6-serve`; a size above every page serves them all from memory).
    #[arg(long, default_value_t = LoadOptions::default().sendfile_from)]
    pub sendfile_from: usize,
}

/// `w6-serve`: the pages under `/`, per-core, until killed.
pub fn serve_plexus(args: &ServeArgs) {
    let server = WebServer::new()
        .static_dir_with(
            "/",
            &args.root,
            LoadOptions {
                max_in_memory: 1 << 30,
                sendfile_from: args.sendfile_from,
            },
        )
        .expect("load the pages")
        .listen_per_core(&args.addr.to_string(), args.threads)
        .expect("listen");
    println!("READY {}", server.local_addr());
    // Serves until the benchmark kills the process.
    loop {
        std::thread::park();
    }
}

/// `w6-hyper`: one page for every request, keep-alive, until killed.
pub fn serve_hyper(args: &ServeArgs) {
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let page = Bytes::from(std::fs::read(&args.root).expect("read the page"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .expect("listen");
        println!("READY {}", listener.local_addr().expect("bound"));
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let page = page.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req| {
                    let page = page.clone();
                    async move {
                        let response = hyper::Response::builder()
                            .header("content-type", "text/html")
                            .body(Full::new(page))
                            .expect("a valid response");
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
}

/// A server process, killed (with its children) when dropped.
pub struct Server {
    pub name: &'static str,
    pub addr: SocketAddr,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        // A SIGKILLed nginx master leaves its workers running; on SIGTERM
        // it stops them at once.
        if self.name == "nginx" {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            if self.child.wait().is_ok() {
                return;
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts one of this binary's server roles and waits for its `READY`.
    pub fn own(name: &'static str, role: &str, root: &Path, threads: usize) -> Server {
        Self::own_with(name, role, &[], root, threads)
    }

    /// [`own`](Self::own), with more arguments for the role.
    pub fn own_with(
        name: &'static str,
        role: &str,
        extra: &[&str],
        root: &Path,
        threads: usize,
    ) -> Server {
        use std::io::BufRead;
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .arg(role)
            .args(extra)
            .args(["--addr", "127.0.0.1:0", "--threads"])
            .arg(threads.to_string())
            .arg("--root")
            .arg(root)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a server role");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("READY line");
        let addr = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{role} did not start: {line:?}"));
        Server { name, addr, child }
    }

    /// Starts nginx on `port` serving `root` with one worker per thread,
    /// its files under `dir`, and waits until it accepts.
    pub fn nginx(dir: &Path, root: &Path, port: u16, workers: usize) -> Server {
        let user = if nix_is_root() { "user root;\n" } else { "" };
        let conf = format!(
            "{user}worker_processes {workers};\ndaemon off;\nmaster_process on;\n\
             pid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n\
             \x20 keepalive_requests 1000000;\n  default_type text/html;\n\
             \x20 client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n\
             \x20 fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n\
             \x20 scgi_temp_path {dir}/scgi;\n\
             \x20 server {{ listen 127.0.0.1:{port} reuseport; root {root}; }}\n}}\n",
            dir = dir.display(),
            root = root.display(),
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).expect("write nginx.conf");
        let child = Command::new(nginx_binary())
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let server = Server {
            name: "nginx",
            addr: ([127, 0, 0, 1], port).into(),
            child,
        };
        // nginx says nothing when ready: wait until it accepts (bounded).
        for _ in 0..500 {
            if std::net::TcpStream::connect(server.addr).is_ok() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let addr = server.addr;
        drop(server);
        panic!(
            "nginx did not start on {addr}; see {}/error.log",
            dir.display()
        );
    }

    /// CPU time (user + system) of the server and its child processes
    /// (nginx's workers), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let root = self.child.id();
        let mut total = 0.0;
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return 0.0;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some((ppid, cpu)) = proc_stat(pid) {
                if pid == root || ppid == root {
                    total += cpu;
                }
            }
        }
        total
    }
}

/// `(parent pid, user + system seconds)` of a process, from
/// `/proc/PID/stat`.
fn proc_stat(pid: u32) -> Option<(u32, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((ppid, (utime + stime) / clock_ticks()))
}

fn clock_ticks() -> f64 {
    // Linux reports in USER_HZ, 100 on every architecture it runs on here.
    100.0
}

fn nix_is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Debian's nginx, on PATH or where the package puts it.
pub fn nginx_binary() -> PathBuf {
    find_program("nginx", &["/usr/sbin/nginx"])
}

/// `name` on PATH, or the first of `fallbacks` that exists.
pub fn find_program(name: &str, fallbacks: &[&str]) -> PathBuf {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    fallbacks
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}
