//! Device states replicated cluster-wide: a [`DeviceDirectory`] in one key
//! of `plexus-data`, so every server reads every device's state.
//!
//! ```text
//!   Tracker ──record()──► table (this server's view) ──► writer task ──► Replication::update
//!                           ▲                              (batched, Local, fire-and-forget)
//!                           └──── subscriber ◄── Changed<DeviceMap> ◄── merged state of
//!                                                                       "plexus.devices"
//! ```
//!
//! The key [`DEVICES_KEY`] holds a [`DeviceMap`]: an `ORMap` from the
//! device id to a `LwwRegister<DeviceRecord>`. A server writes the records
//! of the devices it holds at `Consistency::Local` and does not wait: the
//! replicator spreads the deltas to the other members (gossip and
//! anti-entropy), whose subscriptions refresh their tables.
//!
//! **The register's clock** is the writing server's wall clock in
//! milliseconds since the Unix epoch, raised to at least the session's
//! start (its high bits are the device driver's wall clock at start), so
//! a newer session's records outrank an older one's unless clocks are
//! skewed by more than the time between the two sessions. `LwwRegister`
//! writes `max(clock, stored + 1)`, so a server that merged a write always
//! writes above it: when a device moves, the new owner's record beats the
//! old owner's `Moved` as soon as it has seen it, and by wall clock
//! before. A write of a session older than the one stored is not made (a
//! newer driver holds the device). `DeviceRecord::version` stays in the
//! record as the writer's own order; the register orders by the clock.
//!
//! **Reads** are this server's table: its own writes at once, and the
//! merged state of the key as of the last change the replicator reported
//! (the newest stamp per device wins). **Bounds:** one register per device
//! id ever written (removed with [`ReplicatedDirectory::forget`]); each
//! change notification clones the map, so this suits up to some thousands
//! of devices per cluster, not the tracker's 65,536 per server; the
//! replicator's own limits (`max_transfer`, packet sizes) bound the key.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plexus_core::SystemRef;
use plexus_data::crdt::{Crdt, LwwRegister, ORMap};
use plexus_data::node::{Changed, Replication};
use plexus_data::{Consistency, Key, UpdateError};
use tokio::sync::{mpsc, watch};

use crate::directory::{DeviceDirectory, DeviceRecord};
use crate::wire::DeviceId;

/// The replicated key's type: device id → last-writer-wins record.
pub type DeviceMap = ORMap<u64, LwwRegister<DeviceRecord>>;

/// The name of the replicated key holding every device's record.
pub const DEVICES_KEY: &str = "plexus.devices";

/// The replicated key holding every device's record.
pub fn devices_key() -> Key<DeviceMap> {
    Key::new(DEVICES_KEY)
}

/// Records written in one update at most (a burst of registrations is
/// written in a few updates, not one per device).
const BATCH: usize = 1024;
/// How long a local update may take (it completes at once at `Local`).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A record and the register clock it was (or will be) written with.
#[derive(Debug, Clone)]
struct Stamped {
    clock: u64,
    record: DeviceRecord,
}

#[derive(Debug, Default)]
struct Table {
    records: HashMap<DeviceId, Stamped>,
}

impl Table {
    /// Keeps `s` unless the stored record of its device is of a newer
    /// session or has a higher clock.
    fn offer(&mut self, s: Stamped) {
        let keep = self
            .records
            .get(&s.record.device)
            .is_none_or(|old| (old.record.session, old.clock) <= (s.record.session, s.clock));
        if keep {
            self.records.insert(s.record.device, s);
        }
    }
}

/// A [`DeviceDirectory`] replicated through `plexus-data`. See the
/// [module docs](self). Clones share the table (the driver keeps one to
/// read what the tracker writes and what other servers wrote).
#[derive(Debug, Clone)]
pub struct ReplicatedDirectory {
    table: Arc<RwLock<Table>>,
    writes: mpsc::UnboundedSender<Write>,
    merged: watch::Receiver<u64>,
}

#[derive(Debug)]
enum Write {
    Record(Stamped),
    Forget(DeviceId),
}

impl ReplicatedDirectory {
    /// Starts the directory on `replication` (the replicator of this
    /// server's cluster member): registers [`DeviceMap`], subscribes to
    /// [`DEVICES_KEY`] with an actor spawned in `system`, and spawns the
    /// writer task on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (like `Replication::start`).
    pub fn start(system: &SystemRef, replication: Arc<Replication>) -> Self {
        replication.register::<DeviceMap>();
        let table = Arc::new(RwLock::new(Table::default()));
        let (merged_tx, merged) = watch::channel(0u64);
        let t = Arc::clone(&table);
        let subscriber = system.spawn_fn(move |changed: Changed<DeviceMap>, _ctx| {
            {
                let mut t = t.write().unwrap_or_else(PoisonError::into_inner);
                for (_, register) in changed.value.iter() {
                    if let (Some(record), Some((clock, _))) = (register.get(), register.timestamp())
                    {
                        t.offer(Stamped {
                            clock,
                            record: record.clone(),
                        });
                    }
                }
            }
            merged_tx.send_modify(|n| *n += 1);
        });
        let key = devices_key();
        replication.subscribe(&key, subscriber);
        let (writes, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(replication, key, rx));
        Self {
            table,
            writes,
            merged,
        }
    }

