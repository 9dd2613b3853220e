//! The replicator: a sans-IO state machine that shares a node's CRDT keys
//! with the other members of its cluster.
//!
//! ```text
//!   update / get (typed Key<T>, Consistency, timeout)    value::<T>(key)
//!        │                                                   ▲
//!   ─────▼───────────────────────────────────────────────────┼──────────
//!   key table (hashed into buckets, a digest each) · delta log
//!   requests waiting for acks/replies · pruning markers · chunk reassembly
//!   ─────────────────────────────────────────────────────────────────────
//!   handle_packet / handle_timeout / set_members        poll_transmit,
//!   (packets, time and the member list in)               poll_event,
//!                                                        poll_store,
//!                                                        poll_timeout out
//! ```
//!
//! **How state spreads.**
//! * *Deltas.* Every update's delta gets a sequence number in the delta log.
//!   Each peer is sent the join of the deltas it has not acknowledged (one
//!   group in flight per peer, up to `max_delta_bytes`, sent again with
//!   back-off until acknowledged; the next group leaves on the ack). The
//!   writer sends its deltas to every member directly and a receiver never
//!   relays them, so nothing is sent back to where it came from; a receiver
//!   merges only what it did not already have (a delta its state includes
//!   changes nothing: no event, no store write). The log keeps what some
//!   peer has not acknowledged, at most `max_delta_log` deltas; a peer that
//!   falls further behind is caught up by anti-entropy.
//! * *Anti-entropy* (the fallback, and how joiners catch up): every
//!   `gossip_interval` a random peer is sent the digests of the key
//!   buckets; for buckets that differ the peer answers with its key hashes
//!   (or, for buckets the asker has nothing in, its states outright); the
//!   asker sends its states of the keys that differ and names the keys it
//!   lacks; the peer merges them and answers with what the asker lacks of
//!   its states ([`Crdt::difference`]) and the wanted keys. A round carries
//!   at most `max_buckets_per_round` buckets and `max_round_bytes` of
//!   states, and the next round starts as soon as one ends while buckets
//!   still differ, so a joiner holding most of the keys receives only the
//!   rest, and one holding none receives every key without any message
//!   over the limits.
//! * *Consistency levels.* An update at `Majority`, `All` or `Count(n)` is
//!   also sent to every peer at once as a write; it completes when that many
//!   members (this one included) merged it, or fails with
//!   [`UpdateError::Timeout`] (it is still applied here and still spreads).
//!   A get at a level above `Local` asks every peer for its state and
//!   completes once that many members' states are merged here.
//!
//! **Guarantees.** Members that stop updating converge to the same state of
//! every key (the join of all updates) under loss, duplication, reordering
//! and partitions that heal; a durable key's update at any level completes
//! only once the store holds it; packets are never larger than
//! `max_packet`; refused input (another cluster, a non-member, an unknown
//! type, a state from the future) is logged, counted and changes nothing.
//!
//! **Driving it.** Call `set_members` with the cluster's members whenever
//! they change (every member not down: a member that leaves the list is
//! gone for good and its entries get pruned), `handle_packet` for each
//! packet, `handle_timeout` when `poll_timeout` passes, and after each call
//! drain `poll_transmit`, `poll_event` and `poll_store` (write the batch,
//! then `handle_stored`).
//!
//! [`Crdt::difference`]: crate::Crdt::difference

mod anti_entropy;
mod chunks;
mod config;
mod deltas;
mod durable;
mod envelope;
mod error;
mod keys;
mod pruning;
mod requests;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::SeedableRng;

pub use chunks::{ChunkError, MAX_TRANSFERS_PER_PEER};
pub use config::{ConfigError, ReplicatorConfig};
pub use durable::{decode_record, encode_record, StoreBatch, RECORD_VERSION};
pub use envelope::{Pruning, PruningMarkers};
pub use error::{EntryError, GetError, PacketError, RecordError, UpdateError};

