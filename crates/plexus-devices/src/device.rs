//! The device side on a Plexus node that is not a cluster member: the
//! tokio driver of many [`DeviceSession`]s in one process.
//!
//! ```text
//!   server packets ──► actor `plexus.device` ──► driver task ──► session of the packet's device
//!   deadlines      ──► sleep ─────────────────┘      │  ReportRequested ─► the device's reporter
//!                                                    └─► refs forged to `<server>/plexus.devices`
//! ```
//!
//! ```no_run
//! # use plexus_core::ActorSystem;
//! # use plexus_remote::{Node, NodeConfig};
//! # use plexus_devices::{device::DeviceHost, DeviceId, DeviceEvent, SessionConfig};
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let system = ActorSystem::new();
//! let node = Node::start(&system, NodeConfig::default().cookie("s3cret"))?;
//! node.listen("tcp://127.0.0.1:0").await?; // servers reach the device here
//! let host = DeviceHost::start(&node, &system, SessionConfig::default(),
//!                              vec!["tcp://127.0.0.1:4000".into()])?;
//! let mut events = host.subscribe();
//! host.add(DeviceId(7), |_seq, values: &mut Vec<i64>| values.extend(1..=1000))?;
//! while let Some((device, event)) = events.recv().await {
//!     if let DeviceEvent::Attached { server } = event {
//!         println!("{device} reports to {server}");
//!     }
//! }
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use plexus_core::{ActorRef, SystemRef};
use plexus_remote::{ForgedRefs, Node};
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;

use crate::config::SessionConfig;
use crate::server::{device_uri, DevicePacket};
use crate::session::{DeviceEvent, DeviceSession, SessionError};
use crate::wire::{DeviceId, Packet, SessionId};
use crate::{To, DEVICE_ACTOR, SERVER_ACTOR};

/// Fills a report's values for request `seq` (the buffer comes empty and
/// is reused, so a steady reporter allocates nothing).
pub trait Reporter: Send + 'static {
    /// Appends the values of report `seq`.
    fn report(&mut self, seq: u64, values: &mut Vec<i64>);
}

impl<F: FnMut(u64, &mut Vec<i64>) + Send + 'static> Reporter for F {
    fn report(&mut self, seq: u64, values: &mut Vec<i64>) {
        self(seq, values)
    }
}

/// Why the host could not start, or a device could not be added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Servers could not reach the devices.
    #[error("device host: the node listens on no URI; call Node::listen first")]
    NotListening,
    /// The actor could not be published.
    #[error("device host: publishing `{DEVICE_ACTOR}`: {0}")]
    Publish(#[from] plexus_remote::PublishError),
    /// The session could not be made.
    #[error("{0}")]
    Session(#[from] SessionError),
    /// The host's driver stopped.
    #[error("device host: stopped")]
    Stopped,
}

enum Command {
    Add(Box<DeviceSession>, Box<dyn Reporter>),
    Subscribe(mpsc::UnboundedSender<(DeviceId, DeviceEvent)>),
}

/// Devices of this process and their sessions. Dropping it stops them
/// (like a crash, as far as the servers can tell).
#[derive(Debug)]
pub struct DeviceHost {
    commands: mpsc::UnboundedSender<Command>,
    config: SessionConfig,
    reply_to: Arc<str>,
    seeds: Vec<Arc<str>>,
    reports: Arc<AtomicU64>,
    task: tokio::task::AbortHandle,
}

impl Drop for DeviceHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A session id for a driver starting now: the wall clock in ms, shifted,
/// with 16 bits that differ between sessions started in one millisecond.
pub fn new_session() -> SessionId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = (u64::from(now.subsec_nanos()) ^ u64::from(std::process::id()) ^ (n << 7)) as u16;
    SessionId::from_parts(now.as_millis() as u64, random)
}

