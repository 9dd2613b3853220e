//! A region's active entities: which are active, which to passivate for
//! idleness, and which to passivate first when too many are active
//! (`ALGORITHM.md`, "Activation, passivation").
//!
//! An entity is active from its first message until it is passivated:
//! idle for `passivate_after`, or the least recently used one when a new
//! activation would make more than `max_active` run. Passivation is asked of the
//! caller (the entity's `stopping` hook runs there); the entity counts as
//! active until the caller reports it stopped, so a message that arrives
//! meanwhile is held by the caller and re-activates it after.
//!
//! Sans-IO: time comes in as `now`. An entity is found by its id in a hash
//! table (O(1); ids come from the network, so the table's hasher is
//! seeded at random); the use order is a B-tree ordered by time (O(log
//! n), and its keys compare without reading the id).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::shard::EntityId;

/// What a message to an entity found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// Active already: deliver.
    Active,
    /// Not active: activate it, then deliver. `evict` names the least
    /// recently used entity to passivate first, when `max_active` is
    /// reached.
    Activate {
        /// To passivate to make room, if any.
        evict: Option<EntityId>,
    },
    /// Being passivated: hold the message until it stopped, then activate
    /// it again.
    Stopping,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    last: Instant,
    /// Orders entries used at the same instant.
    tick: u64,
    stopping: bool,
    /// Kept running (a singleton): never idle, never evicted, not in
    /// `by_use`.
    kept: bool,
}

/// A region's active entities of one type. See the [module docs](self).
#[derive(Debug)]
pub struct Entities {
    max_active: usize,
    passivate_after: Duration,
    entries: HashMap<EntityId, Entry>,
    /// Running entities (not stopping) by last use: the least recently used
    /// first.
    by_use: BTreeSet<(Instant, u64, EntityId)>,
    tick: u64,
}

impl Entities {
    /// At most `max_active` (at least 1) entities, each passivated after
    /// `passivate_after` without a message.
    pub fn new(max_active: usize, passivate_after: Duration) -> Self {
        Self {
            max_active: max_active.max(1),
            passivate_after,
            entries: HashMap::new(),
            by_use: BTreeSet::new(),
            tick: 0,
        }
    }

    /// Entities active (those stopping included).
    pub fn active(&self) -> usize {
        self.entries.len()
    }

    /// Entities running (active and not stopping): at most `max_active`.
    pub fn running(&self) -> usize {
        self.by_use.len()
    }

    /// Whether `id` is active or stopping.
    pub fn is_known(&self, id: &EntityId) -> bool {
        self.entries.contains_key(id)
    }

    /// A message for `id` arrives at `now`.
    pub fn touch(&mut self, id: &EntityId, now: Instant) -> Touch {
        self.tick += 1;
        if let Some(entry) = self.entries.get_mut(id) {
            if entry.stopping {
                return Touch::Stopping;
            }
            if entry.kept {
                return Touch::Active;
            }
            self.by_use.remove(&(entry.last, entry.tick, id.clone()));
            entry.last = now;
            entry.tick = self.tick;
            self.by_use.insert((now, self.tick, id.clone()));
            return Touch::Active;
        }
        let evict = if self.by_use.len() >= self.max_active {
            self.by_use.pop_first().map(|(_, _, lru)| {
                if let Some(e) = self.entries.get_mut(&lru) {
                    e.stopping = true;
                }
                lru
            })
        } else {
            None
        };
        self.entries.insert(
            id.clone(),
            Entry {
                last: now,
                tick: self.tick,
                stopping: false,
                kept: false,
            },
        );
        self.by_use.insert((now, self.tick, id.clone()));
        Touch::Activate { evict }
    }

    /// Like [`touch`](Entities::touch), for an entity kept running (a
    /// singleton): it is never passivated for idleness or room, and takes
    /// no room from the others.
    pub fn touch_kept(&mut self, id: &EntityId, now: Instant) -> Touch {
        self.tick += 1;
        if let Some(entry) = self.entries.get_mut(id) {
            if entry.stopping {
                return Touch::Stopping;
            }
            self.by_use.remove(&(entry.last, entry.tick, id.clone()));
            entry.kept = true;
            return Touch::Active;
        }
        self.entries.insert(
            id.clone(),
            Entry {
                last: now,
                tick: self.tick,
                stopping: false,
                kept: true,
            },
        );
        Touch::Activate { evict: None }
    }

    /// Passivates `id` now (its shard moves away, or the lease is lost):
    /// `true` if it was running, and it counts as stopping from here on.
    pub fn passivate(&mut self, id: &EntityId) -> bool {
        match self.entries.get_mut(id) {
            Some(entry) if !entry.stopping => {
                entry.stopping = true;
                self.by_use.remove(&(entry.last, entry.tick, id.clone()));
                true
            }
            _ => false,
        }
    }

    /// The caller reports `id` stopped (passivated, or failed): it is no
    /// longer active.
    pub fn stopped(&mut self, id: &EntityId) {
        if let Some(entry) = self.entries.remove(id) {
            self.by_use.remove(&(entry.last, entry.tick, id.clone()));
        }
    }

    /// When the least recently used entity turns idle.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.by_use
            .first()
            .map(|(last, _, _)| *last + self.passivate_after)
    }

    /// The entities idle at `now`, to passivate; each is named once (it
    /// counts as stopping until [`stopped`](Entities::stopped)).
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<EntityId> {
        let mut idle = Vec::new();
        while let Some((last, _, _)) = self.by_use.first() {
            if *last + self.passivate_after > now {
                break;
            }
            let (_, _, id) = self.by_use.pop_first().expect("just seen");
            if let Some(e) = self.entries.get_mut(&id) {
                e.stopping = true;
            }
            idle.push(id);
        }
        idle
    }
}

#[cfg(test)]
mod tests;