use crate::crdt::{Crdt, ReplicaId};
use crate::registry::{type_tag, Registry, Typed};
use chunks::Reassembly;
use deltas::DeltaLog;
use envelope::Envelope;
use keys::KeyTable;
use requests::Requests;
use wire::{Body, Packet, WireEntry};

/// A typed key: a name and the CRDT type its state has.
#[derive(Debug)]
pub struct Key<T> {
    name: Arc<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        Self {
            name: Arc::clone(&self.name),
            _type: PhantomData,
        }
    }
}

impl<T: Crdt> Key<T> {
    /// The key `name` of type `T`.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self {
            name: name.into(),
            _type: PhantomData,
        }
    }

    /// Its name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }
}

/// How many members an update must reach, or a get must hear from, before
/// it completes (this member counts as one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    /// This member alone.
    Local,
    /// More than half of the members.
    Majority,
    /// Every member.
    All,
    /// `n` members.
    Count(usize),
}

impl Consistency {
    fn needed(self, members: usize) -> usize {
        match self {
            Consistency::Local => 1,
            Consistency::Majority => members / 2 + 1,
            Consistency::All => members,
            Consistency::Count(n) => n.max(1),
        }
    }
}

/// A request's number, in the events that end it.
pub type RequestId = u64;

/// What the replicator reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The state of `key` changed (an update here, or something merged).
    /// Changes between two polls are reported once.
    Changed {
        /// The key.
        key: Arc<str>,
    },
    /// An update ended.
    UpdateDone {
        /// The request.
        request: RequestId,
        /// The key.
        key: Arc<str>,
        /// Whether it reached the members its level asked for.
        result: Result<(), UpdateError>,
    },
    /// A get ended; read the merged state with [`Replicator::value`].
    GetDone {
        /// The request.
        request: RequestId,
        /// The key.
        key: Arc<str>,
        /// Whether enough members answered.
        result: Result<(), GetError>,
    },
}

/// A packet for a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The member's address.
    pub to: Arc<str>,
    /// The packet (at most `max_packet` bytes).
    pub packet: Bytes,
}

/// Counters of a replicator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicatorStats {
    /// Keys held.
    pub keys: usize,
    /// Members counted (this one included).
    pub members: usize,
    /// Packets sent.
    pub packets_sent: u64,
    /// Bytes of packets sent.
    pub bytes_sent: u64,
    /// Of them, bytes of delta packets (and their acks).
    pub delta_bytes_sent: u64,
    /// Of them, bytes of anti-entropy packets.
    pub anti_entropy_bytes_sent: u64,
    /// Of them, bytes of writes, reads and their answers.
    pub request_bytes_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// Bytes of packets received.
    pub bytes_received: u64,
    /// Packets refused whole.
    pub packets_refused: u64,
    /// Key states refused.
    pub entries_refused: u64,
    /// Key states merged that changed something.
    pub entries_merged: u64,
    /// Anti-entropy rounds started.
    pub anti_entropy_rounds: u64,
    /// Prunings this member performed.
    pub prunings_performed: u64,
}

#[derive(Debug, Clone, Copy)]
enum Traffic {
    Delta,
    AntiEntropy,
    Request,
}

#[derive(Debug)]
struct Peer {
    /// Its replica in its current life, once a packet told it.
    replica: Option<ReplicaId>,
    /// The highest delta sequence number it acknowledged.
    acked: u64,
    /// The group in flight: its last sequence number and when it left.
    in_flight: Option<(u64, Instant)>,
    /// How long to wait for its ack before sending the group again.
    backoff: Duration,
    /// It fell behind the delta log, or is new: catch it up by
    /// anti-entropy first, keys that change right now included.
    needs_sync: bool,
    /// A full anti-entropy round with it ended since it needed one: keys
    /// changing right now are left to the deltas.
    synced: bool,
    /// Since when a round this member started with it is in flight.
    asking: Option<Instant>,
    /// Since when a round it started with this member is being answered.
    answering: Option<Instant>,
}