impl DeviceHost {
    /// Starts the host on `node` (which must listen: servers reach devices
    /// at its first listen URI), publishing [`DEVICE_ACTOR`] in `system`;
    /// devices register through `seeds` (server node URIs).
    ///
    /// # Errors
    ///
    /// [`HostError`] says why.
    pub fn start(
        node: &Node,
        system: &SystemRef,
        config: SessionConfig,
        seeds: Vec<String>,
    ) -> Result<DeviceHost, HostError> {
        let uri = node
            .listen_uris()
            .into_iter()
            .next()
            .ok_or(HostError::NotListening)?;
        let reply_to: Arc<str> = device_uri(&uri).into();
        let (packets_tx, packets) = mpsc::unbounded_channel::<Bytes>();
        let inbox = system.spawn_fn(move |DevicePacket(bytes), _ctx| {
            let _ = packets_tx.send(bytes);
        });
        node.publish(&inbox, DEVICE_ACTOR)?;
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let reports = Arc::new(AtomicU64::new(0));
        let driver = HostDriver {
            node: node.clone(),
            sessions: FxHashMap::default(),
            refs: ForgedRefs::default(),
            subscribers: Vec::new(),
            values: Vec::new(),
            next: None,
            reports: Arc::clone(&reports),
            _inbox: inbox,
        };
        let task = tokio::spawn(driver.run(packets, commands_rx)).abort_handle();
        Ok(DeviceHost {
            commands,
            config,
            reply_to,
            seeds: seeds.into_iter().map(Arc::from).collect(),
            reports,
            task,
        })
    }

    /// Where servers reach this host's devices.
    pub fn reply_to(&self) -> &Arc<str> {
        &self.reply_to
    }

    /// Starts `device` in a new session; `reporter` answers its report
    /// requests. Returns the session.
    ///
    /// # Errors
    ///
    /// [`HostError::Session`] (no seeds, an address too long) or
    /// [`HostError::Stopped`].
    pub fn add(&self, device: DeviceId, reporter: impl Reporter) -> Result<SessionId, HostError> {
        self.add_session(device, new_session(), reporter)
    }

    /// Like [`DeviceHost::add`], in session `session` (tests of duplicate
    /// drivers choose theirs).
    ///
    /// # Errors
    ///
    /// As [`DeviceHost::add`].
    pub fn add_session(
        &self,
        device: DeviceId,
        session: SessionId,
        reporter: impl Reporter,
    ) -> Result<SessionId, HostError> {
        let s = DeviceSession::new(
            self.config.clone(),
            device,
            session,
            Arc::clone(&self.reply_to),
            self.seeds.clone(),
            tokio::time::Instant::now().into_std(),
        )?;
        self.commands
            .send(Command::Add(Box::new(s), Box::new(reporter)))
            .map_err(|_| HostError::Stopped)?;
        Ok(session)
    }

    /// Every device event from now on, with the device it is about;
    /// of the `ReportRequested` events (the reporters answer them) only the
    /// first after each `Attached`, so a subscriber sees when a device that
    /// moved reports again.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<(DeviceId, DeviceEvent)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = self.commands.send(Command::Subscribe(tx));
        rx
    }

    /// Reports sent by this host's devices so far.
    pub fn reports_sent(&self) -> u64 {
        self.reports.load(Ordering::Relaxed)
    }
}

struct Device {
    session: DeviceSession,
    reporter: Box<dyn Reporter>,
    /// Attached since the last report request (the next one is handed on).
    fresh: bool,
}

struct HostDriver {
    node: Node,
    sessions: FxHashMap<DeviceId, Device>,
    refs: ForgedRefs<DevicePacket>,
    subscribers: Vec<mpsc::UnboundedSender<(DeviceId, DeviceEvent)>>,
    /// The reporters' buffer, reused.
    values: Vec<i64>,
    /// The earliest deadline of any session (a session's deadline only
    /// moves later while it handles packets, except through its own
    /// timeout handling, after which it is read again).
    next: Option<Instant>,
    reports: Arc<AtomicU64>,
    _inbox: ActorRef<DevicePacket>,
}

/// Packets handled before the driver flushes.
const BATCH: usize = 256;

