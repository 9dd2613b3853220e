//! The replicator on a Plexus node: the tokio driver of a [`Replicator`]
//! beside the node's cluster member.
//!
//! ```text
//!   Replication (handle): update / get (async, typed), subscribe, stats
//!   ─────────────────────────────────────────────────────────────────────
//!   driver task: packets, commands, cluster updates and deadlines into the
//!   Replicator; its packets out through refs forged to
//!   `<member address>/plexus.data`; store batches to a writer thread
//!   (redb, one fsynced transaction per batch, the next batch collecting
//!   meanwhile) and their completions back
//!   ─────────────────────────────────────────────────────────────────────
//!   Node: the actor `plexus.data` receives packets over the node's links;
//!   Cluster: its updates give the member list
//! ```
//!
//! The member list is the cluster's members that are not down (joining,
//! up, suspect, leaving). When this member is downed and joins again, the
//! replicator starts a new life ([`Replicator::renew`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_cluster::{Cluster, ClusterUpdate, MemberState};

use plexus_core::{ActorRef, SystemRef};
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument as _;

use crate::crdt::{Crdt, ReplicaId};
use crate::replicator::{
    Consistency, Event, GetError, Key, Replicator, ReplicatorConfig, ReplicatorStats, RequestId,
    StoreBatch, UpdateError,
};
use crate::store::{DurableStore, LoadError, WriteError};

/// The name the replicator's actor is published under on every member.
pub const ACTOR_NAME: &str = "plexus.data";

plexus_core::bytes_message! {
    /// A replicator packet as a remote message (its bytes travel as they are).
    pub struct DataPacket = "plexus.data.Packet";
}

/// What a subscriber of a key receives: its state after a change (changes
/// close together may arrive as one). Also at `plexus::data::Changed`.
///
/// ```
/// use plexus_data::{Changed, GCounter};
///
/// fn on_change(changed: Changed<GCounter>) -> String {
///     format!("{} = {}", changed.key, changed.value.value())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Changed<T> {
    /// The key.
    pub key: Arc<str>,
    /// Its state here now.
    pub value: T,
}

/// Why the replicator could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The durable store could not be read.
    #[error("start replicator: {0}")]
    Store(#[from] LoadError),
    /// The replicator's actor could not be published.
    #[error("start replicator: publishing `{ACTOR_NAME}`: {0}")]
    Publish(#[from] plexus_remote::PublishError),
    /// [`ReplicatorConfig::cluster`] names another cluster than the
    /// member's ([`plexus_cluster::ClusterConfig::name`]); nothing started.
    #[error(
        "start replicator: its cluster name `{replicator}` is not the cluster's `{cluster}`; \
         leave `ReplicatorConfig::cluster` at its default to take the cluster's"
    )]
    OtherCluster {
        /// The name in the replicator's settings.
        replicator: String,
        /// The cluster's name.
        cluster: String,
    },
}

type Job = Box<dyn FnOnce(&mut Driver, Instant) + Send>;

/// A running replicator on a node. Clones share it; it stops when the last
/// clone is dropped (or at [`Replication::stop`]).
#[derive(Debug, Clone)]
pub struct Replication {
    jobs: mpsc::UnboundedSender<Job>,
    _task: Arc<TaskGuard>,
}