/// What became of a state handed to [`Replicator::merge_entry`].
enum Merged {
    /// Merged; the local state changed. The incoming state.
    Changed(Envelope),
    /// Merged; the local state already included it.
    Unchanged(Envelope),
    /// Held until its type is registered.
    Held,
}

/// A node's replicator. See the [module docs](self).
#[derive(Debug)]
pub struct Replicator {
    config: ReplicatorConfig,
    cluster: u64,
    address: Arc<str>,
    replica: ReplicaId,
    registry: Registry,
    /// States of types not registered yet, by tag (`true`: a durable
    /// record), merged when the type is registered.
    unregistered: HashMap<u64, Vec<(bool, WireEntry)>>,
    /// How many states and bytes `unregistered` holds.
    unregistered_held: (usize, usize),
    keys: KeyTable,
    peers: BTreeMap<Arc<str>, Peer>,
    replicas: HashMap<ReplicaId, Arc<str>>,
    /// Replicas gone for good whose entries may still need pruning.
    removed: BTreeSet<ReplicaId>,
    /// Every replica gone for good: packets from them are refused.
    gone: HashSet<ReplicaId>,
    /// Keys carrying a pruning marker still in its first phase.
    pruning_keys: BTreeSet<Arc<str>>,
    log: DeltaLog,
    requests: Requests,
    reassembly: Reassembly,
    durable_dirty: BTreeSet<Arc<str>>,
    /// The store batch being collected.
    next_batch: u64,
    /// The highest batch the store holds.
    stored_batch: u64,
    /// Write acks held until their batch is stored.
    held: VecDeque<(u64, Arc<str>, Body)>,
    rng: SmallRng,
    next_delta: Instant,
    next_gossip: Instant,
    next_transfer: u64,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    changed: BTreeSet<Arc<str>>,
    /// Keys changed lately, with when: anti-entropy leaves them to the
    /// deltas (their digests differ while deltas are in flight).
    hot: HashMap<Arc<str>, Instant>,
    /// The latest time handed in.
    now: Instant,
    stats: ReplicatorStats,
}

impl Replicator {
    /// A replicator for the member at `address` in the life that started
    /// with incarnation `life` (its replica id is derived from both; a
    /// restarted node, whose incarnation is new, is a new replica), started
    /// at `now`.
    pub fn new(
        config: ReplicatorConfig,
        address: impl Into<Arc<str>>,
        life: u64,
        now: Instant,
    ) -> Self {
        let address = address.into();
        let replica = ReplicaId::of_member(&address, life);
        let rng = SmallRng::seed_from_u64(config.rng_seed ^ replica.0);
        Self {
            cluster: wire::cluster_hash(&config.cluster),
            keys: KeyTable::new(config.buckets),
            reassembly: Reassembly::new(config.max_transfer, config.reassembly_timeout),
            requests: Requests::default(),
            next_delta: now + config.delta_interval,
            next_gossip: now + config.gossip_interval,
            config,
            address,
            replica,
            registry: Registry::with_builtins(),
            unregistered: HashMap::new(),
            unregistered_held: (0, 0),
            peers: BTreeMap::new(),
            replicas: HashMap::new(),
            removed: BTreeSet::new(),
            gone: HashSet::new(),
            pruning_keys: BTreeSet::new(),
            log: DeltaLog::default(),
            durable_dirty: BTreeSet::new(),
            next_batch: 1,
            stored_batch: 0,
            held: VecDeque::new(),
            rng,
            next_transfer: 1,
            out: VecDeque::new(),
            events: VecDeque::new(),
            changed: BTreeSet::new(),
            hot: HashMap::new(),
            now,
            stats: ReplicatorStats::default(),
        }
    }

    /// This member's replica id (what mutators take).
    pub fn replica(&self) -> ReplicaId {
        self.replica
    }

    /// This member's address.
    pub fn address(&self) -> &Arc<str> {
        &self.address
    }