impl HostDriver {
    async fn run(
        mut self,
        mut packets: mpsc::UnboundedReceiver<Bytes>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        loop {
            let deadline = self.next.map(tokio::time::Instant::from_std);
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                packet = packets.recv() => {
                    let Some(bytes) = packet else { return };
                    let now = tokio::time::Instant::now().into_std();
                    self.handle(now, &bytes);
                    for _ in 1..BATCH {
                        match packets.try_recv() {
                            Ok(bytes) => self.handle(now, &bytes),
                            Err(_) => break,
                        }
                    }
                    if self.next.is_some_and(|d| d <= now) {
                        self.timeouts(now);
                    }
                }
                command = commands.recv() => match command {
                    Some(Command::Add(session, reporter)) => {
                        let device = session.device();
                        let now = tokio::time::Instant::now().into_std();
                        self.sessions.insert(device, Device { session: *session, reporter, fresh: false });
                        if let Some(d) = self.sessions.get_mut(&device) {
                            d.session.handle_timeout(now);
                        }
                        self.after(device);
                    }
                    Some(Command::Subscribe(s)) => self.subscribers.push(s),
                    None => return,
                },
                () = sleep => {
                    self.timeouts(tokio::time::Instant::now().into_std());
                }
            }
        }
    }

    fn handle(&mut self, now: Instant, bytes: &Bytes) {
        let packet = match Packet::parse(bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(target: "plexus::devices", error = %e, "refused a server packet");
                return;
            }
        };
        let device = match &packet {
            Packet::Welcome { device, .. }
            | Packet::ServerHeartbeat { device, .. }
            | Packet::Request { device, .. }
            | Packet::Stop { device, .. }
            | Packet::Refused { device, .. } => *device,
            _ => return,
        };
        let Some(d) = self.sessions.get_mut(&device) else {
            return;
        };
        if let Err(e) = d.session.handle_packet(now, &packet) {
            tracing::debug!(target: "plexus::devices", error = %e, "refused a server packet");
        }
        self.after(device);
    }

    fn timeouts(&mut self, now: Instant) {
        let due: Vec<DeviceId> = self
            .sessions
            .iter()
            .filter(|(_, d)| d.session.poll_timeout().is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(d) = self.sessions.get_mut(&id) {
                d.session.handle_timeout(now);
            }
            self.after(id);
        }
        self.next = self
            .sessions
            .values()
            .filter_map(|d| d.session.poll_timeout())
            .min();
    }

    /// Answers report requests, hands on events, sends what the session
    /// queued.
    fn after(&mut self, device: DeviceId) {
        let Some(d) = self.sessions.get_mut(&device) else {
            return;
        };
        while let Some(event) = d.session.poll_event() {
            match event {
                DeviceEvent::ReportRequested { seq } => {
                    if std::mem::take(&mut d.fresh) {
                        self.subscribers
                            .retain(|s| s.send((device, event.clone())).is_ok());
                    }
                    self.values.clear();
                    d.reporter.report(seq, &mut self.values);
                    if d.session.send_report(seq, &self.values).is_ok() {
                        self.reports.fetch_add(1, Ordering::Relaxed);
                    }
                }
                other => {
                    d.fresh |= matches!(other, DeviceEvent::Attached { .. });
                    tracing::debug!(target: "plexus::devices", %device, event = ?other, "device event");
                    self.subscribers
                        .retain(|s| s.send((device, other.clone())).is_ok());
                }
            }
        }
        while let Some(t) = d.session.poll_transmit() {
            let (To::Server(server) | To::Device(server)) = &t.to;
            let to = match self
                .refs
                .get(&self.node, server, || format!("{server}/{SERVER_ACTOR}"))
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(target: "plexus::devices", %server, error = %e, "cannot reach a server");
                    continue;
                }
            };
            to.tell(DevicePacket(t.packet));
        }
        if let Some(t) = d.session.poll_timeout() {
            if self.next.is_none_or(|n| t < n) {
                self.next = Some(t);
            }
        }
        if d.session.is_stopped() {
            self.sessions.remove(&device);
        }
    }
}