/// Aborts the driver task when the last handle goes.
#[derive(Debug)]
struct TaskGuard(tokio::task::AbortHandle);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Replication {
    /// Starts the replicator of `cluster`'s member on `node`, publishing
    /// the actor [`ACTOR_NAME`] in `system`. With a `store`, its records are
    /// recovered first (those of types registered later wait for
    /// [`Replication::register`]) and durable keys are written to it.
    ///
    /// The replicator belongs to the cluster's name
    /// ([`Cluster::name`]): a `config` whose [`ReplicatorConfig::cluster`]
    /// is left at its default (`"plexus"`) takes it.
    ///
    /// # Errors
    ///
    /// [`StartError`] says why; [`StartError::OtherCluster`] if `config`
    /// names another cluster than `cluster`'s.
    pub fn start(
        node: &Node,
        system: &SystemRef,
        cluster: &Cluster,
        config: ReplicatorConfig,
        store: Option<DurableStore>,
    ) -> Result<Self, StartError> {
        let mut config = config;
        if config.cluster != cluster.name() {
            if config.cluster != ReplicatorConfig::default().cluster {
                return Err(StartError::OtherCluster {
                    replicator: config.cluster,
                    cluster: cluster.name().to_string(),
                });
            }
            config.cluster = cluster.name().to_string();
        }
        let local = cluster.local();
        let now = tokio::time::Instant::now().into_std();
        let mut replicator =
            Replicator::new(config, Arc::clone(&local.address), local.incarnation, now);
        let writer = match store {
            Some(store) => {
                for error in replicator.recover(store.load()?) {
                    tracing::warn!(target: "plexus::data", %error, "durable record not recovered");
                }
                Some(Writer::spawn(store))
            }
            None => None,
        };
        let (packets_tx, packets) = mpsc::unbounded_channel::<Bytes>();
        let inbox = system.spawn_fn(move |DataPacket(bytes), _ctx| {
            let _ = packets_tx.send(bytes);
        });
        node.publish(&inbox, ACTOR_NAME)?;
        let (updates_tx, updates) = mpsc::unbounded_channel::<ClusterUpdate>();
        let watcher = system.spawn_fn(move |update: ClusterUpdate, _ctx| {
            let _ = updates_tx.send(update);
        });
        cluster.subscribe(watcher.clone());
        let (jobs, jobs_rx) = mpsc::unbounded_channel();
        let driver = Driver {
            replicator,
            node: node.clone(),
            refs: ForgedRefs::default(),
            updates_waiting: HashMap::new(),
            gets_waiting: HashMap::new(),
            subscribers: HashMap::new(),
            writer,
            writing: false,
            downed: false,
            stopping: None,
            inbox,
            watcher,
        };
        // Rounds, refusals and store failures are logged in this span.
        let span = tracing::info_span!(target: "plexus::data", "replicator", node = %node.id());
        let task =
            tokio::spawn(driver.run(packets, updates, jobs_rx).instrument(span)).abort_handle();
        Ok(Self {
            jobs,
            _task: Arc::new(TaskGuard(task)),
        })
    }

    fn job(&self, job: Job) {
        let _ = self.jobs.send(job);
    }

    /// Registers `T` (see [`Replicator::register`]): do it at start for
    /// every type this member replicates, so it merges and acknowledges
    /// them before it uses a key of them itself.
    pub fn register<T: Crdt>(&self) {
        self.job(Box::new(|d, _| d.replicator.register::<T>()));
    }