    /// The settings.
    pub fn config(&self) -> &ReplicatorConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> ReplicatorStats {
        ReplicatorStats {
            keys: self.keys.len(),
            members: self.member_count(),
            ..self.stats
        }
    }

    /// Registers `T`, so states of it from peers and from the durable store
    /// are understood (using a key of `T` registers it too). States of `T`
    /// held until now (received, or recovered, before the registration)
    /// are merged now.
    ///
    /// Register every type a member replicates when it starts: until then
    /// it holds what it receives of the type (up to `max_unregistered`
    /// states) but cannot merge it, so it does not acknowledge writes of it
    /// nor answer reads of it.
    pub fn register<T: Crdt>(&mut self) {
        self.registry.register::<T>();
        let Some(held) = self.unregistered.remove(&type_tag::<T>()) else {
            return;
        };
        for (from_store, entry) in held {
            self.unregistered_held.0 -= 1;
            self.unregistered_held.1 -= entry.data.len();
            let result = if from_store {
                self.recover_entry(&entry)
            } else {
                self.merge_entry(&entry).map(|_| ()).map_err(Into::into)
            };
            if let Err(error) = result {
                self.stats.entries_refused += 1;
                tracing::warn!(target: "plexus::data", %error, "a state held until its type was registered was refused");
            }
        }
    }

    /// Holds a state of a type not registered yet; false if the bounds are
    /// reached.
    fn hold_unregistered(&mut self, from_store: bool, entry: &WireEntry) -> bool {
        let (count, bytes) = self.unregistered_held;
        if count >= self.config.max_unregistered
            || bytes + entry.data.len() > self.config.max_transfer
        {
            return false;
        }
        self.unregistered_held = (count + 1, bytes + entry.data.len());
        self.unregistered
            .entry(entry.tag)
            .or_default()
            .push((from_store, entry.clone()));
        true
    }

    /// Replaces the member list: the address of every member of the
    /// cluster that is not down (this member's may be among them). A
    /// member's replica is learned from its packets; a member missing from
    /// the list, or heard from as a new replica, is gone for good in its
    /// former life: that replica's packets are refused from then on and its
    /// entries are pruned.
    pub fn set_members(&mut self, now: Instant, members: &[Arc<str>]) {
        let _ = now;
        let wanted: BTreeSet<&Arc<str>> = members.iter().filter(|a| **a != self.address).collect();
        let gone: Vec<Arc<str>> = self
            .peers
            .keys()
            .filter(|a| !wanted.contains(a))
            .cloned()
            .collect();
        for address in gone {
            if let Some(peer) = self.peers.remove(&address) {
                if let Some(r) = peer.replica {
                    self.retire(r);
                }
            }
        }
        for address in wanted {
            if !self.peers.contains_key(address) {
                let peer = self.new_peer(None);
                self.peers.insert(Arc::clone(address), peer);
            }
        }
        self.log.gc(self.peers.values().map(|p| p.acked));
    }

    fn new_peer(&self, replica: Option<ReplicaId>) -> Peer {
        Peer {
            replica,
            acked: self.log.last_seq(),
            in_flight: None,
            backoff: self.config.delta_interval * 2,
            needs_sync: true,
            synced: false,
            asking: None,
            answering: None,
        }
    }

    /// A replica's life ended: refuse it from now on, prune its entries.
    fn retire(&mut self, replica: ReplicaId) {
        self.replicas.remove(&replica);
        self.reassembly.forget(replica);
        self.removed.insert(replica);
        self.gone.insert(replica);
    }

    /// Starts a new life (after this member was downed and joins again
    /// with incarnation `life`): a new replica id, so the others prune the
    /// former one instead of mistaking the two. The keys are kept.
    pub fn renew(&mut self, life: u64) {
        let old = self.replica;
        self.replica = ReplicaId::of_member(&self.address, life);
        if self.replica != old {
            self.removed.insert(old);
            self.gone.insert(old);
        }
    }

