//! Issue 20's question: does an io_uring runtime cut the web server's CPU
//! per request? Two servers of the same shape, one on monoio's io_uring
//! driver (`w6-loop-uring`), one on tokio's epoll driver
//! (`w6-loop-tokio`), both per-core (one single-threaded runtime and one
//! `SO_REUSEPORT` listener per thread) and both running each connection
//! through Plexus's sans-IO pieces: a [`Stack`] built from `tcp / http`
//! with the web server's `http` layer (its default settings, counting into
//! totals as [`WebServer`](plexus::http::server::WebServer) does), requests
//! answered by [`StaticFiles`]. Only the loop around them is this module's:
//!
//! ```text
//!  accept ─► read ─► Stack::handle_receive ─► RequestMessage ─► StaticFiles::serve
//!     ▲                                                              │
//!   close ◄─ closed? ◄─ write (vectored) ◄─ drain_transmit ◄─ Stack::handle_send
//! ```
//!
//! Against the Plexus per-core server (`w6-serve`), the difference is its
//! link machinery (the stream driver, the link's queues, the hand-over to
//! the serving task); between the two loops, only the I/O driver.
//! `w6-drivers` runs the three, alternating, under wrk.
//!
//! ```text
//! plexus-bench w6-drivers [--rounds 3] [--duration 10] [--connections 64]
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus::http::server::{LoadOptions, StaticFiles, WebServer};
use plexus::http::wire::{RequestMessage, ResponseMessage};
use plexus::net::{Frame, LinkContext, Stack, StackSpec};
use socket2::{Domain, Protocol, Socket, Type};

use super::servers::Server;
use super::{print, write_pages, Measured, Run, ServeArgs};

/// Bytes read per call (at least): a request head's bound, the `http`
/// layer's default `max_head`.
const READ_BUF: usize = 16 << 10;
/// Connections the kernel queues for each thread's listener (as the
/// per-core server).
const BACKLOG: i32 = 1024;
/// Slices per vectored write.
const MAX_IOV: usize = 64;

/// What every connection of both loops shares: the stack's spec and the
/// pages.
struct Site {
    spec: StackSpec,
    files: StaticFiles,
}

impl Site {
    fn load(root: &Path) -> Self {
        Self {
            spec: WebServer::new()
                .stack_spec()
                .expect("the web server's stack parses"),
            // Every page from memory: these loops write frames with vectored
            // writes and no `sendfile`, so the drivers compare on the same
            // bytes.
            files: StaticFiles::load_with(
                root,
                LoadOptions {
                    max_in_memory: 1 << 30,
                    sendfile_from: usize::MAX,
                },
            )
            .expect("load the pages"),
        }
    }
}

/// One connection's state, the same for both loops: its stack and the
/// requests it handed up. Sans-IO: the loop feeds what it read and writes
/// what [`drain`](Self::drain) gives.
struct Connection {
    stack: Stack,
    received: VecDeque<Bytes>,
}

impl Connection {
    fn new(site: &Site) -> Self {
        Self {
            stack: site.spec.build_link(LinkContext {
                now: Instant::now(),
                link_id: 0,
            }),
            received: VecDeque::new(),
        }
    }

    /// Feeds bytes read from the socket and answers every whole request
    /// (the web server's `serve` and `dispatch` for one static route at
    /// `/`).
    fn handle_read(&mut self, site: &Site, bytes: Bytes) {
        let now = Instant::now();
        // An error closes the stack; the loop sees it in `is_closed`.
        let _ = self.stack.handle_receive(now, bytes);
        self.stack.drain_receive(&mut self.received);
        while let Some(message) = self.received.pop_front() {
            let Ok(RequestMessage { id, request }) = RequestMessage::decode(message) else {
                // The layer only hands up what it encoded.
                continue;
            };
            let name = request.path().strip_prefix('/').unwrap_or("");
            let response = site.files.serve(&request, name);
            let frame = ResponseMessage::Whole { id, response }.encode();
            // Refused only once closed; nothing to answer then.
            let _ = self.stack.handle_send(now, frame);
        }
    }

    fn handle_timeout(&mut self) {
        let _ = self.stack.handle_timeout(Instant::now());
    }

    /// Moves what the stack has for the socket to the back of `out`.
    fn drain(&mut self, out: &mut VecDeque<Box<Frame>>) {
        self.stack
            .drain_transmit(|frame| out.push_back(Box::new(std::mem::take(frame))));
    }

