//! The replicator's key table, hashed into buckets with a digest each.
//!
//! A key's hash is XXH3 of its name and its envelope's bytes; a bucket's
//! digest is the XOR of its keys' hashes, kept up to date incrementally: a
//! changed key is marked dirty and re-hashed only when digests are next
//! asked for (once per anti-entropy round, not once per mutation, since
//! encoding a large state for every small delta would cost more than the
//! delta saves).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::envelope::Envelope;
use super::wire::WireEntry;

#[derive(Debug)]
pub(crate) struct KeyEntry {
    pub(crate) envelope: Envelope,
    /// The hash folded into the bucket's digest, if it is current.
    hash: Option<u64>,
}

/// Hash maps keyed by names from the network: foldhash with a random seed
/// (fast, and a peer cannot aim keys at one slot the way it could with an
/// unseeded hash).
type Hasher = foldhash::fast::RandomState;

#[derive(Debug)]
pub(crate) struct KeyTable {
    entries: HashMap<Arc<str>, KeyEntry, Hasher>,
    /// Keys of each bucket (anti-entropy walks a bucket; keys are never
    /// deleted, so a list suffices).
    buckets: Vec<Vec<Arc<str>>>,
    digests: Vec<u64>,
    dirty: HashSet<Arc<str>, Hasher>,
}

pub(crate) fn name_hash(key: &str) -> u64 {
    twox_hash::XxHash3_64::oneshot(key.as_bytes())
}

pub(crate) fn encode_entry(key: &str, envelope: &Envelope) -> WireEntry {
    WireEntry {
        key: key.to_owned(),
        tag: envelope.data.tag(),
        data: envelope.data.encode().into(),
        pruning: envelope.pruning.clone(),
    }
}

fn entry_hash(key: &str, envelope: &Envelope) -> u64 {
    let mut bytes = envelope.data.encode();
    bytes.extend_from_slice(key.as_bytes());
    bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
    if !envelope.pruning.is_empty() {
        bytes.extend(postcard::to_stdvec(&envelope.pruning).unwrap_or_default());
    }
    // 0 means "empty bucket" in a digest exchange.
    twox_hash::XxHash3_64::oneshot(&bytes).max(1)
}

impl KeyTable {
    pub(crate) fn new(buckets: u32) -> Self {
        let n = buckets.max(1) as usize;
        Self {
            entries: HashMap::default(),
            buckets: vec![Vec::new(); n],
            digests: vec![0; n],
            dirty: HashSet::default(),
        }
    }

    pub(crate) fn bucket_count(&self) -> u32 {
        self.buckets.len() as u32
    }

    pub(crate) fn bucket_of(&self, key: &str) -> usize {
        (name_hash(key) % self.buckets.len() as u64) as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Envelope> {
        self.entries.get(key).map(|e| &e.envelope)
    }

    pub(crate) fn key_arc(&self, key: &str) -> Option<Arc<str>> {
        self.entries.get_key_value(key).map(|(k, _)| Arc::clone(k))
    }

    /// The envelope of `key` for changing; marks the key dirty.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Envelope> {
        let (k, entry) = self.entries.get_key_value(key)?;
        let k = Arc::clone(k);
        let bucket = (name_hash(&k) % self.buckets.len() as u64) as usize;
        let entry_hash = entry.hash;
        if let Some(h) = entry_hash {
            self.digests[bucket] ^= h;
        }
        self.dirty.insert(Arc::clone(&k));
        let entry = self.entries.get_mut(key).expect("present");
        entry.hash = None;
        Some(&mut entry.envelope)
    }

    pub(crate) fn insert(&mut self, key: Arc<str>, envelope: Envelope) {
        let bucket = self.bucket_of(&key);
        match self.entries.insert(
            Arc::clone(&key),
            KeyEntry {
                envelope,
                hash: None,
            },
        ) {
            Some(old) => {
                if let Some(h) = old.hash {
                    self.digests[bucket] ^= h;
                }
            }
            None => self.buckets[bucket].push(Arc::clone(&key)),
        }
        self.dirty.insert(key);
    }

    fn refresh(&mut self) {
        for key in self.dirty.drain() {
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.hash.is_none() {
                let h = entry_hash(&key, &entry.envelope);
                entry.hash = Some(h);
                let bucket = (name_hash(&key) % self.buckets.len() as u64) as usize;
                self.digests[bucket] ^= h;
            }
        }
    }

    /// Every bucket's digest (0: the bucket is empty).
    pub(crate) fn digests(&mut self) -> &[u64] {
        self.refresh();
        &self.digests
    }

    /// The keys of `bucket` with their hashes.
    pub(crate) fn bucket_hashes(&mut self, bucket: usize) -> Vec<(Arc<str>, u64)> {
        self.refresh();
        self.buckets[bucket]
            .iter()
            .map(|k| (Arc::clone(k), self.entries[k].hash.unwrap_or(0)))
            .collect()
    }

    /// The keys of `bucket`.
    pub(crate) fn bucket_keys(&self, bucket: usize) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.buckets[bucket].iter()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Envelope)> + '_ {
        self.entries.iter().map(|(k, e)| (k, &e.envelope))
    }
}