    /// The address of the sender of a packet from `replica` claiming to be
    /// `address`: learns the replica of a member, retires a former life.
    fn sender(&mut self, replica: ReplicaId, address: &str) -> Result<Arc<str>, PacketError> {
        let refused = || PacketError::NotAMember {
            address: address.to_owned(),
            replica,
        };
        if self.gone.contains(&replica) {
            return Err(refused());
        }
        let Some((address, peer)) = self.peers.get_key_value(address) else {
            return Err(refused());
        };
        let address = Arc::clone(address);
        match peer.replica {
            Some(r) if r == replica => {}
            None => {
                // First word from this member: what was sent to it stands.
                if let Some(peer) = self.peers.get_mut(&address) {
                    peer.replica = Some(replica);
                }
                self.replicas.insert(replica, Arc::clone(&address));
            }
            Some(old) => {
                // A new life at this address: the former one is gone.
                self.retire(old);
                let peer = self.new_peer(Some(replica));
                self.peers.insert(Arc::clone(&address), peer);
                self.replicas.insert(replica, Arc::clone(&address));
            }
        }
        Ok(address)
    }

    /// Members (this one included) the replicator counts.
    pub fn member_count(&self) -> usize {
        self.peers.len() + 1
    }

    /// Applies `modify` to the state of `key` (created empty if new) and
    /// spreads its delta, which `modify` returns: mutators of this crate's
    /// types return their delta, so `|c| c.increment(replica, 1)` is a
    /// whole update. [`Event::UpdateDone`] ends it.
    ///
    /// # Errors
    ///
    /// [`UpdateError`] when it cannot start (the key's type, limits, too few
    /// members for the level); nothing is applied then.
    pub fn update<T: Crdt>(
        &mut self,
        now: Instant,
        key: &Key<T>,
        level: Consistency,
        timeout: Duration,
        modify: impl FnOnce(&mut T) -> T,
    ) -> Result<RequestId, UpdateError> {
        self.register::<T>();
        self.now = self.now.max(now);
        let name = &key.name;
        if name.len() > wire::MAX_KEY {
            return Err(UpdateError::KeyTooLong {
                key: name.to_string(),
                limit: wire::MAX_KEY,
            });
        }
        let needed = level.needed(self.member_count());
        if needed > self.member_count() {
            return Err(UpdateError::NotEnoughMembers {
                key: name.to_string(),
                needed,
                members: self.member_count(),
            });
        }
        if needed > 1 && self.requests.len() >= self.config.max_requests {
            return Err(UpdateError::TooManyRequests {
                key: name.to_string(),
                limit: self.config.max_requests,
            });
        }
        match self.keys.get(name) {
            Some(env) if env.data.tag() != type_tag::<T>() => {
                return Err(UpdateError::TypeMismatch {
                    key: name.to_string(),
                    expected: std::any::type_name::<T>(),
                    found: env.data.type_name(),
                })
            }
            Some(_) => {}
            None if self.keys.len() >= self.config.max_keys => {
                return Err(UpdateError::TooManyKeys {
                    key: name.to_string(),
                    limit: self.config.max_keys,
                })
            }
            None => self.keys.insert(
                Arc::clone(name),
                Envelope::new(Box::new(Typed(T::default()))),
            ),
        }
        let envelope = self.keys.get_mut(name).expect("present");
        let state = &mut envelope
            .data
            .as_any_mut()
            .downcast_mut::<Typed<T>>()
            .expect("tag checked")
            .0;
        let delta = Envelope::new(Box::new(Typed(modify(state))));
        let entry = keys::encode_entry(name, &delta);
        if !delta.data.is_bottom() {
            self.log.append(Arc::clone(name), delta, entry.data.len());
            self.note_changed(name);
        }
        let request = self.requests.next_id();
        let durable_batch = self.store_wait(name);
        let peers: Vec<Arc<str>> = if needed > 1 {
            self.peers.keys().cloned().collect()
        } else {
            Vec::new()
        };
        for to in &peers {
            self.send(
                to,
                Body::Write {
                    request,
                    entry: entry.clone(),
                },
                Traffic::Request,
            );
        }
        self.requests.start_update(
            request,
            Arc::clone(name),
            needed,
            now + timeout,
            timeout,
            durable_batch,
            (needed > 1).then_some(entry),
        );
        self.complete_requests(now);
        Ok(request)
    }

