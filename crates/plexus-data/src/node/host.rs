//! What the replicator does under the node's driver
//! (`plexus_remote::driver`): its packets out through refs forged to
//! `<member address>/plexus.data`; the handle's jobs, cluster updates and
//! the store writer's completions in; its events to whoever waits on a
//! request or watches a key; its store batches to the writer, one at a
//! time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_cluster::{ClusterUpdate, MemberState};
use plexus_core::ActorRef;
use plexus_remote::driver::Host;
use plexus_remote::{ForgedRefs, Node};
use tokio::sync::oneshot;

use super::protocol::ReplicatorProtocol;
use super::writer::Writer;
use super::{DataPacket, ACTOR_NAME};
use crate::replicator::{Event, GetError, Replicator, RequestId, UpdateError};
use crate::store::WriteError;

/// Work a [`Replication`](super::Replication) handle hands the driver.
pub(super) type Job = Box<dyn FnOnce(&mut DataHost, &mut Replicator, Instant) + Send>;
/// Tells a key's subscriber its state; false once the subscriber is gone.
pub(super) type Notify = Box<dyn Fn(&Replicator) -> bool + Send>;
/// Answers a read once its request is done.
pub(super) type GetDone = Box<dyn FnOnce(&Replicator, Result<(), GetError>) + Send>;

/// What the replicator's driver is asked to do, besides its packets' work.
pub(super) enum Command {
    /// A replicator packet from the node (the node does not name its
    /// sender; the packet does).
    Packet(Bytes),
    /// The cluster changed.
    Cluster(ClusterUpdate),
    /// A handle's request.
    Job(Job),
    /// The writer finished a batch.
    Stored(Result<u64, WriteError>),
}

/// The replicator's host. See the [module docs](self).
pub(super) struct DataHost {
    pub(super) node: Node,
    pub(super) refs: ForgedRefs<DataPacket>,
    pub(super) updates_waiting: HashMap<RequestId, oneshot::Sender<Result<(), UpdateError>>>,
    pub(super) gets_waiting: HashMap<RequestId, GetDone>,
    pub(super) subscribers: HashMap<Arc<str>, Vec<Notify>>,
    pub(super) writer: Option<Writer>,
    /// A batch is being written.
    pub(super) writing: bool,
    /// This member was downed; it starts a new life when it is back.
    pub(super) downed: bool,
    /// `stop` was called: told when the store is closed.
    pub(super) stopping: Option<oneshot::Sender<()>>,
    /// Kept alive as long as the driver runs.
    pub(super) inbox: ActorRef<DataPacket>,
    pub(super) watcher: ActorRef<ClusterUpdate>,
}

impl Host<ReplicatorProtocol> for DataHost {
    type Command = Command;

    fn command(&mut self, protocol: &mut ReplicatorProtocol, now: Instant, command: Command) {
        let replicator = &mut protocol.0;
        match command {
            Command::Packet(bytes) => {
                if let Err(e) = replicator.handle_packet(now, &bytes) {
                    tracing::warn!(target: "plexus::data", error = %e, "refused a replicator packet");
                }
            }
            Command::Cluster(update) => self.on_cluster(replicator, now, &update),
            Command::Job(job) => job(self, replicator, now),
            Command::Stored(result) => {
                self.writing = false;
                match result {
                    Ok(id) => replicator.handle_stored(now, id),
                    Err(e) => {
                        // Nothing of the batch is acknowledged; its keys
                        // stay unacknowledged until a later write of them.
                        tracing::error!(target: "plexus::data", error = %e, "durable store write failed");
                    }
                }
            }
        }
    }

    fn transmit(&mut self, _: &mut ReplicatorProtocol, _now: Instant, to: Arc<str>, packet: Bytes) {
        match self
            .refs
            .get(&self.node, &to, || format!("{to}/{ACTOR_NAME}"))
        {
            Ok(r) => r.tell(DataPacket(packet)),
            Err(e) => {
                tracing::warn!(target: "plexus::data", %to, error = %e, "cannot reach a member");
            }
        }
    }

    fn event(&mut self, protocol: &mut ReplicatorProtocol, _now: Instant, event: Event) {
        let replicator = &protocol.0;
        match event {
            Event::Changed { key } => {
                if let Some(subs) = self.subscribers.get_mut(&key) {
                    subs.retain(|notify| notify(replicator));
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
                    done(replicator, result);
                }
            }
        }
    }

    fn flushed(&mut self, protocol: &mut ReplicatorProtocol, _now: Instant) {
        if self.writing {
            return;
        }
        if let Some(writer) = &self.writer {
            if let Some(batch) = protocol.0.poll_store() {
                self.writing = writer.write(batch);
            }
        }
    }

    fn is_done(&self, _: &ReplicatorProtocol) -> bool {
        self.stopping.is_some()
    }
}

impl DataHost {
    /// After the driver returned: takes the actors off the node, finishes
    /// the batch being written and closes the store, then tells `stop`.
    pub(super) async fn close(mut self) {
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

    fn on_cluster(&mut self, replicator: &mut Replicator, now: Instant, update: &ClusterUpdate) {
        match update.local.state {
            MemberState::Down | MemberState::Removed => self.downed = true,
            MemberState::Joining | MemberState::Up if self.downed => {
                self.downed = false;
                replicator.renew(update.local.incarnation);
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
        replicator.set_members(now, &members);
    }
}
