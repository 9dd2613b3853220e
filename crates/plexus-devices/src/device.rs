//! The device side on a Plexus node that is not a cluster member: many
//! [`DeviceSession`]s in one process, run as one sans-IO protocol
//! (`sessions.rs`) by the node's driver (`plexus_remote::driver`, with the
//! host in `host.rs`).
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
use std::time::{SystemTime, UNIX_EPOCH};

use plexus_core::SystemRef;
use plexus_remote::driver::{self, Input, Inputs};
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::mpsc;

use crate::config::SessionConfig;
use crate::server::{device_uri, DevicePacket};
use crate::session::{DeviceEvent, DeviceSession, SessionError};
use crate::wire::{DeviceId, SessionId};
use crate::DEVICE_ACTOR;

mod host;
mod sessions;

use host::{Command, SessionsHost};
use sessions::Sessions;

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

/// Devices of this process and their sessions. Dropping it stops them
/// (like a crash, as far as the servers can tell).
#[derive(Debug)]
pub struct DeviceHost {
    commands: Inputs<Arc<str>, Command>,
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
        let (commands, inputs) = mpsc::unbounded_channel();
        let packets = commands.clone();
        let inbox = system.spawn_fn(move |DevicePacket(bytes), _ctx| {
            let _ = packets.send(Input::Command(Command::Packet(bytes)));
        });
        node.publish(&inbox, DEVICE_ACTOR)?;
        let reports = Arc::new(AtomicU64::new(0));
        let host = SessionsHost {
            node: node.clone(),
            refs: ForgedRefs::default(),
            subscribers: Vec::new(),
            reports: Arc::clone(&reports),
            _inbox: inbox,
        };
        let task = tokio::spawn(driver::run(Sessions::default(), host, inputs)).abort_handle();
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
            .send(Input::Command(Command::Add(
                Box::new(s),
                Box::new(reporter),
            )))
            .map_err(|_| HostError::Stopped)?;
        Ok(session)
    }

    /// Every device event from now on, with the device it is about;
    /// of the `ReportRequested` events (the reporters answer them) only the
    /// first after each `Attached`, so a subscriber sees when a device that
    /// moved reports again.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<(DeviceId, DeviceEvent)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = self.commands.send(Input::Command(Command::Subscribe(tx)));
        rx
    }

    /// Reports sent by this host's devices so far.
    pub fn reports_sent(&self) -> u64 {
        self.reports.load(Ordering::Relaxed)
    }
}