    /// Reads `key` at `level`: at `Local` it ends at once; above, it asks
    /// every peer for its state and ends ([`Event::GetDone`]) once enough
    /// members' states are merged here. Read the state with
    /// [`Replicator::value`] then.
    ///
    /// # Errors
    ///
    /// [`GetError`] when it cannot start.
    pub fn get<T: Crdt>(
        &mut self,
        now: Instant,
        key: &Key<T>,
        level: Consistency,
        timeout: Duration,
    ) -> Result<RequestId, GetError> {
        self.register::<T>();
        let name = &key.name;
        if let Some(env) = self.keys.get(name) {
            if env.data.tag() != type_tag::<T>() {
                return Err(GetError::TypeMismatch {
                    key: name.to_string(),
                    expected: std::any::type_name::<T>(),
                    found: env.data.type_name(),
                });
            }
        }
        let needed = level.needed(self.member_count());
        if needed > self.member_count() {
            return Err(GetError::NotEnoughMembers {
                key: name.to_string(),
                needed,
                members: self.member_count(),
            });
        }
        if needed > 1 && self.requests.len() >= self.config.max_requests {
            return Err(GetError::TooManyRequests {
                key: name.to_string(),
                limit: self.config.max_requests,
            });
        }
        let request = self.requests.next_id();
        if needed > 1 {
            let peers: Vec<Arc<str>> = self.peers.keys().cloned().collect();
            for to in &peers {
                self.send(
                    to,
                    Body::Read {
                        request,
                        key: name.to_string(),
                    },
                    Traffic::Request,
                );
            }
        }
        self.requests
            .start_get(request, Arc::clone(name), needed, now + timeout, timeout);
        self.complete_requests(now);
        Ok(request)
    }

    /// The state of `key` here, `None` if the key is unknown.
    ///
    /// # Errors
    ///
    /// [`GetError::TypeMismatch`] if the key holds another type.
    pub fn value<T: Crdt>(&self, key: &Key<T>) -> Result<Option<&T>, GetError> {
        let Some(env) = self.keys.get(&key.name) else {
            return Ok(None);
        };
        match env.data.as_any().downcast_ref::<Typed<T>>() {
            Some(t) => Ok(Some(&t.0)),
            None => Err(GetError::TypeMismatch {
                key: key.name.to_string(),
                expected: std::any::type_name::<T>(),
                found: env.data.type_name(),
            }),
        }
    }

