//! A simulated network for nodes in one process: the `sim` transport,
//! byte streams ([`tokio::io::duplex`]) between named listeners that a test
//! can cut (every connection fails at once, as a reset would) and count.
//! With a paused tokio clock (`#[tokio::test(start_paused = true)]`) a
//! pair of nodes runs on virtual time: timeouts elapse exactly, and nothing
//! depends on how fast the machine is. [`SimNet::with_latency`] gives every
//! connection a path delay (bytes arrive a fixed time after they were
//! written, and a connect takes a round trip), on the same virtual time.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use plexus_net::{StackSpec, TransportProfile};
use plexus_remote::NodeConfig;
use plexus_transport::{
    AcceptError, BindError, BoxFuture, ConnectError, Dialer, Link, LinkConfig, Listener, Transport,
    TransportRegistry,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::sync::{mpsc, Notify};

/// Where a connection stands: cut, or how to wake who waits on it.
#[derive(Default)]
struct Wire {
    cut: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl Wire {
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for w in self.wakers.lock().unwrap().drain(..) {
            w.wake();
        }
    }

    fn is_cut(&self, cx: &mut Context<'_>) -> bool {
        if self.cut.load(Ordering::SeqCst) {
            return true;
        }
        let mut wakers = self.wakers.lock().unwrap();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        // A cut between the check and the registration woke nobody.
        self.cut.load(Ordering::SeqCst)
    }
}

/// One end of a connection: fails with a reset once the wire is cut.
struct End {
    io: DuplexStream,
    wire: Arc<Wire>,
    /// Told when this end is dropped (the connection count).
    net: SimNet,
}

impl Drop for End {
    fn drop(&mut self) {
        self.net.state.lock().unwrap().ends -= 1;
        self.net.changed.notify_waiters();
    }
}

fn reset() -> io::Error {
    io::ErrorKind::ConnectionReset.into()
}

impl AsyncRead for End {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.wire.is_cut(cx) {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for End {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.wire.is_cut(cx) {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[derive(Default)]
struct NetState {
    listeners: HashMap<String, mpsc::Sender<End>>,
    wires: Vec<Arc<Wire>>,
    /// Connection ends alive (two per open connection).
    ends: usize,
}

/// The network: listeners by name, and every connection made.
#[derive(Clone, Default)]
pub struct SimNet {
    state: Arc<Mutex<NetState>>,
    changed: Arc<Notify>,
    /// How long bytes take from one end of a connection to the other.
    one_way: Duration,
}

impl SimNet {
    /// A network whose connections deliver bytes `one_way` after they were
    /// written, in order, each way (a round trip of twice that), and whose
    /// connects take a round trip (the listener sees the connection after
    /// `one_way`, the dialler after `2 × one_way`), as TCP's would.
    pub fn with_latency(one_way: Duration) -> Self {
        Self {
            one_way,
            ..Self::default()
        }
    }

    /// A node configuration whose transports include this network as
    /// `sim` (URIs `sim://name`).
    pub fn config(&self, cookie: &str) -> NodeConfig {
        let mut transports = TransportRegistry::default();
        transports
            .register(self.clone())
            .expect("no other transport is named sim");
        NodeConfig::default().cookie(cookie).transports(transports)
    }

    /// Cuts every connection made so far: both ends fail as on a reset.
    pub fn cut_all(&self) {
        let wires = std::mem::take(&mut self.state.lock().unwrap().wires);
        for wire in wires {
            wire.cut();
        }
    }

    /// A listener under `name` that accepts connections and never answers
    /// (a peer that hangs in the handshake).
    pub fn mute(&self, name: &str) -> tokio::task::JoinHandle<()> {
        let (tx, mut rx) = mpsc::channel(16);
        self.state
            .lock()
            .unwrap()
            .listeners
            .insert(name.to_owned(), tx);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Some(end) = rx.recv().await {
                held.push(end);
            }
        })
    }

    /// Waits until exactly `n` connections are open (woken by every
    /// connection opened or closed, not polled).
    pub async fn until_open_connections(&self, n: usize) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.state.lock().unwrap().ends == 2 * n {
                return;
            }
            changed.await;
        }
    }

    fn connect_ends(&self) -> (End, End) {
        let (a, b) = if self.one_way.is_zero() {
            tokio::io::duplex(256 << 10)
        } else {
            delayed_duplex(self.one_way)
        };
        let wire = Arc::new(Wire::default());
        let mut st = self.state.lock().unwrap();
        st.wires.push(wire.clone());
        st.ends += 2;
        drop(st);
        self.changed.notify_waiters();
        let end = |io| End {
            io,
            wire: wire.clone(),
            net: self.clone(),
        };
        (end(a), end(b))
    }
}

/// Two connected streams whose bytes arrive `one_way` after they were
/// written: each end is a duplex stream whose far side a task pair relays
/// to the other end's far side, holding each chunk until its time.
fn delayed_duplex(one_way: Duration) -> (DuplexStream, DuplexStream) {
    let (a, a_far) = tokio::io::duplex(256 << 10);
    let (b, b_far) = tokio::io::duplex(256 << 10);
    let (a_read, a_write) = tokio::io::split(a_far);
    let (b_read, b_write) = tokio::io::split(b_far);
    relay(a_read, b_write, one_way);
    relay(b_read, a_write, one_way);
    (a, b)
}

/// Moves what `from` reads to `to`, each chunk `delay` after it was read;
/// ends `to` once `from` has ended and everything read went out.
fn relay(
    mut from: impl AsyncRead + Unpin + Send + 'static,
    mut to: impl AsyncWrite + Unpin + Send + 'static,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
}

struct SimListener {
    name: String,
    incoming: tokio::sync::Mutex<mpsc::Receiver<End>>,
    dialer: Arc<SimDialer>,
}

struct SimDialer {
    net: SimNet,
    spec: StackSpec,
    link: LinkConfig,
}

fn link_over(end: End, spec: &StackSpec, peer: String, link: LinkConfig) -> Link {
    let stack = spec.build(tokio::time::Instant::now().into_std());
    Link::over_stream(end, stack, peer, link)
}

impl Transport for SimNet {
    fn name(&self) -> &str {
        "sim"
    }

    fn profile(&self) -> TransportProfile {
        TransportProfile::byte_stream()
    }

    fn default_stack(&self) -> &str {
        "sim / framing"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(16);
            let mut st = self.state.lock().unwrap();
            if st.listeners.contains_key(addr) {
                return Err(BindError::AddrInUse {
                    addr: format!("sim://{addr}"),
                });
            }
            st.listeners.insert(addr.to_owned(), tx);
            Ok(Box::new(SimListener {
                name: addr.to_owned(),
                incoming: tokio::sync::Mutex::new(rx),
                dialer: Arc::new(SimDialer {
                    net: self.clone(),
                    spec: spec.clone(),
                    link,
                }),
            }) as Box<dyn Listener>)
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        let dialer: Arc<dyn Dialer> = Arc::new(SimDialer {
            net: self.clone(),
            spec: spec.clone(),
            link,
        });
        Box::pin(async move { Ok(dialer) })
    }
}

impl Listener for SimListener {
    fn local_addr(&self) -> String {
        self.name.clone()
    }

    fn accept(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(async move {
            let end = self
                .incoming
                .lock()
                .await
                .recv()
                .await
                .ok_or_else(|| AcceptError::Io {
                    addr: format!("sim://{}", self.name),
                    source: io::ErrorKind::NotConnected.into(),
                })?;
            let peer = format!("sim://{}#accepted", self.name);
            Ok(link_over(end, &self.dialer.spec, peer, self.dialer.link))
        })
    }

    fn dialer(&self) -> Arc<dyn Dialer> {
        self.dialer.clone()
    }
}

impl Dialer for SimDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move {
            let refused = || ConnectError::Io {
                addr: format!("sim://{addr}"),
                source: io::ErrorKind::ConnectionRefused.into(),
            };
            let listener = self.net.state.lock().unwrap().listeners.get(addr).cloned();
            let listener = listener.ok_or_else(refused)?;
            let (ours, theirs) = self.net.connect_ends();
            // On a path with latency: the listener sees the connection half
            // a round trip after the connect, the dialler a round trip.
            let one_way = self.net.one_way;
            let start = tokio::time::Instant::now();
            if !one_way.is_zero() {
                tokio::time::sleep_until(start + one_way).await;
            }
            listener.send(theirs).await.map_err(|_| refused())?;
            if !one_way.is_zero() {
                tokio::time::sleep_until(start + 2 * one_way).await;
            }
            Ok(link_over(
                ours,
                &self.spec,
                format!("sim://{addr}"),
                self.link,
            ))
        })
    }
}