    fn deadline(&self) -> Option<Instant> {
        self.stack.poll_timeout()
    }

    fn is_closed(&self) -> bool {
        self.stack.is_closed()
    }
}

/// Removes the first `n` written bytes from `out`.
fn consume(out: &mut VecDeque<Box<Frame>>, mut n: usize) {
    while n > 0 {
        let Some(front) = out.front_mut() else {
            return;
        };
        let len = front.len();
        if n < len {
            front.advance(n);
            return;
        }
        n -= len;
        out.pop_front();
    }
}

/// A listening socket on `addr` that the other threads' sockets share
/// (`SO_REUSEPORT`), as the per-core server's.
fn reuse_port_listener(addr: SocketAddr) -> std::net::TcpListener {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .expect("a socket");
    socket.set_reuse_address(true).expect("SO_REUSEADDR");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    socket.bind(&addr.into()).expect("bind");
    socket.listen(BACKLOG).expect("listen");
    socket.into()
}

/// Binds one listener per thread, runs `serve` on each in a thread of its
/// own, prints `READY`, and serves until killed.
fn per_core(args: &ServeArgs, serve: fn(std::net::TcpListener, Arc<Site>)) {
    let site = Arc::new(Site::load(&args.root));
    let mut addr = args.addr;
    for index in 0..args.threads.max(1) {
        let listener = reuse_port_listener(addr);
        // Port 0: the first listener picked the port; the others join it.
        addr = listener.local_addr().expect("bound");
        let site = site.clone();
        std::thread::Builder::new()
            .name(format!("w6-loop-{index}"))
            .spawn(move || serve(listener, site))
            .expect("start a thread");
    }
    println!("READY {addr}");
    // Serves until the benchmark kills the process.
    loop {
        std::thread::park();
    }
}

/// `w6-loop-tokio`: the loop on a current-thread tokio runtime per thread.
pub fn serve_tokio(args: &ServeArgs) {
    per_core(args, tokio_loop::serve);
}

/// Arguments of the hidden `w6-loop-uring` role.
#[derive(clap::Args, Debug, Clone)]
pub struct UringArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Set up each ring with `IORING_SETUP_COOP_TASKRUN`,
    /// `IORING_SETUP_SINGLE_ISSUER` and `IORING_SETUP_DEFER_TASKRUN` (Linux
    /// 6.1): completions are run when the thread waits for them, not by
    /// interrupting it.
    #[arg(long)]
    tuned: bool,
}

/// `w6-loop-uring`: the loop on a monoio io_uring runtime per thread.
#[cfg(target_os = "linux")]
pub fn serve_uring(args: &UringArgs) {
    if args.tuned {
        per_core(&args.serve, uring_loop::serve_tuned);
    } else {
        per_core(&args.serve, uring_loop::serve);
    }
}

/// `w6-loop-uring`: io_uring is Linux's.
#[cfg(not(target_os = "linux"))]
pub fn serve_uring(_: &UringArgs) {
    panic!("w6-loop-uring needs Linux (io_uring)");
}

mod tokio_loop {
    use std::collections::VecDeque;
    use std::io::IoSlice;
    use std::sync::Arc;

    use bytes::BytesMut;
    use plexus::net::Frame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::{consume, Connection, Site, MAX_IOV, READ_BUF};

