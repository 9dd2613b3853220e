//! The replicator on a Plexus node: a [`Replicator`] beside the node's
//! cluster member, run by the node's protocol driver
//! (`plexus_remote::driver`).
//!
//! ```text
//!   Replication (handle): update / get (async, typed), subscribe, stats
//!   ─────────────────────────────────────────────────────────────────────
//!   driver task (plexus_remote::driver, with the host in `host.rs`):
//!   packets, jobs, cluster updates and deadlines into the Replicator; its
//!   packets out through refs forged to `<member address>/plexus.data`;
//!   store batches to a writer thread (`writer.rs`: redb, one fsynced
//!   transaction per batch, the next batch collecting meanwhile) and their
//!   completions back
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
use std::time::Duration;

use plexus_cluster::{Cluster, ClusterUpdate};
use plexus_core::{ActorRef, SystemRef};
use plexus_remote::driver::{self, Input, Inputs};
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::crdt::{Crdt, ReplicaId};
use crate::replicator::{
    Consistency, GetError, Key, Replicator, ReplicatorConfig, ReplicatorStats, UpdateError,
};
use crate::store::{DurableStore, LoadError};

mod host;
mod protocol;
mod writer;

use host::{Command, DataHost, Job, Notify};
use protocol::ReplicatorProtocol;
use writer::Writer;

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

/// A running replicator on a node. Clones share it; it stops when the last
/// clone is dropped (or at [`Replication::stop`]).
#[derive(Debug, Clone)]
pub struct Replication {
    jobs: Inputs<Arc<str>, Command>,
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
        let (jobs, inputs) = tokio::sync::mpsc::unbounded_channel();
        let writer = match store {
            Some(store) => {
                for error in replicator.recover(store.load()?) {
                    tracing::warn!(target: "plexus::data", %error, "durable record not recovered");
                }
                Some(Writer::spawn(store, jobs.clone()))
            }
            None => None,
        };
        let packets = jobs.clone();
        let inbox = system.spawn_fn(move |DataPacket(bytes), _ctx| {
            let _ = packets.send(Input::Command(Command::Packet(bytes)));
        });
        node.publish(&inbox, ACTOR_NAME)?;
        let updates = jobs.clone();
        let watcher = system.spawn_fn(move |update: ClusterUpdate, _ctx| {
            let _ = updates.send(Input::Command(Command::Cluster(update)));
        });
        cluster.subscribe(watcher.clone());
        let host = DataHost {
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
        let task = tokio::spawn(
            async move {
                let (_, host) = driver::run(ReplicatorProtocol(replicator), host, inputs).await;
                host.close().await;
            }
            .instrument(span),
        )
        .abort_handle();
        Ok(Self {
            jobs,
            _task: Arc::new(TaskGuard(task)),
        })
    }

    fn job(&self, job: Job) {
        let _ = self.jobs.send(Input::Command(Command::Job(job)));
    }

    /// Registers `T` (see [`Replicator::register`]): do it at start for
    /// every type this member replicates, so it merges and acknowledges
    /// them before it uses a key of them itself.
    pub fn register<T: Crdt>(&self) {
        self.job(Box::new(|_, r, _| r.register::<T>()));
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
        self.job(Box::new(move |d, r, now| {
            let me = r.replica();
            match r.update(now, &k, level, timeout, |s| modify(s, me)) {
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
        self.job(Box::new(move |d, r, now| {
            match r.get(now, &k, level, timeout) {
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
        self.job(Box::new(move |d, r, _| {
            r.register::<T>();
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
            notify(r);
            d.subscribers.entry(name).or_default().push(notify);
        }));
    }

    /// The replicator's counters.
    pub async fn stats(&self) -> ReplicatorStats {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |_, r, _| {
            let _ = tx.send(r.stats());
        }));
        rx.await.unwrap_or_default()
    }

    /// Stops the replicator (for every clone): no more packets or updates;
    /// a batch being written is finished and the store closed (so the file
    /// can be opened again) when this returns.
    pub async fn stop(self) {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |d, _, _| d.stopping = Some(tx)));
        let _ = rx.await;
    }

    /// This member's replica id.
    pub async fn replica(&self) -> Option<ReplicaId> {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |_, r, _| {
            let _ = tx.send(r.replica());
        }));
        rx.await.ok()
    }
}
