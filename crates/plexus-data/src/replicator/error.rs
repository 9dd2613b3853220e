//! The replicator's errors, one type per operation.

use std::time::Duration;

use super::chunks::ChunkError;
use super::wire::WireError;
use crate::crdt::ReplicaId;
use crate::registry::{DecodeError, TypeTag};

/// Why an update failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// The key holds another type.
    #[error("update {key}: the key holds a {found}, not a {expected}")]
    TypeMismatch {
        /// The key.
        key: String,
        /// The type the update is for.
        expected: &'static str,
        /// The type the key holds.
        found: &'static str,
    },
    /// The key name is over the limit.
    #[error("update {key:.64}...: key names are at most {limit} bytes")]
    KeyTooLong {
        /// The key.
        key: String,
        /// The limit.
        limit: usize,
    },
    /// The replicator holds `max_keys` keys already.
    #[error("update {key}: this replicator holds its limit of {limit} keys")]
    TooManyKeys {
        /// The key.
        key: String,
        /// The configured `max_keys`.
        limit: usize,
    },
    /// Too many requests wait already.
    #[error("update {key}: {limit} requests are waiting already")]
    TooManyRequests {
        /// The key.
        key: String,
        /// The configured `max_requests`.
        limit: usize,
    },
    /// The consistency level asks for more members than the cluster has.
    #[error("update {key}: the write needs {needed} members, the cluster has {members}")]
    NotEnoughMembers {
        /// The key.
        key: String,
        /// Members the consistency level needs.
        needed: usize,
        /// Members there are.
        members: usize,
    },
    /// The replicator stopped (its node or driver is gone).
    #[error("update {key}: the replicator is stopped")]
    Stopped {
        /// The key.
        key: String,
    },
    /// Not enough members acknowledged in time. The update is applied
    /// locally and still spreads; it is only not known to have reached the
    /// members the level asked for.
    #[error("update {key}: {acked} of {needed} members acknowledged within {timeout:?}{}", refused_hint(*refused))]
    Timeout {
        /// The key.
        key: String,
        /// Members (this one included) that acknowledged.
        acked: usize,
        /// Members that answered they could not merge it (most often: they
        /// have not registered the key's type).
        refused: usize,
        /// Members the consistency level needs.
        needed: usize,
        /// The timeout.
        timeout: Duration,
    },
}

/// Why a get failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GetError {
    /// The key holds another type.
    #[error("get {key}: the key holds a {found}, not a {expected}")]
    TypeMismatch {
        /// The key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The type the key holds.
        found: &'static str,
    },
    /// Too many requests wait already.
    #[error("get {key}: {limit} requests are waiting already")]
    TooManyRequests {
        /// The key.
        key: String,
        /// The configured `max_requests`.
        limit: usize,
    },
    /// The consistency level asks for more members than the cluster has.
    #[error("get {key}: the read needs {needed} members, the cluster has {members}")]
    NotEnoughMembers {
        /// The key.
        key: String,
        /// Members the consistency level needs.
        needed: usize,
        /// Members there are.
        members: usize,
    },
    /// The replicator stopped (its node or driver is gone).
    #[error("get {key}: the replicator is stopped")]
    Stopped {
        /// The key.
        key: String,
    },
    /// Not enough members answered in time.
    #[error("get {key}: {replies} of {needed} members answered within {timeout:?}")]
    Timeout {
        /// The key.
        key: String,
        /// Members (this one included) that answered.
        replies: usize,
        /// Members the consistency level needs.
        needed: usize,
        /// The timeout.
        timeout: Duration,
    },
}

/// Why a packet was refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// The bytes are not a replicator packet.
    #[error("replicator packet refused: {0}")]
    Wire(#[from] WireError),
    /// The sender belongs to another cluster.
    #[error("replicator packet refused: the sender belongs to another cluster")]
    OtherCluster,
    /// The sender is not a member this replicator knows (or a former life
    /// of one).
    #[error("replicator packet refused: {address} (replica {replica}) is not a member of the cluster (yet, or any more)")]
    NotAMember {
        /// The address the sender claimed.
        address: String,
        /// Its replica.
        replica: ReplicaId,
    },
    /// A chunk was refused.
    #[error("replicator packet refused: {0}")]
    Chunk(#[from] ChunkError),
    /// The sender hashes keys into another number of buckets.
    #[error("replicator packet refused: digests of {theirs} buckets, this member uses {ours} (set `buckets` alike on every member)")]
    Buckets {
        /// The sender's count.
        theirs: u32,
        /// This replicator's count.
        ours: u32,
    },
}

/// Why one key's state in a packet was refused (the rest of the packet is
/// still merged). Logged and counted in
/// [`ReplicatorStats::entries_refused`](super::ReplicatorStats).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// The state's type is not registered here.
    #[error("state of {key} refused: its type (tag {tag:016x}) is not registered on this member")]
    UnknownType {
        /// The key.
        key: String,
        /// The type tag.
        tag: TypeTag,
    },
    /// The key holds another type here.
    #[error("state of {key} refused: the key holds a {have} here")]
    TypeMismatch {
        /// The key.
        key: String,
        /// The type the key holds here.
        have: &'static str,
    },
    /// The bytes are not a valid state of the type.
    #[error("state of {key} refused: {source}")]
    Decode {
        /// The key.
        key: String,
        /// What is wrong.
        source: DecodeError,
    },
    /// The state holds more of this replica's mutations than it ever made.
    #[error("state of {key} refused: it claims version {claimed} of this replica, which is at {have} (a causal context from the future)")]
    FromTheFuture {
        /// The key.
        key: String,
        /// The version claimed.
        claimed: u64,
        /// This replica's own version.
        have: u64,
    },
    /// The replicator holds `max_keys` keys already.
    #[error("state of {key} refused: this replicator holds its limit of {limit} keys")]
    TooManyKeys {
        /// The key.
        key: String,
        /// The configured `max_keys`.
        limit: usize,
    },
}

/// Why a durable record could not be recovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Written by a newer version of Plexus.
    #[error(
        "durable record of {key}: format version {version} is newer than this build reads (1)"
    )]
    NewerVersion {
        /// The key.
        key: String,
        /// The record's version byte.
        version: u8,
    },
    /// Not a record.
    #[error("durable record of {key}: corrupt")]
    Corrupt {
        /// The key.
        key: String,
    },
    /// The state inside is refused.
    #[error("durable record: {0}")]
    Entry(#[from] EntryError),
}

fn refused_hint(refused: usize) -> String {
    if refused == 0 {
        String::new()
    } else {
        format!("; {refused} could not merge it (is its type registered on every member?)")
    }
}