    /// Updates `key`: `modify` gets the state and this member's replica id
    /// and returns the delta (a mutator's return value). Returns when the
    /// level is reached (and, for a durable key, the store holds it).
    ///
    /// # Errors
    ///
    /// [`UpdateError`] says why.
    pub async fn update<T, F>(
        &self,
        key: &Key<T>,
        level: Consistency,
        timeout: Duration,
        modify: F,
    ) -> Result<(), UpdateError>
    where
        T: Crdt,
        F: FnOnce(&mut T, ReplicaId) -> T + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let k = key.clone();
        self.job(Box::new(move |d, now| {
            let me = d.replicator.replica();
            match d
                .replicator
                .update(now, &k, level, timeout, |s| modify(s, me))
            {
                Ok(request) => {
                    d.updates_waiting.insert(request, tx);
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        }));
        rx.await.unwrap_or_else(|_| {
            Err(UpdateError::Stopped {
                key: key.name().to_string(),
            })
        })
    }

    /// Reads `key` at `level`: `None` if no member asked knows it.
    ///
    /// # Errors
    ///
    /// [`GetError`] says why.
    pub async fn get<T: Crdt>(
        &self,
        key: &Key<T>,
        level: Consistency,
        timeout: Duration,
    ) -> Result<Option<T>, GetError> {
        let (tx, rx) = oneshot::channel::<Result<Option<T>, GetError>>();
        let k = key.clone();
        self.job(Box::new(move |d, now| {
            match d.replicator.get(now, &k, level, timeout) {
                Ok(request) => {
                    d.gets_waiting.insert(
                        request,
                        Box::new(move |r: &Replicator, result: Result<(), GetError>| {
                            let value = result.and_then(|()| r.value(&k).map(|v| v.cloned()));
                            let _ = tx.send(value);
                        }),
                    );
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        }));
        rx.await.unwrap_or_else(|_| {
            Err(GetError::Stopped {
                key: key.name().to_string(),
            })
        })
    }

    /// Sends `subscriber` the state of `key` now (if it exists) and after
    /// every change, until the subscriber stops.
    pub fn subscribe<T: Crdt>(&self, key: &Key<T>, subscriber: ActorRef<Changed<T>>) {
        let k = key.clone();
        self.job(Box::new(move |d, _| {
            d.replicator.register::<T>();
            let name = Arc::clone(k.name());
            let notify: Notify = Box::new(move |r: &Replicator| {
                if !subscriber.is_alive() {
                    return false;
                }
                if let Ok(Some(value)) = r.value(&k) {
                    subscriber.tell(Changed {
                        key: Arc::clone(k.name()),
                        value: value.clone(),
                    });
                }
                true
            });
            notify(&d.replicator);
            d.subscribers.entry(name).or_default().push(notify);
        }));
    }

    /// The replicator's counters.
    pub async fn stats(&self) -> ReplicatorStats {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |d, _| {
            let _ = tx.send(d.replicator.stats());
        }));
        rx.await.unwrap_or_default()
    }

    /// Stops the replicator (for every clone): no more packets or updates;
    /// a batch being written is finished and the store closed (so the file
    /// can be opened again) when this returns.
    pub async fn stop(self) {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |d, _| d.stopping = Some(tx)));
        let _ = rx.await;
    }

    /// This member's replica id.
    pub async fn replica(&self) -> Option<ReplicaId> {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |d, _| {
            let _ = tx.send(d.replicator.replica());
        }));
        rx.await.ok()
    }
}

type Notify = Box<dyn Fn(&Replicator) -> bool + Send>;
type GetDone = Box<dyn FnOnce(&Replicator, Result<(), GetError>) + Send>;

