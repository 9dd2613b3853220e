//! Remembered entities on a node: each shard's active ids of a remembering
//! type in replicated data (`plexus-data`), one add-wins set per shard
//! under the key `plexus.sharding.remember/<type>/<shard>`.
//!
//! The region says what to remember ([`Event::Remember`],
//! [`Event::Forget`]) and when a shard starts here
//! ([`Event::ShardStarted`]); this keeps the sets and reads them back.
//! Changes are written at majority, one write in flight per shard (the
//! changes that come meanwhile go together in the next), so a burst of
//! activations costs a write per shard, not per entity. An entity runs
//! before its id is written: one activated within a write's round trip
//! of its member's crash may not be restarted (its next message starts
//! it); a graceful leave ([`Sharding::leave`](super::Sharding::leave))
//! waits for the writes under way before it hands its shards over. A
//! shard that starts reads its set at majority (at this member alone if no
//! majority answers) and wakes every id in it.
//!
//! Make the sets survive a whole cluster's restart with a durable store
//! and `ReplicatorConfig::durable` naming `plexus.sharding.remember/*`.
//!
//! [`Event::Remember`]: crate::regions::Event::Remember
//! [`Event::Forget`]: crate::regions::Event::Forget
//! [`Event::ShardStarted`]: crate::regions::Event::ShardStarted

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use plexus_data::crdt::{Crdt, ORSet};
use plexus_data::node::Replication;
use plexus_data::{Consistency, Key};
use plexus_remote::driver::Input;

use super::host::Command;
use super::Inputs;
use crate::shard::{EntityId, ShardId};

/// The prefix of every remembered set's key.
pub const REMEMBER_KEY_PREFIX: &str = "plexus.sharding.remember/";

/// How long a read or a write waits for a majority.
const WAIT: Duration = Duration::from_secs(5);

/// The key of the remembered set of `shard` of `entity_type`.
pub fn remember_key(entity_type: &str, shard: ShardId) -> Key<ORSet<String>> {
    Key::new(format!("{REMEMBER_KEY_PREFIX}{entity_type}/{}", shard.0))
}

/// A change to a remembered set, in the order it happened.
#[derive(Debug)]
enum Change {
    Add(EntityId),
    Remove(EntityId),
}

/// One remembering type's sets on this member.
pub(crate) struct Remembering {
    data: Replication,
    entity_type: Arc<str>,
    inputs: Inputs,
    /// Changes not written yet, per shard.
    pending: BTreeMap<ShardId, Vec<Change>>,
    /// Shards with a write in flight.
    writing: BTreeSet<ShardId>,
}

impl Remembering {
    pub(crate) fn new(data: Replication, entity_type: Arc<str>, inputs: Inputs) -> Self {
        // Its replicator acknowledges the sets' updates from the start.
        data.register::<ORSet<String>>();
        Self {
            data,
            entity_type,
            inputs,
            pending: BTreeMap::new(),
            writing: BTreeSet::new(),
        }
    }

    /// Adds `id` to `shard`'s set.
    pub(crate) fn remember(&mut self, shard: ShardId, id: EntityId) {
        self.change(shard, Change::Add(id));
    }

    /// Takes `id` out of `shard`'s set.
    pub(crate) fn forget(&mut self, shard: ShardId, id: EntityId) {
        self.change(shard, Change::Remove(id));
    }

    fn change(&mut self, shard: ShardId, change: Change) {
        self.pending.entry(shard).or_default().push(change);
        if !self.writing.contains(&shard) {
            self.write(shard);
        }
    }

    /// Whether changes wait or are being written.
    pub(crate) fn busy(&self) -> bool {
        !self.writing.is_empty() || !self.pending.is_empty()
    }

    /// `shard`'s write ended: the next one goes, if changes wait.
    pub(crate) fn written(&mut self, shard: ShardId) {
        self.writing.remove(&shard);
        if self.pending.contains_key(&shard) {
            self.write(shard);
        }
    }

    fn write(&mut self, shard: ShardId) {
        let Some(changes) = self.pending.remove(&shard) else {
            return;
        };
        self.writing.insert(shard);
        let (data, inputs) = (self.data.clone(), self.inputs.clone());
        let entity_type = self.entity_type.clone();
        tokio::spawn(async move {
            let key = remember_key(&entity_type, shard);
            let result = data
                .update(&key, Consistency::Majority, WAIT, move |set, me| {
                    let mut delta = ORSet::default();
                    for change in changes {
                        let d = match change {
                            Change::Add(id) => set.add(me, id.as_str().to_owned()),
                            Change::Remove(id) => set.remove(&id.as_str().to_owned()),
                        };
                        delta.merge(&d);
                    }
                    delta
                })
                .await;
            if let Err(error) = &result {
                // Applied here all the same: gossip carries it on.
                tracing::warn!(target: "plexus::sharding", %entity_type, shard = shard.0, %error, "remembered entities not written at majority");
            }
            let _ = inputs.send(Input::Command(Command::Remembered {
                entity_type,
                shard,
                written: result.is_ok(),
            }));
        });
    }

    /// `shard` started here: reads its set and has every id in it woken.
    pub(crate) fn read(&self, shard: ShardId) {
        let (data, inputs) = (self.data.clone(), self.inputs.clone());
        let entity_type = self.entity_type.clone();
        tokio::spawn(async move {
            let key = remember_key(&entity_type, shard);
            let set = match data.get(&key, Consistency::Majority, WAIT).await {
                Ok(set) => set,
                Err(error) => {
                    tracing::warn!(target: "plexus::sharding", %entity_type, shard = shard.0, %error, "remembered entities not read at majority: waking those known here");
                    data.get(&key, Consistency::Local, WAIT)
                        .await
                        .ok()
                        .flatten()
                }
            };
            let ids = set
                .iter()
                .flat_map(ORSet::iter)
                .filter_map(|id| EntityId::new(id).ok())
                .collect();
            let _ = inputs.send(Input::Command(Command::Wake { entity_type, ids }));
        });
    }
}