    pub(super) fn serve(listener: std::net::TcpListener, site: Arc<Site>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            listener.set_nonblocking(true).expect("non-blocking");
            let listener = tokio::net::TcpListener::from_std(listener).expect("register");
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let _ = socket.set_nodelay(true);
                tokio::spawn(connection(socket, site.clone()));
            }
        });
    }

    async fn connection(mut socket: TcpStream, site: Arc<Site>) {
        let mut conn = Connection::new(&site);
        let mut buf = BytesMut::with_capacity(READ_BUF);
        let mut out = VecDeque::new();
        loop {
            if buf.capacity() < READ_BUF / 2 {
                buf.reserve(READ_BUF);
            }
            let read = match conn.deadline() {
                Some(at) => tokio::time::timeout_at(at.into(), socket.read_buf(&mut buf)).await,
                None => Ok(socket.read_buf(&mut buf).await),
            };
            match read {
                Err(_elapsed) => conn.handle_timeout(),
                Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(_)) => conn.handle_read(&site, buf.split().freeze()),
            }
            conn.drain(&mut out);
            if write_all(&mut socket, &mut out).await.is_err() || conn.is_closed() {
                return;
            }
        }
    }

    async fn write_all(
        socket: &mut TcpStream,
        out: &mut VecDeque<Box<Frame>>,
    ) -> std::io::Result<()> {
        while !out.is_empty() {
            let written = {
                let mut slices = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                for frame in out.iter() {
                    if n + 1 + plexus::net::frame::INLINE_SEGMENTS > MAX_IOV {
                        break;
                    }
                    n += frame.io_slices(&mut slices[n..]);
                }
                socket.write_vectored(&slices[..n]).await?
            };
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            consume(out, written);
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
mod uring_loop {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use bytes::BytesMut;
    use monoio::io::{AsyncReadRent, AsyncWriteRent};
    use monoio::net::TcpStream;
    use plexus::net::Frame;

    use super::{consume, Connection, Site, MAX_IOV, READ_BUF};

    /// Submission queue entries per ring.
    const RING_ENTRIES: u32 = 1024;

    /// The loop on monoio's default ring.
    pub(super) fn serve(listener: std::net::TcpListener, site: Arc<Site>) {
        run(listener, site, io_uring::IoUring::builder());
    }

    /// The loop on a ring with deferred task work (see `UringArgs::tuned`).
    pub(super) fn serve_tuned(listener: std::net::TcpListener, site: Arc<Site>) {
        let mut ring = io_uring::IoUring::builder();
        ring.setup_coop_taskrun()
            .setup_single_issuer()
            .setup_defer_taskrun();
        run(listener, site, ring);
    }

    fn run(listener: std::net::TcpListener, site: Arc<Site>, ring: io_uring::Builder) {
        let mut runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .with_entries(RING_ENTRIES)
            .uring_builder(ring)
            .enable_timer()
            .build()
            .expect("an io_uring runtime (is io_uring enabled?)");
        runtime.block_on(async move {
            let listener = monoio::net::TcpListener::from_std(listener).expect("register");
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let _ = socket.set_nodelay(true);
                monoio::spawn(connection(socket, site.clone()));
            }
        });
    }

    async fn connection(mut socket: TcpStream, site: Arc<Site>) {
        let mut conn = Connection::new(&site);
        let mut buf = BytesMut::with_capacity(READ_BUF);
        let mut out = VecDeque::new();
        loop {
            if buf.capacity() < READ_BUF / 2 {
                buf.reserve(READ_BUF);
            }
            // The read owns the buffer until it completes; a timeout
            // cancels it and the buffer goes with it.
            let read = socket.read(buf);
            let (result, back) = match conn.deadline() {
                Some(at) => match monoio::time::timeout_at(at.into(), read).await {
                    Ok(done) => done,
                    Err(_elapsed) => {
                        conn.handle_timeout();
                        buf = BytesMut::with_capacity(READ_BUF);
                        conn.drain(&mut out);
                        if write_all(&mut socket, &mut out).await.is_err() || conn.is_closed() {
                            return;
                        }
                        continue;
                    }
                },
                None => read.await,
            };
            buf = back;
            match result {
                Ok(0) | Err(_) => return,
                Ok(_) => conn.handle_read(&site, buf.split().freeze()),
            }
            conn.drain(&mut out);
            if write_all(&mut socket, &mut out).await.is_err() || conn.is_closed() {
                return;
            }
        }
    }

    /// Writes every frame of `out` with vectored writes (`IORING_OP_WRITEV`).
    ///
    /// The ring reads the frames' memory while the write is in flight: the
    /// iovecs point into the boxed frames of `out` (boxed, so that a frame's
    /// inline headers do not move), which are neither touched nor dropped
    /// until the write completes: the write is awaited to its end, never
    /// cancelled.
    async fn write_all(
        socket: &mut TcpStream,
        out: &mut VecDeque<Box<Frame>>,
    ) -> std::io::Result<()> {
        let mut iovecs: Vec<libc::iovec> = Vec::with_capacity(MAX_IOV);
        while !out.is_empty() {
            iovecs.clear();
            'frames: for frame in out.iter() {
                for chunk in frame.chunks() {
                    if iovecs.len() == MAX_IOV {
                        break 'frames;
                    }
                    iovecs.push(libc::iovec {
                        iov_base: chunk.as_ptr().cast_mut().cast(),
                        iov_len: chunk.len(),
                    });
                }
            }
            let (result, back) = socket.writev(iovecs).await;
            iovecs = back;
            let written = result?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            consume(out, written);
        }
        Ok(())
    }
}

