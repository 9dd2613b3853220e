//! The replicator's side of durable keys: batches of records for the store
//! to write, held acknowledgements, and recovery.
//!
//! A record is `RECORD_VERSION` followed by the postcard encoding of the
//! key's [`WireEntry`] (key, type tag, state, pruning markers). An update of
//! a durable key completes, and a peer's write of one is acknowledged, only
//! once the batch holding it is written ([`Replicator::handle_stored`]), so
//! a crash loses nothing that was acknowledged.

use std::sync::Arc;

use bytes::Bytes;

use super::error::{EntryError, RecordError};
use super::wire::WireEntry;
use super::{keys, Envelope, Replicator, Traffic};

/// The format version of durable records this build writes and reads.
pub const RECORD_VERSION: u8 = 1;

/// Records for the store to write in one transaction, then report with
/// [`Replicator::handle_stored`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreBatch {
    /// The batch's number.
    pub id: u64,
    /// `(key, record)` pairs.
    pub records: Vec<(Arc<str>, Bytes)>,
}

/// A durable record of `entry`.
pub fn encode_record(entry: &WireEntry) -> Vec<u8> {
    let mut out = vec![RECORD_VERSION];
    postcard::to_io(entry, &mut out).ok();
    out
}

/// Decodes a durable record stored under `key`.
///
/// # Errors
///
/// [`RecordError::NewerVersion`] or [`RecordError::Corrupt`].
pub fn decode_record(key: &str, bytes: &[u8]) -> Result<WireEntry, RecordError> {
    let corrupt = || RecordError::Corrupt {
        key: key.to_owned(),
    };
    let (&version, rest) = bytes.split_first().ok_or_else(corrupt)?;
    if version > RECORD_VERSION {
        return Err(RecordError::NewerVersion {
            key: key.to_owned(),
            version,
        });
    }
    if version != RECORD_VERSION {
        return Err(corrupt());
    }
    match postcard::take_from_bytes::<WireEntry>(rest) {
        Ok((entry, [])) if entry.key == key => Ok(entry),
        _ => Err(corrupt()),
    }
}

impl Replicator {
    /// The next batch of durable records to write, if any changed.
    pub fn poll_store(&mut self) -> Option<StoreBatch> {
        if self.durable_dirty.is_empty() {
            return None;
        }
        let id = self.next_batch;
        self.next_batch += 1;
        let records = std::mem::take(&mut self.durable_dirty)
            .into_iter()
            .filter_map(|key| {
                let env = self.keys.get(&key)?;
                let record = encode_record(&keys::encode_entry(&key, env));
                Some((key, Bytes::from(record)))
            })
            .collect();
        Some(StoreBatch { id, records })
    }

    /// The store wrote batch `id` (and every batch before it).
    pub fn handle_stored(&mut self, now: std::time::Instant, id: u64) {
        self.stored_batch = self.stored_batch.max(id);
        while self.held.front().is_some_and(|(b, _, _)| *b <= id) {
            let (_, to, body) = self.held.pop_front().expect("checked");
            self.send(&to, body, Traffic::Request);
        }
        self.complete_requests(now);
    }

    /// Recovers durable records read from the store (call after
    /// registering the types). A record of a type not registered yet waits
    /// until it is; the errors of records that cannot be read are returned
    /// (and the rest recovered).
    pub fn recover(
        &mut self,
        records: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Vec<RecordError> {
        let mut errors = Vec::new();
        for (key, bytes) in records {
            let entry = match decode_record(&key, &bytes) {
                Ok(e) => e,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if !self.registry.knows(entry.tag) {
                if !self.hold_unregistered(true, &entry) {
                    errors.push(RecordError::Entry(EntryError::UnknownType {
                        key: entry.key.clone(),
                        tag: entry.tag,
                    }));
                }
                continue;
            }
            if let Err(e) = self.recover_entry(&entry) {
                errors.push(e);
            }
        }
        errors
    }

    pub(super) fn recover_entry(&mut self, entry: &WireEntry) -> Result<(), RecordError> {
        let data = match self.registry.decode(entry.tag, &entry.data) {
            None => {
                return Err(EntryError::UnknownType {
                    key: entry.key.clone(),
                    tag: entry.tag,
                }
                .into())
            }
            Some(Err(source)) => {
                return Err(EntryError::Decode {
                    key: entry.key.clone(),
                    source,
                }
                .into())
            }
            Some(Ok(d)) => d,
        };
        let recovered = Envelope {
            data,
            pruning: entry.pruning.clone(),
        };
        match self.keys.get(&entry.key) {
            Some(env) if env.data.tag() != entry.tag => {
                return Err(EntryError::TypeMismatch {
                    key: entry.key.clone(),
                    have: env.data.type_name(),
                }
                .into())
            }
            Some(_) => {
                self.keys
                    .get_mut(&entry.key)
                    .expect("present")
                    .merge(&recovered);
            }
            None => {
                let mut env = Envelope::new(recovered.data.bottom());
                env.merge(&recovered);
                self.keys.insert(Arc::from(entry.key.as_str()), env);
            }
        }
        Ok(())
    }
}