    /// Names of every key held, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.keys.iter().map(|(k, _)| k)
    }

    /// Handles a packet from a member.
    ///
    /// # Errors
    ///
    /// [`PacketError`] if the packet is refused whole (it changed nothing).
    /// Single key states refused inside an accepted packet are logged and
    /// counted ([`ReplicatorStats::entries_refused`]), not returned.
    pub fn handle_packet(&mut self, now: Instant, bytes: &[u8]) -> Result<(), PacketError> {
        self.now = self.now.max(now);
        self.stats.packets_received += 1;
        self.stats.bytes_received += bytes.len() as u64;
        let result = self.handle_packet_inner(now, bytes, 0);
        if result.is_err() {
            self.stats.packets_refused += 1;
        }
        self.complete_requests(now);
        result
    }

    fn handle_packet_inner(
        &mut self,
        now: Instant,
        bytes: &[u8],
        depth: u8,
    ) -> Result<(), PacketError> {
        let packet = Packet::decode(bytes)?;
        if packet.cluster != self.cluster {
            return Err(PacketError::OtherCluster);
        }
        let from = packet.from;
        let address = self.sender(from, &packet.from_address)?;
        match packet.body {
            Body::Chunk {
                transfer,
                index,
                count,
                bytes,
            } => {
                if depth > 0 {
                    return Err(wire::WireError::Malformed.into());
                }
                if let Some(whole) = self
                    .reassembly
                    .add(now, from, transfer, index, count, bytes)?
                {
                    return self.handle_packet_inner(now, &whole, depth + 1);
                }
                Ok(())
            }
            Body::Delta { to_seq, entries } => {
                for entry in &entries {
                    self.merge_logged(entry, &address);
                }
                self.send(&address, Body::DeltaAck { seq: to_seq }, Traffic::Delta);
                Ok(())
            }
            Body::DeltaAck { seq } => {
                self.on_delta_ack(now, &address, seq);
                Ok(())
            }
            Body::Write { request, entry } => {
                let merged = self.merge_logged(&entry, &address);
                let ack = Body::WriteAck { request, merged };
                match self.store_wait(&entry.key).filter(|_| merged) {
                    Some(batch) => self.held.push_back((batch, address, ack)),
                    None => self.send(&address, ack, Traffic::Request),
                }
                Ok(())
            }
            Body::WriteAck { request, merged } => {
                if merged {
                    self.requests.answered(request, from);
                } else {
                    self.requests.refused(request, from);
                }
                Ok(())
            }
            Body::Read { request, key } => {
                let entry = self.keys.get(&key).map(|env| keys::encode_entry(&key, env));
                self.send(
                    &address,
                    Body::ReadReply {
                        request,
                        key,
                        entry,
                    },
                    Traffic::Request,
                );
                Ok(())
            }
            Body::ReadReply { request, entry, .. } => {
                let ok = match &entry {
                    Some(e) => self.merge_logged(e, &address),
                    None => true,
                };
                if ok {
                    self.requests.answered(request, from);
                }
                Ok(())
            }
            Body::Digests { buckets, digests } => self.on_digests(now, &address, buckets, &digests),
            Body::Keys {
                buckets,
                keys,
                pushed,
                more,
            } => self.on_keys(now, &address, buckets, keys, &pushed, more),
            Body::States {
                entries,
                want,
                more,
            } => {
                self.on_states(&address, &entries, want, more);
                Ok(())
            }
            Body::Reply { entries, more } => {
                self.on_reply(now, &address, &entries, more);
                Ok(())
            }
        }
    }

    /// Merges `entry`, logging and counting a refusal; `true` if it was
    /// merged (changing something or not), `false` if refused or only held.
    fn merge_logged(&mut self, entry: &WireEntry, from: &Arc<str>) -> bool {
        match self.merge_entry(entry) {
            Ok(Merged::Changed(_) | Merged::Unchanged(_)) => true,
            Ok(Merged::Held) => false,
            Err(error) => {
                self.stats.entries_refused += 1;
                tracing::warn!(target: "plexus::data", %error, from = %from, "replicated state refused");
                false
            }
        }
    }

    /// Decodes, checks and merges one key's state (or holds it, if its
    /// type is not registered yet).
    fn merge_entry(&mut self, entry: &WireEntry) -> Result<Merged, EntryError> {
        let key = entry.key.as_str();
        let data = match self.registry.decode(entry.tag, &entry.data) {
            None => {
                if let Some(env) = self.keys.get(key) {
                    return Err(EntryError::TypeMismatch {
                        key: key.to_owned(),
                        have: env.data.type_name(),
                    });
                }
                if self.hold_unregistered(false, entry) {
                    return Ok(Merged::Held);
                }
                return Err(EntryError::UnknownType {
                    key: key.to_owned(),
                    tag: entry.tag,
                });
            }
            Some(Err(source)) => {
                return Err(EntryError::Decode {
                    key: key.to_owned(),
                    source,
                })
            }
            Some(Ok(d)) => d,
        };
        let incoming = Envelope {
            data,
            pruning: entry.pruning.clone(),
        };
        let mine = match self.keys.get(key) {
            Some(env) if env.data.tag() != entry.tag => {
                return Err(EntryError::TypeMismatch {
                    key: key.to_owned(),
                    have: env.data.type_name(),
                })
            }
            Some(env) => env.data.version_of(self.replica),
            None => 0,
        };
        let claimed = incoming.data.version_of(self.replica);
        if claimed > mine {
            return Err(EntryError::FromTheFuture {
                key: key.to_owned(),
                claimed,
                have: mine,
            });
        }
        let changed = match self.keys.get(key) {
            Some(_) => self.keys.get_mut(key).expect("present").merge(&incoming),
            None => {
                if self.keys.len() >= self.config.max_keys {
                    return Err(EntryError::TooManyKeys {
                        key: key.to_owned(),
                        limit: self.config.max_keys,
                    });
                }
                let mut env = Envelope::new(incoming.data.bottom());
                env.merge(&incoming);
                self.keys.insert(Arc::from(key), env);
                true
            }
        };
        if !changed {
            return Ok(Merged::Unchanged(incoming));
        }
        self.stats.entries_merged += 1;
        let name = self.keys.key_arc(key).expect("present");
        self.note_changed(&name);
        self.after_merge(&name);
        Ok(Merged::Changed(incoming))
    }

    fn note_changed(&mut self, key: &Arc<str>) {
        self.changed.insert(Arc::clone(key));
        self.hot.insert(Arc::clone(key), self.now);
        if self.config.is_durable(key) {
            self.durable_dirty.insert(Arc::clone(key));
        }
    }

    /// The store batch that must be written before a change of `key` is
    /// durable: the one collecting if the key changed since the last batch
    /// was handed out, else the one being written, if any.
    fn store_wait(&self, key: &str) -> Option<u64> {
        if !self.config.is_durable(key) {
            return None;
        }
        if self.durable_dirty.contains(key) {
            Some(self.next_batch)
        } else {
            let handed_out = self.next_batch - 1;
            (handed_out > self.stored_batch).then_some(handed_out)
        }
    }

    fn send(&mut self, to: &Arc<str>, body: Body, traffic: Traffic) {
        let encoded = Packet {
            cluster: self.cluster,
            from: self.replica,
            from_address: self.address.to_string(),
            body,
        }
        .encode();
        let transfer = self.next_transfer;
        if encoded.len() > self.config.max_packet {
            self.next_transfer += 1;
        }
        for packet in wire::split(encoded, self.config.max_packet, transfer, |body| Packet {
            cluster: self.cluster,
            from: self.replica,
            from_address: self.address.to_string(),
            body,
        }) {
            let n = packet.len() as u64;
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += n;
            match traffic {
                Traffic::Delta => self.stats.delta_bytes_sent += n,
                Traffic::AntiEntropy => self.stats.anti_entropy_bytes_sent += n,
                Traffic::Request => self.stats.request_bytes_sent += n,
            }
            self.out.push_back(Transmit {
                to: Arc::clone(to),
                packet,
            });
        }
    }

    /// Handles the passing of `poll_timeout`'s deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if now >= self.next_delta {
            self.next_delta = now + self.config.delta_interval;
            self.send_deltas(now);
            self.resend_requests();
        }
        if now >= self.next_gossip {
            self.next_gossip = now + self.config.gossip_interval;
            let window = self.hot_window();
            self.hot
                .retain(|_, at| now.saturating_duration_since(*at) < window);
            self.start_round(now, None);
            self.prune(now);
        }
        self.reassembly.expire(now);
        self.complete_requests(now);
    }

    /// The next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            Some(self.next_delta),
            Some(self.next_gossip),
            self.requests.next_deadline(),
            self.reassembly.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        let key = self.changed.pop_first()?;
        Some(Event::Changed { key })
    }

    fn complete_requests(&mut self, now: Instant) {
        let stored = self.stored_batch;
        let replicas = &self.replicas;
        let is_member = |r: ReplicaId| replicas.contains_key(&r);
        for event in self.requests.complete(now, stored, &is_member) {
            self.events.push_back(event);
        }
    }
}
