//! Where device states are kept: a [`DeviceDirectory`].
//!
//! Device states live in a cluster-wide CRDT readable on every server
//! (Aurum keeps them in a replicated map). The tracker only needs the
//! operations below. [`LocalDirectory`] implements them as a table of this
//! server alone; `replicated::ReplicatedDirectory` (feature `data`) as a
//! last-writer-wins register per device in one replicated map of
//! `plexus-data`, so every server reads every device's state.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::wire::{DeviceId, SessionId};

/// A device's state as its server sees it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[non_exhaustive]
pub enum DeviceStatus {
    /// Heartbeats arrive.
    Up,
    /// Silent past the phi threshold; kept a while, then forgotten.
    Lost,
    /// Handed to another server (the ring moved it).
    Moved,
    /// A newer driver took the id; this session was told to stop.
    Stopped,
}

/// One device's state: what every server can read. Serialisable (it is
/// the value of the replicated map); a decoded `server` longer than
/// [`MAX_ADDR`](crate::wire::MAX_ADDR) bytes is refused. The order (derived, field by field) only
/// breaks ties of equal stamps in a last-writer-wins register.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct DeviceRecord {
    /// The device.
    pub device: DeviceId,
    /// The driver run the record is about.
    pub session: SessionId,
    /// The server responsible for it (the writer of the record).
    #[serde(with = "bounded_address")]
    pub server: Arc<str>,
    /// Its state.
    pub status: DeviceStatus,
    /// Reports this server received from this session.
    pub reports: u64,
    /// Running total of the reports' values (wrapping).
    pub total: i64,
    /// Orders records of one device: `(session, server's change counter)`,
    /// higher wins (a newer session always wins; within a session the
    /// latest change of the server that wrote it). A CRDT merge keeps the
    /// record with the highest version.
    pub version: (SessionId, u64),
}

/// An address as a string, at most `MAX_ADDR` bytes when decoded.
mod bounded_address {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    use crate::wire::MAX_ADDR;

    pub(super) fn serialize<S: Serializer>(a: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(a)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        let a = String::deserialize(d)?;
        if a.len() > MAX_ADDR {
            return Err(serde::de::Error::custom(format_args!(
                "a server address of {} bytes (at most {MAX_ADDR})",
                a.len()
            )));
        }
        Ok(a.into())
    }
}

/// The operations the tracker needs from a store of device states.
///
/// Implementations must be cheap to call from the tracker's thread:
/// `record` is called on every status change of a device and for every
/// device whose counts changed once per `record_interval`.
pub trait DeviceDirectory: Send + 'static {
    /// Records `record` if its version is higher than the stored one of
    /// that device (a last-writer-wins register per device).
    fn record(&mut self, record: DeviceRecord);
    /// The stored record of `device`.
    fn get(&self, device: DeviceId) -> Option<DeviceRecord>;
    /// Every stored record.
    fn records(&self) -> Vec<DeviceRecord>;
}

/// A [`DeviceDirectory`] in this process only (not replicated): a shared
/// table, so a handle kept by the driver reads what the tracker writes.
/// Bounded by the tracker's `max_devices` plus the records of devices it
/// moved or lost (removed with [`LocalDirectory::forget`]).
#[derive(Debug, Clone, Default)]
pub struct LocalDirectory {
    table: Arc<RwLock<HashMap<DeviceId, DeviceRecord>>>,
}

impl LocalDirectory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes a device's record.
    pub fn forget(&self, device: DeviceId) {
        self.table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&device);
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DeviceDirectory for LocalDirectory {
    fn record(&mut self, record: DeviceRecord) {
        let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
        match t.get(&record.device) {
            Some(old) if old.version > record.version => {}
            _ => {
                t.insert(record.device, record);
            }
        }
    }

    fn get(&self, device: DeviceId) -> Option<DeviceRecord> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&device)
            .cloned()
    }

    fn records(&self) -> Vec<DeviceRecord> {
        let mut v: Vec<DeviceRecord> = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|r| r.device);
        v
    }
}