/// `w6-drivers`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Rounds; each runs every server once, in turn.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The servers, in the order each round runs them: `plexus` (the web
    /// server, per-core, pages from memory), `plexus-sendfile` (the same
    /// with its `sendfile`), `tokio` (the loop on tokio), `uring` (the loop
    /// on io_uring), `uring-tuned` (the same, deferred task work).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "plexus,tokio,uring,uring-tuned"
    )]
    servers: Vec<Driver>,
    /// Seconds wrk runs against each server.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// wrk's concurrent connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Server threads and wrk threads; default: one per core.
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of the page sizes and of wrk's page choice.
    #[arg(long, default_value_t = 6)]
    seed: u64,
}

/// A server `w6-drivers` measures.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The Plexus web server in per-core mode (`w6-serve`), every page
    /// from memory as the loops serve them.
    Plexus,
    /// The same with its default `sendfile` for pages of 16 KiB and more
    /// (the loops have none: not the same bytes path).
    PlexusSendfile,
    /// This module's loop on tokio (`w6-loop-tokio`).
    Tokio,
    /// This module's loop on monoio's io_uring driver (`w6-loop-uring`).
    Uring,
    /// The same with deferred task work (`w6-loop-uring --tuned`).
    UringTuned,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Plexus => "plexus",
            Driver::PlexusSendfile => "plexus-sendfile",
            Driver::Tokio => "loop-tokio",
            Driver::Uring => "loop-uring",
            Driver::UringTuned => "loop-uring-tuned",
        }
    }

    fn role(self) -> (&'static str, &'static [&'static str]) {
        match self {
            // Above every page: all from memory.
            Driver::Plexus => ("w6-serve", &["--sendfile-from", "1073741824"]),
            Driver::PlexusSendfile => ("w6-serve", &[]),
            Driver::Tokio => ("w6-loop-tokio", &[]),
            Driver::Uring => ("w6-loop-uring", &[]),
            Driver::UringTuned => ("w6-loop-uring", &["--tuned"]),
        }
    }
}

/// Runs `w6-drivers`; see the [module docs](self). Prints a `RESULT` line
/// per run and a `SUMMARY` line per server.
pub fn run(args: &Args) {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let dir = std::env::temp_dir().join(format!("plexus-w6-drivers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the run directory");
    let (pages, paths) = write_pages(&dir, args.seed);
    let w6 = super::Args {
        duration: args.duration,
        connections: args.connections,
        threads: Some(threads),
        nginx_port: 0,
        seed: args.seed,
    };
    let run = Run {
        args: &w6,
        threads,
        dir: &dir,
    };
    eprintln!(
        "w6-drivers: {} rounds of {:?}, {threads} server threads, wrk with {} connections, {} s per run",
        args.rounds, args.servers, args.connections, args.duration
    );
    let mut all: Vec<(Driver, Measured)> = Vec::new();
    for _ in 0..args.rounds {
        for &driver in &args.servers {
            let (role, extra) = driver.role();
            let server = Server::own_with(driver.name(), role, extra, &pages, threads);
            let measured = run.wrk(&server, Some(&paths), false);
            drop(server);
            print("w6-drivers", driver.name(), "wrk", &measured);
            all.push((driver, measured));
        }
    }
    for &driver in &args.servers {
        let mine: Vec<&Measured> = all
            .iter()
            .filter(|(d, _)| *d == driver)
            .map(|(_, m)| m)
            .collect();
        let mut cpu: Vec<f64> = mine.iter().map(|m| m.server_us_per_req()).collect();
        cpu.sort_by(f64::total_cmp);
        let rps: Vec<String> = mine.iter().map(|m| format!("{:.0}", m.rps)).collect();
        let cpu_text: Vec<String> = cpu.iter().map(|c| format!("{c:.1}")).collect();
        println!(
            "SUMMARY w6-drivers server={} runs={} server_cpu_us_per_req_median={:.1} sorted={} rps={}",
            driver.name(),
            mine.len(),
            cpu.get(cpu.len() / 2).copied().unwrap_or(f64::NAN),
            cpu_text.join(","),
            rps.join(","),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