    /// Removes `device`'s record here and from the replicated map (as far
    /// as this server has seen it: a concurrent write elsewhere keeps it).
    /// Other servers' tables keep the record they last read (their reads
    /// are of records written, not of removals).
    pub fn forget(&self, device: DeviceId) {
        self.table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .remove(&device);
        let _ = self.writes.send(Write::Forget(device));
    }

    /// A receiver whose value grows each time a merged state of the key
    /// reached this server's table (to wait for other servers' writes).
    pub fn merged(&self) -> watch::Receiver<u64> {
        self.merged.clone()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DeviceDirectory for ReplicatedDirectory {
    fn record(&mut self, record: DeviceRecord) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // The session's high bits are its driver's wall clock at start.
        let clock = now.max(record.session.0 >> 16);
        let s = Stamped { clock, record };
        self.table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .offer(s.clone());
        let _ = self.writes.send(Write::Record(s));
    }

    fn get(&self, device: DeviceId) -> Option<DeviceRecord> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .get(&device)
            .map(|s| s.record.clone())
    }

    fn records(&self) -> Vec<DeviceRecord> {
        let mut v: Vec<DeviceRecord> = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .values()
            .map(|s| s.record.clone())
            .collect();
        v.sort_by_key(|r| r.device);
        v
    }
}

/// Writes what the tracker recorded, a batch per update, until every
/// handle of the directory is gone.
async fn write_loop(
    replication: Arc<Replication>,
    key: Key<DeviceMap>,
    mut rx: mpsc::UnboundedReceiver<Write>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let writes = std::mem::take(&mut batch);
        let r = replication
            .update(&key, Consistency::Local, WRITE_TIMEOUT, move |map, me| {
                let mut delta = DeviceMap::default();
                for w in writes {
                    let d = match w {
                        Write::Record(s) => {
                            let id = s.record.device.0;
                            let newer = map
                                .get(&id)
                                .and_then(LwwRegister::get)
                                .is_some_and(|r| r.session > s.record.session);
                            if newer {
                                continue;
                            }
                            map.update(me, id, |r| r.set(me, s.record, s.clock))
                        }
                        Write::Forget(id) => map.remove(&id.0),
                    };
                    delta.merge(&d);
                }
                delta
            })
            .await;
        match r {
            Ok(()) => {}
            // The replicator is gone: so is every later write.
            Err(e @ UpdateError::Stopped { .. }) => {
                tracing::warn!(target: "plexus::devices", error = %e, "device records no longer replicated");
                return;
            }
            Err(e) => {
                tracing::warn!(target: "plexus::devices", error = %e, "device records not replicated");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::DeviceStatus;
    use crate::wire::SessionId;

    fn record(session: u64, server: &str, status: DeviceStatus) -> DeviceRecord {
        DeviceRecord {
            device: DeviceId(1),
            session: SessionId(session),
            server: server.into(),
            status,
            reports: 0,
            total: 0,
            version: (SessionId(session), 0),
        }
    }

    #[test]
    fn the_table_keeps_the_newer_session_then_the_higher_clock() {
        let mut t = Table::default();
        let get = |t: &Table| t.records[&DeviceId(1)].record.clone();
        t.offer(Stamped {
            clock: 10,
            record: record(2, "s1", DeviceStatus::Up),
        });
        // An older session, even with a later clock, does not replace it.
        t.offer(Stamped {
            clock: 99,
            record: record(1, "s0", DeviceStatus::Up),
        });
        assert_eq!(&*get(&t).server, "s1");
        // Within the session, the higher clock wins (the device moved).
        t.offer(Stamped {
            clock: 9,
            record: record(2, "s1", DeviceStatus::Moved),
        });
        assert_eq!(get(&t).status, DeviceStatus::Up);
        t.offer(Stamped {
            clock: 11,
            record: record(2, "s2", DeviceStatus::Up),
        });
        assert_eq!(&*get(&t).server, "s2");
    }

    #[test]
    fn a_decoded_record_with_an_overlong_server_address_is_refused() {
        // In the replicator's encoding (postcard), inside a register.
        let round_trip = |r: &DeviceRecord| {
            let mut reg = LwwRegister::default();
            let _ = reg.set(plexus_data::crdt::ReplicaId(1), r.clone(), 1);
            let bytes = postcard::to_stdvec(&reg).expect("a register encodes");
            postcard::from_bytes::<LwwRegister<DeviceRecord>>(&bytes)
                .map(|back| back.get().cloned())
        };
        let mut r = record(1, "s0", DeviceStatus::Up);
        assert_eq!(round_trip(&r), Ok(Some(r.clone())));
        r.server = "x".repeat(crate::wire::MAX_ADDR + 1).into();
        assert!(round_trip(&r).is_err());
    }
}