/// The store's writer thread: batches in, written batch ids out.
struct Writer {
    batches: std::sync::mpsc::Sender<StoreBatch>,
    done: mpsc::UnboundedReceiver<Result<u64, WriteError>>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    fn spawn(store: DurableStore) -> Self {
        let (batches, rx) = std::sync::mpsc::channel::<StoreBatch>();
        let (done_tx, done) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("plexus-data-store".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    let result = store.write(&batch).map(|()| batch.id);
                    if done_tx.send(result).is_err() {
                        return;
                    }
                }
            })
            .expect("spawning the store's writer thread");
        Self {
            batches,
            done,
            thread,
        }
    }

    /// Waits for the batch being written and closes the store.
    async fn close(self) {
        drop(self.batches);
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

struct Driver {
    replicator: Replicator,
    node: Node,
    refs: ForgedRefs<DataPacket>,
    updates_waiting: HashMap<RequestId, oneshot::Sender<Result<(), UpdateError>>>,
    gets_waiting: HashMap<RequestId, GetDone>,
    subscribers: HashMap<Arc<str>, Vec<Notify>>,
    writer: Option<Writer>,
    /// A batch is being written.
    writing: bool,
    /// This member was downed; it starts a new life when it is back.
    downed: bool,
    /// `stop` was called: told when the store is closed.
    stopping: Option<oneshot::Sender<()>>,
    /// Kept alive as long as the driver runs.
    inbox: ActorRef<DataPacket>,
    watcher: ActorRef<ClusterUpdate>,
}

impl Driver {
    async fn run(
        mut self,
        mut packets: mpsc::UnboundedReceiver<Bytes>,
        mut updates: mpsc::UnboundedReceiver<ClusterUpdate>,
        mut jobs: mpsc::UnboundedReceiver<Job>,
    ) {
        loop {
            self.flush();
            if self.stopping.is_some() {
                break;
            }
            let deadline = self
                .replicator
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let stored = async {
                match self.writer.as_mut() {
                    Some(w) => w.done.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                packet = packets.recv() => {
                    let Some(bytes) = packet else { break };
                    let now = tokio::time::Instant::now().into_std();
                    if let Err(e) = self.replicator.handle_packet(now, &bytes) {
                        tracing::warn!(target: "plexus::data", error = %e, "refused a replicator packet");
                    }
                }
                update = updates.recv() => {
                    let Some(update) = update else { break };
                    self.on_cluster(update);
                }
                job = jobs.recv() => {
                    // The Replication handle was dropped.
                    let Some(job) = job else { break };
                    let now = tokio::time::Instant::now().into_std();
                    job(&mut self, now);
                }
                result = stored => {
                    self.writing = false;
                    let now = tokio::time::Instant::now().into_std();
                    match result {
                        Some(Ok(id)) => self.replicator.handle_stored(now, id),
                        Some(Err(e)) => {
                            // Nothing of the batch is acknowledged; its keys
                            // stay unacknowledged until a later write of them.
                            tracing::error!(target: "plexus::data", error = %e, "durable store write failed");
                        }
                        None => self.writer = None,
                    }
                }
                () = sleep => {
                    self.replicator.handle_timeout(tokio::time::Instant::now().into_std());
                }
            }
        }
        self.node.unpublish(ACTOR_NAME);
        self.inbox.stop();
        self.watcher.stop();
        if let Some(writer) = self.writer.take() {
            writer.close().await;
        }
        if let Some(done) = self.stopping.take() {
            let _ = done.send(());
        }
    }

    fn on_cluster(&mut self, update: ClusterUpdate) {
        let now = tokio::time::Instant::now().into_std();
        match update.local.state {
            MemberState::Down | MemberState::Removed => self.downed = true,
            MemberState::Joining | MemberState::Up if self.downed => {
                self.downed = false;
                self.replicator.renew(update.local.incarnation);
            }
            _ => {}
        }
        let members: Vec<Arc<str>> = update
            .members
            .iter()
            .filter(|m| {
                matches!(
                    m.state,
                    MemberState::Joining
                        | MemberState::Up
                        | MemberState::Suspect
                        | MemberState::Leaving
                )
            })
            .map(|m| Arc::clone(&m.address))
            .collect();
        self.replicator.set_members(now, &members);
    }

    fn flush(&mut self) {
        while let Some(t) = self.replicator.poll_transmit() {
            let to = match self
                .refs
                .get(&self.node, &t.to, || format!("{}/{ACTOR_NAME}", t.to))
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(target: "plexus::data", to = %t.to, error = %e, "cannot reach a member");
                    continue;
                }
            };
            to.tell(DataPacket(t.packet));
        }
        if !self.writing {
            if let Some(writer) = &self.writer {
                if let Some(batch) = self.replicator.poll_store() {
                    self.writing = writer.batches.send(batch).is_ok();
                }
            }
        }
        while let Some(event) = self.replicator.poll_event() {
            match event {
                Event::Changed { key } => {
                    if let Some(subs) = self.subscribers.get_mut(&key) {
                        let r = &self.replicator;
                        subs.retain(|notify| notify(r));
                    }
                }
                Event::UpdateDone {
                    request, result, ..
                } => {
                    if let Some(tx) = self.updates_waiting.remove(&request) {
                        let _ = tx.send(result);
                    }
                }
                Event::GetDone {
                    request, result, ..
                } => {
                    if let Some(done) = self.gets_waiting.remove(&request) {
                        done(&self.replicator, result);
                    }
                }
            }
        }
    }
}
