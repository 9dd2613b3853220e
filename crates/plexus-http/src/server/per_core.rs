//! Per-core mode: one single-threaded runtime per core, each with a
//! listener of its own on the same port (`SO_REUSEPORT`), so the kernel
//! spreads connections over the threads and a connection lives its whole
//! life on the thread that accepted it: parsed, routed and answered there,
//! with nothing shared on the request path but the server's immutable
//! routes and files (the shared-nothing design of Seastar and of the
//! Rusty report). An actor route's request still goes to the actor's
//! mailbox, wherever the actor runs.
//!
//! **A port already served is refused.** `SO_REUSEPORT` would let a second
//! server on the port start without a word and take part of its
//! connections. So the first listener is bound *without* it: a bind is
//! atomic, and fails (`EADDRINUSE`) if any socket holds the port, with
//! `SO_REUSEPORT` or not, whoever owns it; that is
//! [`ServeError::AddrInUse`]. Only then is `SO_REUSEPORT` set on the bound
//! socket, before it listens, and the other threads' listeners join it.
//! From its bind on, the port is this server's: another `plexus serve`
//! (which binds the same way) is refused however close the two starts are.
//! What remains possible is what the kernel allows by design: another
//! program of the same user that binds with `SO_REUSEPORT` itself, after
//! this one listens, joins the group.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use plexus_transport::tcp::TcpListener;
use plexus_transport::{BindError, LinkConfig};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::oneshot;

use super::{parse_addr, ServeError, WebServer};

/// Connections the kernel queues for each thread's listener.
const BACKLOG: i32 = 1024;

/// A server running in per-core mode; see [`WebServer::listen_per_core`].
///
/// One single-threaded runtime per core, each with a listener of its own
/// on the same port (`SO_REUSEPORT`), so the kernel spreads connections
/// over the threads and a connection lives its whole life on the thread
/// that accepted it: parsed, routed and answered there, with nothing
/// shared on the request path but the server's immutable routes and files.
/// An actor route's request still goes to the actor's mailbox, wherever the
/// actor runs.
///
/// Dropping it stops every thread (connections in progress are dropped);
/// [`stop`](Self::stop) also waits for them.
#[derive(Debug)]
pub struct PerCoreServer {
    local: SocketAddr,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl PerCoreServer {
    /// The address every thread listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// How many threads serve.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Stops every thread and waits for them to end.
    pub fn stop(mut self) {
        self.stops.clear();
        for thread in self.threads.drain(..) {
            // A thread that panicked has stopped too.
            let _ = thread.join();
        }
    }
}

impl Drop for PerCoreServer {
    fn drop(&mut self) {
        // Dropping the senders wakes every thread's stop.
        self.stops.clear();
    }
}

impl WebServer {
    /// Serves on `addr` in per-core mode with `threads` threads (`0`: one
    /// per core the process may use), each a single-threaded runtime with
    /// its own `SO_REUSEPORT` listener; see [`PerCoreServer`]. Needs
    /// no runtime of its own: callable from `main`.
    ///
    /// # Errors
    ///
    /// [`ServeError`] naming the address and the cause:
    /// [`ServeError::AddrInUse`] if another socket (another server, with
    /// `SO_REUSEPORT` or not) already holds the port, a runtime that cannot
    /// start.
    pub fn listen_per_core(self, addr: &str, threads: usize) -> Result<PerCoreServer, ServeError> {
        let socket = parse_addr(addr)?;
        let spec = self.stack_spec().map_err(|source| ServeError::Spec {
            addr: socket,
            source,
        })?;
        let server = Arc::new(self);
        start(socket, threads, "http", |listener, local| {
            let listener = TcpListener::from_std(&spec, listener, LinkConfig::default()).map_err(
                |source| ServeError::Bind {
                    addr: local,
                    source,
                },
            )?;
            Ok(server.clone().accept_loop(listener))
        })
    }
}

/// Starts `threads` threads (`0`: one per core the process may use), each
/// a single-threaded runtime with its own `SO_REUSEPORT` listener on
/// `socket` (named `scheme://` in errors), the first of them bound only if
/// no other socket holds the port (see the [module docs](self)). `serve` is
/// called with each thread's listener inside that thread's runtime and
/// returns what the thread runs until stopped.
pub(super) fn start<F>(
    mut socket: SocketAddr,
    threads: usize,
    scheme: &str,
    mut serve: impl FnMut(std::net::TcpListener, SocketAddr) -> Result<F, ServeError>,
) -> Result<PerCoreServer, ServeError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let mut running = PerCoreServer {
        local: socket,
        stops: Vec::with_capacity(threads),
        threads: Vec::with_capacity(threads),
    };
    for index in 0..threads {
        let bind_err = |source| ServeError::Bind {
            addr: socket,
            source: BindError::Io {
                addr: format!("{scheme}://{socket}"),
                source,
            },
        };
        let std_listener = if index == 0 {
            first_listener(socket).map_err(|source| match source.kind() {
                std::io::ErrorKind::AddrInUse => ServeError::AddrInUse { addr: socket },
                _ => bind_err(source),
            })?
        } else {
            reuse_port_listener(socket).map_err(bind_err)?
        };
        // Port 0: the first listener picked the port; the others join it.
        socket = std_listener.local_addr().map_err(bind_err)?;
        running.local = socket;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| ServeError::Runtime { source })?;
        let serving = {
            let _entered = runtime.enter();
            serve(std_listener, socket)?
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("plexus-{scheme}-{index}"))
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        () = serving => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|source| ServeError::Runtime { source })?;
        running.stops.push(stop);
        running.threads.push(thread);
    }
    Ok(running)
}

/// The first listener on `addr`: bound without `SO_REUSEPORT`, so that the
/// bind fails with `AddrInUse` if any socket holds the port; then
/// `SO_REUSEPORT` is set, before it listens, for the others to join it.
fn first_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.set_reuse_port(true)?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// A listening socket on `addr` that other sockets with `SO_REUSEPORT` may
/// share.
fn reuse_port_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
