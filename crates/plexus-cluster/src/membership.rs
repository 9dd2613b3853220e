//! One member's view of the cluster: a sans-IO state machine.
//!
//! [`Membership`] is driven like quinn-proto's `Connection`: feed it packets
//! ([`Membership::handle_packet`]), deadlines
//! ([`Membership::handle_timeout`]) and what the driver learnt about
//! members it could not reach ([`Membership::handle_unreachable`]), then
//! drain [`Membership::poll_transmit`] and [`Membership::poll_event`], then
//! sleep until [`Membership::poll_timeout`]. It never reads a clock, opens a
//! socket or spawns a task; its randomness comes from
//! [`ClusterConfig::rng_seed`]. The same code runs under the tokio driver
//! ([`crate::Cluster`]) and in the simulator (`plexus-sim`).
//!
//! What it does, with the sections of `docs/CLUSTER.md` that explain why:
//! joining through seeds; gossip of claims (piggybacked, plus rounds to a
//! ring neighbour and random members; push-pull with digests); failure
//! detection of its ring predecessors (phi accrual, indirect probes,
//! refutable suspicion, Lifeguard's local health); split-brain resolution;
//! graceful leave; rejoining under a new incarnation after being downed; a
//! restarted member's new life replacing its old one ("Restarts").

mod bootstrap;
mod probe;
mod resolve;
mod sync;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_net::phi::{PhiConfig, PhiThreshold};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::broadcast::Broadcasts;
use crate::config::{ClusterConfig, ConfigError};
use crate::event::{ClusterEvent, DownError, DownReason};
use crate::member::{Member, MemberState};
use crate::ring::{hash64, Ring};
use crate::wire::{Body, DecodeError, Packet, SyncMode};

use probe::{Indirect, PendingPing, Watch};

/// A claim about this member more than this many incarnations ahead of its
/// own cannot come from its own announcements: it is forged, and ignored.
const MAX_SELF_JUMP: u64 = 1 << 20;

/// Most Lifeguard local-health multiplier.
const MAX_HEALTH: u32 = 8;

/// At most one warning per member this often about failures to reach it
/// ([`Membership::handle_unreachable`]); those in between are counted into
/// the next one.
pub const UNREACHABLE_WARN_EVERY: Duration = Duration::from_secs(10);

/// A packet to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The addressee's member address.
    pub to: Arc<str>,
    /// The encoded packet.
    pub packet: Bytes,
    /// The addressee's life ([`Member::life`]) this member last received a
    /// packet from; `None` before it heard from it. A driver that keeps a
    /// route per address (a connection, a forged ref) makes a new one when
    /// this changes: the old route may lead to a process that died at the
    /// address, or wait out its reconnect backoff, while the new process
    /// there has just reached this member.
    pub heard_life: Option<u64>,
}

/// Why a packet was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// Not a membership packet.
    #[error("bad membership packet: {0}")]
    Decode(#[from] DecodeError),
    /// From another cluster (or a member configured with another name).
    #[error("packet from {from} of cluster `{got}`, this is cluster `{expected}`")]
    ForeignCluster {
        /// This member's cluster name.
        expected: Arc<str>,
        /// The packet's.
        got: Arc<str>,
        /// Its sender.
        from: Arc<str>,
    },
}

/// Counters of what a member saw; for tests, benchmarks and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Suspicions this member raised from its own failed probes.
    pub suspicions_raised: u64,
    /// Suspicions of itself it refuted.
    pub refutations: u64,
    /// Times it found itself late to its own deadlines (stalled).
    pub stalls_noticed: u64,
    /// Packets refused (bad bytes or another cluster).
    pub packets_refused: u64,
    /// Claims ignored as forged or over the member bound.
    pub claims_refused: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Join attempts that failed (no admission before the next one, or the
    /// driver could not reach the contact).
    pub join_attempts_failed: u64,
    /// Failures to reach a member the driver reported
    /// ([`Membership::handle_unreachable`]).
    pub unreachable_reports: u64,
    /// Members it saw downed (each [`ClusterEvent::MemberDowned`] it
    /// reported, counted as [`Membership::poll_event`] hands it out).
    pub downings: u64,
    /// Packets answered by telling their sender it is downed or removed
    /// here (it spoke as a live member in that life).
    pub told_gone: u64,
}

/// A record's next step after a fixed delay: leaving → removed after
/// `leave_timeout`, down → removed after `remove_after`, removed →
/// forgotten after `tombstone_ttl`. Entries are
/// queued as records enter those states, so each queue is in deadline
/// order and the next deadline is its front; an entry whose record moved
/// on (another incarnation or state) is skipped when it comes due.
#[derive(Debug, Clone)]
struct Expiry {
    at: Instant,
    address: Arc<str>,
    incarnation: u64,
}

/// An admitted member still joining after this many join retries sends
/// its join again (its admitter may have gone without promoting it).
const ADMITTED_RETRY: u32 = 10;

/// The join attempt under way: whom it went to, and whether its failure
/// was logged already.
#[derive(Debug, Clone)]
struct JoinAttempt {
    to: Arc<str>,
    logged: bool,
}

/// Failures to reach one member, for the rate-limited warning.
#[derive(Debug, Clone)]
struct Unreachability {
    /// When the last warning went out.
    warned_at: Instant,
    /// Failures since.
    since: u64,
}

#[derive(Debug, Clone)]
struct Suspicion {
    incarnation: u64,
    since: Instant,
    /// Members whose own probes failed (independent accusations).
    accusers: BTreeSet<Arc<str>>,
    matured: bool,
}

/// One member's view of the cluster. See the [module docs](self).
#[derive(Debug)]
pub struct Membership {
    config: ClusterConfig,
    name: Arc<str>,
    me: Member,
    started: Instant,
    /// Ever admitted or formed (a member that was never in a cluster may
    /// form one after `form_after`; one that was, never does).
    ever_joined: bool,
    members: BTreeMap<Arc<str>, Member>,
    /// Down records, in the order they are due to become removed.
    removals: VecDeque<Expiry>,
    /// Leaving records, in the order their leave is over: a leaving member
    /// stops `leave_timeout` after it started leaving (before this member
    /// heard of it), whether or not its last word (`Removed`) arrives.
    departures: VecDeque<Expiry>,
    /// Removed records (tombstones), in the order they are due to be
    /// forgotten.
    tombstones: VecDeque<Expiry>,
    broadcasts: Broadcasts,
    rng: SmallRng,
    out: VecDeque<Transmit>,
    events: VecDeque<ClusterEvent>,
    /// Live members (this one included when live) with their point on the
    /// watch ring, sorted by point.
    live: Vec<(u64, Arc<str>)>,
    /// Members leaving (not live, still gossiped to), rebuilt with `live`.
    leaving: Vec<Arc<str>>,
    live_dirty: bool,
    ring: Arc<Ring>,
    ring_dirty: bool,
    watches: BTreeMap<Arc<str>, Watch>,
    pings: BTreeMap<u32, PendingPing>,
    indirect: BTreeMap<u32, Indirect>,
    next_seq: u32,
    /// Lifeguard's local health multiplier: 0 healthy, up to 8.
    health: u32,
    suspicions: BTreeMap<Arc<str>, Suspicion>,
    unreachable: BTreeSet<Arc<str>>,
    /// Last change of the unreachable set or of who is down.
    last_change: Instant,
    phi: PhiConfig,
    suspect_threshold: PhiThreshold,
    next_probe: Instant,
    next_gossip: Instant,
    next_push_pull: Instant,
    next_join: Option<Instant>,
    join_attempts: usize,
    rejoin_at: Option<Instant>,
    /// The split-brain resolver's fresh count under way.
    sweep: Option<resolve::Sweep>,
    /// This life was admitted by a member (it may still be joining).
    admitted: bool,
    /// The up-number a leader promoted this life with before it was
    /// admitted (its join reply lost or late): it goes up with it once
    /// admitted, holding the cluster's view, not before.
    promotion: Option<u64>,
    /// The `last_change` for which this member, not leading its side, left
    /// the sweep to the leader.
    deferred: Option<Instant>,
    /// Members known (up, suspect or leaving) when this member was downed:
    /// whom to rejoin through (its view was dropped with its claims).
    rejoin_contacts: Vec<Arc<str>>,
    leave_at: Option<Instant>,
    /// The member a push was sent to, whose answer gets this member's pages
    /// back if the digests differ.
    pushed_to: Option<Arc<str>>,
    stopped: bool,
    stats: MembershipStats,
    /// Discovered seeds and the bootstrap rule's count of tried ones.
    bootstrap: bootstrap::Bootstrap,
    /// The life of each member this member last received a packet from
    /// (for [`Transmit::heard_life`]); members with a record only.
    heard: BTreeMap<Arc<str>, u64>,
    /// The join attempt under way.
    join_attempt: Option<JoinAttempt>,
    /// Why join contacts could not be reached, as the driver said (while
    /// joining).
    join_causes: BTreeMap<Arc<str>, String>,
    /// Live members the driver could not reach, since the last warning
    /// about each.
    unreachable_log: BTreeMap<Arc<str>, Unreachability>,
}

impl Membership {
    /// A member at `address` (its node's base URI, at most 255 bytes) in its
    /// life `incarnation`, starting at `now`. A restarted member must use a
    /// higher incarnation than its previous life (drivers use the wall
    /// clock in milliseconds). With no seeds (or only itself) it forms a new
    /// cluster at once; otherwise it starts joining. (A member whose seeds
    /// come from a discovery: [`Membership::with_discovery`].)
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for settings that cannot work.
    pub fn new(
        config: ClusterConfig,
        address: impl Into<Arc<str>>,
        incarnation: u64,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Self::build(config, address.into(), incarnation, now, false)
    }

    fn build(
        config: ClusterConfig,
        address: Arc<str>,
        incarnation: u64,
        now: Instant,
        discovering: bool,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if address.is_empty() || address.len() > 255 {
            return Err(ConfigError {
                setting: "address",
                why: "must be 1 to 255 bytes",
            });
        }
        let phi = PhiConfig {
            expected_interval: config.probe_interval,
            window: config.phi_window,
            min_std_dev: config.phi_min_std_dev,
            acceptable_pause: config.phi_acceptable_pause,
        };
        let rng = SmallRng::seed_from_u64(config.rng_seed ^ hash64(&[address.as_bytes()]));
        let mut m = Self {
            name: config.name.as_str().into(),
            me: Member::joining(Arc::clone(&address), incarnation, config.weight),
            started: now,
            ever_joined: false,
            members: BTreeMap::new(),
            removals: VecDeque::new(),
            departures: VecDeque::new(),
            tombstones: VecDeque::new(),
            broadcasts: Broadcasts::default(),
            rng,
            out: VecDeque::new(),
            events: VecDeque::new(),
            live: Vec::new(),
            leaving: Vec::new(),
            live_dirty: true,
            ring: Arc::default(),
            ring_dirty: true,
            watches: BTreeMap::new(),
            pings: BTreeMap::new(),
            indirect: BTreeMap::new(),
            next_seq: 0,
            health: 0,
            suspicions: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            last_change: now,
            suspect_threshold: PhiThreshold::new(config.suspect_phi),
            phi,
            next_probe: now + config.probe_interval,
            next_gossip: now + config.gossip_interval,
            next_push_pull: now + config.push_pull_interval,
            next_join: None,
            join_attempts: 0,
            rejoin_at: None,
            sweep: None,
            admitted: false,
            promotion: None,
            deferred: None,
            rejoin_contacts: Vec::new(),
            leave_at: None,
            pushed_to: None,
            stopped: false,
            stats: MembershipStats::default(),
            bootstrap: bootstrap::Bootstrap::default(),
            heard: BTreeMap::new(),
            join_attempt: None,
            join_causes: BTreeMap::new(),
            unreachable_log: BTreeMap::new(),
            config,
        };
        if m.join_contacts().is_empty() && !discovering {
            m.form(now);
        } else {
            m.next_join = Some(now);
        }
        Ok(m)
    }

    /// This member's own record.
    pub fn local(&self) -> &Member {
        &self.me
    }

    /// The settings.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Every member this one knows of (itself included), tombstones of
    /// down and removed members too, sorted by address.
    pub fn members(&self) -> Vec<Member> {
        let mut all: Vec<Member> = self.members.values().cloned().collect();
        all.push(self.me.clone());
        all.sort_by(|a, b| a.address.cmp(&b.address));
        all
    }

    /// The claim this member holds about `address`.
    pub fn member(&self, address: &str) -> Option<&Member> {
        if *self.me.address == *address {
            return Some(&self.me);
        }
        self.members.get(address)
    }

    /// Members currently unreachable in this member's view.
    pub fn unreachable(&self) -> impl Iterator<Item = &Arc<str>> {
        self.unreachable.iter()
    }

    /// The consistent-hash ring of the members that own keys (rebuilt when
    /// they changed; shared, so a driver hands it on without copying).
    pub fn ring(&mut self) -> &Arc<Ring> {
        if self.ring_dirty {
            let mut owners: Vec<(&Arc<str>, u16)> = self
                .members
                .values()
                .filter(|r| r.state.owns_keys())
                .map(|r| (&r.address, r.weight))
                .collect();
            if self.me.state.owns_keys() {
                owners.push((&self.me.address, self.me.weight));
            }
            self.ring = Arc::new(Ring::new(
                owners,
                self.config.vnodes_per_weight,
                self.config.lookup_probes,
            ));
            self.ring_dirty = false;
        }
        &self.ring
    }

    /// The `replication_factor` members owning `key`.
    pub fn owners(&mut self, key: &[u8]) -> Vec<Arc<str>> {
        let k = self.config.replication_factor;
        self.ring().owners(key, k).into_iter().cloned().collect()
    }

    /// Counters.
    pub fn stats(&self) -> MembershipStats {
        self.stats
    }

    /// Whether the member stopped (it left).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Starts a graceful leave: the member is `Leaving` while it gossips
    /// that for `leave_timeout`, then `Removed` and stopped
    /// ([`ClusterEvent::Left`]). Every other member removes it
    /// `leave_timeout` after it heard of the leave, whether or not the last
    /// word arrives (a partition may cut it off): a leaving member is not
    /// probed, so nothing else would end its record.
    pub fn leave(&mut self, now: Instant) {
        if self.stopped || self.leave_at.is_some() {
            return;
        }
        self.me.state = MemberState::Leaving;
        self.broadcasts.push(self.me.clone());
        self.leave_at = Some(now + self.config.leave_timeout);
        self.next_join = None;
        self.rejoin_at = None;
        self.forget_watching();
        self.live_dirty = true;
        self.ring_dirty = true;
        self.events
            .push_back(ClusterEvent::MemberLeaving(self.me.clone()));
        // Tell a few members at once rather than at the next round.
        self.gossip_round();
    }

    /// Downs `address` on an operator's word (a management call): it is
    /// `Down` here at once, and the claim spreads like the split-brain
    /// resolver's; this member itself goes down (and rejoins if
    /// configured) if it is the one named.
    ///
    /// # Errors
    ///
    /// [`DownError::UnknownMember`] if no member has that address,
    /// [`DownError::NotUp`] if it is down, leaving or removed already.
    pub fn down(&mut self, now: Instant, address: &str) -> Result<(), DownError> {
        if self.stopped {
            return Err(DownError::Stopped);
        }
        tracing::info!(target: "plexus::cluster", member = address, "downed by an operator");
        if *self.me.address == *address {
            self.go_down(now, DownReason::Operator);
            return Ok(());
        }
        let Some(r) = self.members.get_mut(address) else {
            return Err(DownError::UnknownMember(address.to_owned()));
        };
        if !matches!(
            r.state,
            MemberState::Joining | MemberState::Up | MemberState::Suspect
        ) {
            return Err(DownError::NotUp {
                member: address.to_owned(),
                state: r.state,
            });
        }
        r.state = MemberState::Down;
        let m = r.clone();
        self.unreachable.remove(address);
        self.suspicions.remove(address);
        self.entered(now, &m);
        self.broadcasts.push(m.clone());
        // Gossip goes to live members only: the downed one is told at once,
        // its own claim first, so it learns it is down (and rejoins in a
        // new life if configured) rather than running on unaware.
        let to = Arc::clone(&m.address);
        self.events.push_back(ClusterEvent::MemberDowned {
            member: m,
            reason: DownReason::Operator,
        });
        self.membership_changed();
        self.last_change = now;
        self.send(&to, Body::Gossip, Some(&to));
        Ok(())
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClusterEvent> {
        let event = self.events.pop_front();
        if matches!(event, Some(ClusterEvent::MemberDowned { .. })) {
            self.stats.downings += 1;
        }
        event
    }

    /// The next instant [`Membership::handle_timeout`] must be called at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let mut t = self
            .next_gossip
            .min(self.next_push_pull)
            .min(self.next_probe);
        let mut fold = |d: Option<Instant>| {
            if let Some(d) = d {
                t = t.min(d);
            }
        };
        fold(self.next_join);
        fold(self.rejoin_at);
        fold(self.leave_at);
        for w in self.watches.values() {
            fold(self.watch_deadline(w));
        }
        for i in self.indirect.values() {
            fold(Some(i.deadline));
        }
        for p in self.pings.values() {
            fold(Some(p.expires));
        }
        for (a, s) in &self.suspicions {
            if !s.matured {
                fold(Some(self.suspicion_deadline(a, s)));
            }
        }
        fold(self.split_brain_due());
        fold(self.next_expiry(&self.removals, MemberState::Down));
        fold(self.next_expiry(&self.departures, MemberState::Leaving));
        fold(self.next_expiry(&self.tombstones, MemberState::Removed));
        Some(t)
    }

    /// Handles the deadlines due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        self.notice_stall(now);
        if let Some(at) = self.leave_at {
            if now >= at {
                self.finish_leave();
                return;
            }
        }
        if self.rejoin_at.is_some_and(|t| now >= t) {
            self.rejoin(now);
        }
        if self.next_join.is_some_and(|t| now >= t) {
            self.join_round(now);
        }
        self.refresh_live(now);
        if now >= self.next_probe {
            self.probe_round(now);
        }
        self.check_watches(now);
        self.check_suspicions(now);
        if self.split_brain_due().is_some_and(|t| now >= t) {
            self.resolve_split_brain(now);
        }
        self.expire_records(now);
        if now >= self.next_gossip {
            self.lead(now);
            self.gossip_round();
            self.next_gossip = now + self.config.gossip_interval;
        }
        if now >= self.next_push_pull {
            self.push_pull_round();
            self.next_push_pull = now + self.config.push_pull_interval;
        }
    }

    /// Handles a packet received at `now`. The sender is the packet's own
    /// `from` (the link below authenticates nodes; the packet names the
    /// member).
    ///
    /// # Errors
    ///
    /// [`PacketError`] for bytes that are not a packet of this cluster;
    /// nothing of such a packet is kept.
    pub fn handle_packet(&mut self, now: Instant, bytes: &[u8]) -> Result<(), PacketError> {
        let packet = match Packet::decode(bytes) {
            Ok(p) => p,
            Err(e) => {
                self.stats.packets_refused += 1;
                return Err(e.into());
            }
        };
        if packet.cluster != self.name {
            self.stats.packets_refused += 1;
            return Err(PacketError::ForeignCluster {
                expected: Arc::clone(&self.name),
                got: packet.cluster,
                from: packet.from,
            });
        }
        if self.stopped || *packet.from == *self.me.address {
            return Ok(());
        }
        let from = packet.from;
        let life = packet.from_life;
        // Before any answer goes back: it is routed to the life heard.
        self.note_heard(&from, life);
        self.tell_if_gone(&from, life);
        match packet.body {
            Body::Ping { seq } => self.send(&from, Body::Ack { seq }, None),
            Body::Ack { seq } => self.on_ack(now, seq),
            Body::PingReq { seq, target } => self.on_ping_req(now, &from, seq, target),
            Body::Nack { seq } => {
                if let Some(i) = self.indirect.get_mut(&seq) {
                    i.nacks += 1;
                }
            }
            Body::Gossip => {}
            Body::Join { weight } => {
                self.apply_claims(now, &from, packet.entries);
                let joiner = Member {
                    life,
                    ..Member::joining(Arc::clone(&from), packet.from_incarnation, weight)
                };
                self.on_join(now, &from, joiner);
                return Ok(());
            }
            Body::Suspect {
                target,
                incarnation,
            } => self.on_accusation(now, &from, &target, incarnation),
            Body::Sync {
                mode, page, digest, ..
            } => {
                let digest_before = self.digest();
                self.apply_claims(now, &from, packet.entries);
                self.note_heard(&from, life);
                self.on_sync(now, &from, mode, page, digest, digest_before);
                return Ok(());
            }
        }
        self.apply_claims(now, &from, packet.entries);
        self.note_heard(&from, life);
        Ok(())
    }

    /// The driver could not deliver packets to `address`: connecting to it
    /// failed, or the link to it was lost, for `cause` (the transport's
    /// words). It changes nothing the failure detector decides (probes do
    /// that); it is logged at WARN: a failed join attempt at once, with the
    /// contact and the cause, and a member at most once per
    /// [`UNREACHABLE_WARN_EVERY`], with the failures since the last line.
    /// Reports about addresses that are neither join contacts nor live
    /// members (a leaving member's node goes away), or made while this
    /// member is not live itself, are logged at DEBUG only.
    pub fn handle_unreachable(&mut self, now: Instant, address: &str, cause: &dyn fmt::Display) {
        if self.stopped {
            return;
        }
        self.stats.unreachable_reports += 1;
        if self.me.state == MemberState::Joining && !self.admitted {
            if let Some(contact) = self.join_contacts().into_iter().find(|c| **c == *address) {
                let cause = cause.to_string();
                if let Some(a) = self
                    .join_attempt
                    .as_mut()
                    .filter(|a| a.to == contact && !a.logged)
                {
                    a.logged = true;
                    self.stats.join_attempts_failed += 1;
                    let retry = self.config.join_retry;
                    tracing::warn!(target: "plexus::cluster", seed = %contact, %cause, ?retry, "join through {contact} failed: {cause}; trying again");
                }
                self.join_causes.insert(contact, cause);
                return;
            }
        }
        // A member leaving (or gone) is expected to go away, and one that
        // is leaving itself no longer cares.
        let live = |m: &Member| m.state.is_live();
        let member = self.members.get(address).filter(|m| live(m));
        let Some(member) = member.filter(|_| live(&self.me)) else {
            tracing::debug!(target: "plexus::cluster", %address, %cause, "cannot reach a member that is not live");
            return;
        };
        let address = Arc::clone(&member.address);
        // Members no longer live are not warned about any more.
        self.unreachable_log
            .retain(|a, _| self.members.get(a).is_some_and(live));
        match self.unreachable_log.get_mut(&address) {
            Some(u) if now < u.warned_at + UNREACHABLE_WARN_EVERY => u.since += 1,
            _ => {
                let since_last = self
                    .unreachable_log
                    .get(&address)
                    .map_or(1, |u| u.since + 1);
                if since_last > 1 {
                    tracing::warn!(target: "plexus::cluster", member = %address, %cause, since_last, "cannot reach member {address}: {cause} ({since_last} failures since the last such line)");
                } else {
                    tracing::warn!(target: "plexus::cluster", member = %address, %cause, "cannot reach member {address}: {cause}");
                }
                self.unreachable_log.insert(
                    address,
                    Unreachability {
                        warned_at: now,
                        since: 0,
                    },
                );
            }
        }
    }

    /// Notes that a packet came from `from`'s life `life` (for members with
    /// a record; a later life is never replaced by an earlier one's late
    /// packet). A member heard from is reachable again.
    fn note_heard(&mut self, from: &Arc<str>, life: u64) {
        if !self.members.contains_key(from) {
            return;
        }
        let heard = self.heard.entry(Arc::clone(from)).or_insert(life);
        *heard = (*heard).max(life);
        self.unreachable_log.remove(from);
        self.join_causes.remove(from);
    }

    /// A packet came from `from`'s life `life`, which this member holds
    /// downed or removed: the sender speaks as a live member all the same
    /// (it was cut off while its downing spread, and a removed member hears
    /// no gossip any more), so it is told its record; it goes down on it
    /// and comes back as a new life (foca's `TurnUndead`). Without this a
    /// member downed while cut off could go on for ever taking itself for
    /// up, and act on it (a cluster singleton's second instance).
    fn tell_if_gone(&mut self, from: &Arc<str>, life: u64) {
        let Some(record) = self
            .members
            .get(from)
            .filter(|r| r.life == life && r.state.is_gone())
            .cloned()
        else {
            return;
        };
        self.stats.told_gone += 1;
        let packet = Packet {
            cluster: Arc::clone(&self.name),
            from: Arc::clone(&self.me.address),
            from_incarnation: self.me.incarnation,
            from_life: self.me.life,
            body: Body::Gossip,
            entries: vec![record],
        };
        self.push_packet(from, &packet);
    }

    // ---- claims ----------------------------------------------------------

    fn apply_claims(&mut self, now: Instant, from: &Arc<str>, claims: Vec<Member>) {
        for claim in claims {
            self.apply_claim(now, from, claim);
        }
    }

    /// Merges one claim (see [`crate::member`] for the order of claims).
    fn apply_claim(&mut self, now: Instant, from: &Arc<str>, claim: Member) {
        if claim.weight == 0 {
            self.stats.claims_refused += 1;
            return;
        }
        if *claim.address == *self.me.address {
            self.claim_about_me(now, from, claim);
            return;
        }
        match self.members.get_mut(&claim.address) {
            None => {
                if claim.state == MemberState::Removed {
                    return;
                }
                if self.members.len() >= self.config.max_members {
                    self.stats.claims_refused += 1;
                    return;
                }
                self.members
                    .insert(Arc::clone(&claim.address), claim.clone());
                self.entered(now, &claim);
                self.broadcasts.push(claim.clone());
                self.on_new_member(now, &claim);
            }
            Some(record) => {
                if claim.supersedes(record) {
                    let old = std::mem::replace(record, claim.clone());
                    if old.incarnation == claim.incarnation {
                        record.up_number = record.up_number.max(old.up_number);
                    }
                    let new = record.clone();
                    self.entered(now, &new);
                    self.broadcasts.push(new.clone());
                    self.on_transition(now, from, &old, &new);
                } else if claim.precedence(record).is_eq() && claim.up_number > record.up_number {
                    record.up_number = claim.up_number;
                }
            }
        }
    }

    /// A member (or a new life of one) this member did not know. Every
    /// member reports a new life as joined, then up, whatever state it
    /// first hears of (a joining one, or one a leader already promoted), so
    /// all of them report the same sequence.
    fn on_new_member(&mut self, now: Instant, m: &Member) {
        self.membership_changed();
        match m.state {
            MemberState::Joining => self.events.push_back(ClusterEvent::MemberJoined(m.clone())),
            MemberState::Up => {
                self.events.push_back(ClusterEvent::MemberJoined(m.clone()));
                self.events.push_back(ClusterEvent::MemberUp(m.clone()));
            }
            MemberState::Suspect => {
                self.events.push_back(ClusterEvent::MemberJoined(m.clone()));
                self.events.push_back(ClusterEvent::MemberUp(m.clone()));
                self.events
                    .push_back(ClusterEvent::MemberSuspected(m.clone()));
                self.start_suspicion(now, m, None);
            }
            MemberState::Leaving => self
                .events
                .push_back(ClusterEvent::MemberLeaving(m.clone())),
            // A tombstone of a member never known alive: kept, not reported.
            MemberState::Down | MemberState::Removed => {}
        }
    }

    fn on_transition(&mut self, now: Instant, from: &Arc<str>, old: &Member, new: &Member) {
        if new.is_other_life(old) {
            self.on_new_life(now, old, new);
            return;
        }
        // A higher incarnation of the same life: a refutation. (A downed
        // life never comes back by one: `Down` and `Removed` are final for
        // a life, `crate::member`.)
        let new_life = new.incarnation > old.incarnation;
        // Up ⇄ suspect (the common churn under loss and stalls) changes
        // neither who is watched nor who owns keys: no rebuild of either.
        let leaving = |m: &Member| m.state == MemberState::Leaving;
        if old.state.is_live() != new.state.is_live() || leaving(old) != leaving(new) {
            self.live_dirty = true;
        }
        if old.state.owns_keys() != new.state.owns_keys() {
            self.ring_dirty = true;
        }
        if old.state == MemberState::Suspect && new.state != MemberState::Suspect {
            if new.state.is_live() {
                self.end_suspicion(now, &new.address);
            } else {
                // Gone (downed, leaving): the split-brain resolver's view
                // shrank, it did not change its mind; stability holds.
                self.suspicions.remove(&new.address);
                self.unreachable.remove(&new.address);
            }
        }
        match new.state {
            MemberState::Joining => {}
            MemberState::Up => {
                if old.state == MemberState::Suspect {
                    self.events
                        .push_back(ClusterEvent::MemberReachable(new.clone()));
                } else if old.state == MemberState::Joining {
                    self.events.push_back(ClusterEvent::MemberUp(new.clone()));
                }
            }
            MemberState::Suspect => {
                if old.state != MemberState::Suspect || new_life {
                    if old.state == MemberState::Joining {
                        self.events.push_back(ClusterEvent::MemberUp(new.clone()));
                    }
                    self.events
                        .push_back(ClusterEvent::MemberSuspected(new.clone()));
                    self.end_suspicion(now, &new.address);
                    self.start_suspicion(now, new, None);
                }
            }
            MemberState::Leaving => self
                .events
                .push_back(ClusterEvent::MemberLeaving(new.clone())),
            MemberState::Down => {
                self.events.push_back(ClusterEvent::MemberDowned {
                    member: new.clone(),
                    reason: DownReason::ReportedBy(Arc::clone(from)),
                });
            }
            MemberState::Removed => self
                .events
                .push_back(ClusterEvent::MemberRemoved(new.clone())),
        }
    }

    /// A claim of a new life of a member (`new`) replaced the record of
    /// its earlier one (`old`): its process was restarted at the same
    /// address, or it rejoins after being downed. The old life ends as if
    /// it had been downed and removed (those of its events not reported
    /// yet are, now), and what this member watched or suspected of it is
    /// dropped: the new life is a new member, with a fresh failure
    /// detector, not a suspect for the old one's silence. Every member does
    /// this when it first hears of the new life, whichever of its claims
    /// that is, so all report the same sequence.
    fn on_new_life(&mut self, now: Instant, old: &Member, new: &Member) {
        let address = &new.address;
        self.suspicions.remove(address);
        if self.unreachable.remove(address) {
            self.last_change = now;
        }
        if let Some(w) = self.watches.remove(address) {
            if let Some(seq) = w.indirect {
                self.indirect.remove(&seq);
            }
        }
        self.membership_changed();
        if old.state.is_live() {
            self.events.push_back(ClusterEvent::MemberDowned {
                member: Member {
                    state: MemberState::Down,
                    ..old.clone()
                },
                reason: DownReason::Restarted {
                    incarnation: new.incarnation,
                },
            });
        }
        if old.state != MemberState::Removed {
            self.events.push_back(ClusterEvent::MemberRemoved(Member {
                state: MemberState::Removed,
                ..old.clone()
            }));
        }
        self.on_new_member(now, new);
    }

    fn claim_about_me(&mut self, now: Instant, from: &Arc<str>, claim: Member) {
        if claim.incarnation > self.me.incarnation.saturating_add(MAX_SELF_JUMP) {
            self.stats.claims_refused += 1;
            tracing::warn!(target: "plexus::cluster", from = %from, claim = %claim, "ignored a forged claim about this member");
            return;
        }
        // A claim of another life at this address is about an earlier
        // process here (a stale one), not this one.
        if claim.is_other_life(&self.me) {
            return;
        }
        let me_alive = matches!(
            self.me.state,
            MemberState::Joining | MemberState::Up | MemberState::Suspect
        );
        // This life was downed, at whatever incarnation: it may have
        // refuted a suspicion since, unaware, but the others acted on the
        // downing and never take it back (`Down` is final for a life).
        if claim.state.is_gone() && me_alive {
            self.me.incarnation = self.me.incarnation.max(claim.incarnation);
            self.go_down(now, DownReason::ReportedBy(Arc::clone(from)));
            return;
        }
        // An older claim of this life: refuted or superseded already.
        if claim.incarnation < self.me.incarnation {
            return;
        }
        match claim.state {
            MemberState::Suspect if me_alive => {
                // Refute (SWIM sec. 4.2): only the member raises its own
                // incarnation.
                self.me.incarnation = claim.incarnation + 1;
                self.broadcasts.push(self.me.clone());
                self.stats.refutations += 1;
                if self.config.lifeguard {
                    self.health = (self.health + 1).min(MAX_HEALTH);
                }
                self.events.push_back(ClusterEvent::Refuted {
                    incarnation: self.me.incarnation,
                });
            }
            MemberState::Up
                if self.me.state == MemberState::Joining
                    && claim.incarnation == self.me.incarnation =>
            {
                if self.admitted {
                    self.go_up(claim.up_number);
                } else {
                    // Promoted before its join reply came (lost, or late):
                    // up now, it would know next to no member and act as a
                    // cluster of its own. It keeps asking to join; the
                    // reply brings the view, and then it goes up.
                    self.promotion = Some(claim.up_number);
                }
            }
            _ => {}
        }
    }

    /// A leader promoted this life, and it holds the cluster's view.
    fn go_up(&mut self, up_number: u64) {
        self.promotion = None;
        self.me.state = MemberState::Up;
        self.me.up_number = up_number;
        self.ever_joined = true;
        self.next_join = None;
        self.membership_changed();
        self.broadcasts.push(self.me.clone());
        self.events
            .push_back(ClusterEvent::MemberUp(self.me.clone()));
    }

    /// Something changed who is live or who owns keys.
    fn membership_changed(&mut self) {
        self.live_dirty = true;
        self.ring_dirty = true;
    }

    // ---- joining, leaving, downing ----------------------------------------

    fn form(&mut self, now: Instant) {
        self.join_attempt = None;
        self.join_causes.clear();
        self.me.state = MemberState::Up;
        self.me.up_number = self.max_up_number() + 1;
        self.ever_joined = true;
        self.next_join = None;
        self.membership_changed();
        self.broadcasts.push(self.me.clone());
        self.next_probe = now + self.config.probe_interval;
        self.events.push_back(ClusterEvent::Formed {
            local: self.me.clone(),
        });
    }

    fn max_up_number(&self) -> u64 {
        self.members
            .values()
            .map(|r| r.up_number)
            .chain(std::iter::once(self.me.up_number))
            .max()
            .unwrap_or(0)
    }

    /// Seeds, discovered seeds, then members known up, this member
    /// excluded.
    fn join_contacts(&self) -> Vec<Arc<str>> {
        let mut contacts: Vec<Arc<str>> = Vec::new();
        let mut seen: BTreeSet<Arc<str>> = BTreeSet::new();
        let ups = self
            .members
            .values()
            .filter(|r| r.state == MemberState::Up)
            .map(|r| &r.address);
        let candidates = self
            .config
            .seeds
            .iter()
            .map(|s| Arc::from(s.as_str()))
            .chain(self.bootstrap.seeds.iter().cloned())
            .chain(ups.cloned())
            .chain(self.rejoin_contacts.iter().cloned());
        for c in candidates {
            if *c != *self.me.address && seen.insert(Arc::clone(&c)) {
                contacts.push(c);
            }
        }
        contacts
    }

    fn join_round(&mut self, now: Instant) {
        if self.me.state != MemberState::Joining {
            self.next_join = None;
            return;
        }
        if let Some(limit) = self.config.form_after {
            if !self.ever_joined && now >= self.started + limit {
                tracing::info!(target: "plexus::cluster", "no seed answered for {limit:?}: forming a new cluster");
                self.form(now);
                return;
            }
        }
        if self.bootstrap_forms() {
            tracing::info!(
                target: "plexus::cluster",
                seeds = self.bootstrap.seeds.len(),
                "lowest of the discovered seeds and none admitted it: forming a new cluster"
            );
            self.form(now);
            return;
        }
        self.join_attempt_over();
        let contacts = self.join_contacts();
        if !contacts.is_empty() {
            let to = Arc::clone(&contacts[self.join_attempts % contacts.len()]);
            self.join_attempts += 1;
            self.bootstrap_tried(&to);
            let weight = self.me.weight;
            self.send(&to, Body::Join { weight }, None);
            if !self.admitted {
                self.join_attempt = Some(JoinAttempt { to, logged: false });
            }
        }
        let retry = if self.admitted {
            self.config.join_retry * ADMITTED_RETRY
        } else {
            self.config.join_retry
        };
        self.next_join = Some(now + retry);
    }

    /// The last join attempt got no admission before the next one: unless
    /// its failure was logged already, it is now, with the last cause the
    /// driver gave for that contact, or as unanswered.
    fn join_attempt_over(&mut self) {
        let Some(a) = self.join_attempt.take() else {
            return;
        };
        if a.logged || self.admitted || self.me.state != MemberState::Joining {
            return;
        }
        self.stats.join_attempts_failed += 1;
        let retry = self.config.join_retry;
        let to = a.to;
        match self.join_causes.get(&to) {
            Some(cause) => {
                tracing::warn!(target: "plexus::cluster", seed = %to, %cause, ?retry, "join through {to} failed: {cause}; trying again");
            }
            None => {
                tracing::warn!(target: "plexus::cluster", seed = %to, ?retry, "join through {to} failed: no answer within {retry:?}; trying again");
            }
        }
    }

    fn on_join(&mut self, now: Instant, from: &Arc<str>, joiner: Member) {
        if self.me.state != MemberState::Up || joiner.weight == 0 {
            return;
        }
        let life = joiner.life;
        self.apply_claim(now, from, joiner);
        // The answer goes to the life that asked.
        self.note_heard(from, life);
        self.send_pages(from, SyncMode::JoinReply);
    }

    /// Promotes joining members to up, if this member leads: the leader is
    /// the reachable up member with the lowest address (Akka's rule). A
    /// leader that sees a suspect or unreachable member promotes nobody
    /// (Akka's convergence rule): the losing side of a partition must not
    /// grow back into a cluster of its own from members that rejoin it.
    fn lead(&mut self, now: Instant) {
        // Every suspect has a suspicion under way (they start and end with
        // the suspect state), so the map stands for a scan of the members:
        // this runs every gossip round on every member.
        if self.me.state != MemberState::Up || !self.suspicions.is_empty() {
            return;
        }
        // Members are sorted by address: the first reachable up one is the
        // lowest (usually the first of all), unless this member is lower.
        let lowest_other = self
            .members
            .values()
            .find(|r| r.state == MemberState::Up && !self.unreachable.contains(&r.address));
        if lowest_other.is_some_and(|r| r.address < self.me.address) {
            return;
        }
        let joining: Vec<Arc<str>> = self
            .members
            .values()
            .filter(|r| r.state == MemberState::Joining)
            .map(|r| Arc::clone(&r.address))
            .collect();
        for address in joining {
            let next = self.max_up_number() + 1;
            if let Some(r) = self.members.get_mut(&address) {
                let old = r.clone();
                r.state = MemberState::Up;
                r.up_number = next;
                let new = r.clone();
                self.broadcasts.push(new.clone());
                let me = Arc::clone(&self.me.address);
                self.on_transition(now, &me, &old, &new);
            }
        }
    }

    fn go_down(&mut self, now: Instant, reason: DownReason) {
        self.me.state = MemberState::Down;
        // What a downed member believed about others is not to be spread:
        // a losing side may have downed members of the winning one, and
        // those claims must not reach it after the heal. The members it
        // knew up are kept only as contacts to rejoin through; the join
        // reply brings the cluster's view.
        self.rejoin_contacts = self
            .members
            .values()
            // The unreachable ones too: after a partition they are the
            // side that stayed.
            .filter(|r| r.state.counts_for_quorum())
            .map(|r| Arc::clone(&r.address))
            .collect();
        self.members.clear();
        self.heard.clear();
        self.unreachable_log.clear();
        self.broadcasts = Broadcasts::default();
        self.broadcasts.push(self.me.clone());
        self.forget_watching();
        self.membership_changed();
        self.events.push_back(ClusterEvent::SelfDowned { reason });
        if self.config.rejoin_when_downed {
            self.rejoin_at = Some(now + self.config.rejoin_delay);
        }
    }

    fn rejoin(&mut self, now: Instant) {
        self.rejoin_at = None;
        self.me = Member::joining(
            Arc::clone(&self.me.address),
            self.me.incarnation + 1,
            self.config.weight,
        );
        self.broadcasts.push(self.me.clone());
        self.membership_changed();
        self.next_join = Some(now);
        self.admitted = false;
        self.promotion = None;
        self.events.push_back(ClusterEvent::Rejoining {
            incarnation: self.me.incarnation,
        });
    }

    fn finish_leave(&mut self) {
        self.leave_at = None;
        self.me.state = MemberState::Removed;
        self.broadcasts.push(self.me.clone());
        self.gossip_round();
        self.stopped = true;
        self.events.push_back(ClusterEvent::Left);
    }

    fn forget_watching(&mut self) {
        self.sweep = None;
        self.watches.clear();
        self.indirect.clear();
        self.suspicions.clear();
        self.unreachable.clear();
    }

    // ---- suspicion and split brain ----------------------------------------

    fn start_suspicion(&mut self, now: Instant, m: &Member, accuser: Option<&Arc<str>>) {
        let s = self
            .suspicions
            .entry(Arc::clone(&m.address))
            .or_insert_with(|| Suspicion {
                incarnation: m.incarnation,
                since: now,
                accusers: BTreeSet::new(),
                matured: false,
            });
        if let Some(a) = accuser {
            s.accusers.insert(Arc::clone(a));
        }
    }

    fn end_suspicion(&mut self, now: Instant, address: &Arc<str>) {
        self.suspicions.remove(address);
        if self.unreachable.remove(address) {
            self.last_change = now;
        }
    }

    /// Lifeguard's suspicion timeout (Dadgar et al. 2018, sec. 4.2): starts
    /// at `max`, shrinks logarithmically to `min` as independent accusers
    /// confirm it. Plain SWIM: `min`.
    fn suspicion_deadline(&self, address: &Arc<str>, s: &Suspicion) -> Instant {
        let n = self.live.len().max(1) as f64;
        let interval = self.config.probe_interval.as_secs_f64();
        let min = self.config.suspicion_mult * n.log10().max(1.0) * interval;
        if !self.config.lifeguard {
            return s.since + Duration::from_secs_f64(min);
        }
        let max = min * self.config.suspicion_max_mult.max(1.0);
        let expected = self.watchers_of(address).saturating_sub(1).max(1) as f64;
        let confirmations = s.accusers.len().saturating_sub(1) as f64;
        let frac = ((confirmations + 1.0).ln() / (expected + 1.0).ln()).min(1.0);
        s.since + Duration::from_secs_f64((max - (max - min) * frac).max(min))
    }

    fn check_suspicions(&mut self, now: Instant) {
        let due: Vec<Arc<str>> = self
            .suspicions
            .iter()
            .filter(|(a, s)| !s.matured && now >= self.suspicion_deadline(a, s))
            .map(|(a, _)| Arc::clone(a))
            .collect();
        for a in due {
            if let Some(s) = self.suspicions.get_mut(&a) {
                s.matured = true;
            }
            self.unreachable.insert(Arc::clone(&a));
            self.last_change = now;
            if let Some(r) = self.members.get(&a) {
                self.events
                    .push_back(ClusterEvent::MemberUnreachable(r.clone()));
            }
        }
    }

    /// Queues the next step of a record that just entered its state.
    fn entered(&mut self, now: Instant, m: &Member) {
        let (queue, delay) = match m.state {
            MemberState::Down => (&mut self.removals, self.config.remove_after),
            MemberState::Leaving => (&mut self.departures, self.config.leave_timeout),
            MemberState::Removed => (&mut self.tombstones, self.config.tombstone_ttl),
            _ => return,
        };
        queue.push_back(Expiry {
            at: now + delay,
            address: Arc::clone(&m.address),
            incarnation: m.incarnation,
        });
    }

    /// Whether the record an expiry is for is still in `state` at the
    /// expiry's incarnation.
    fn is_current(&self, e: &Expiry, state: MemberState) -> bool {
        self.members
            .get(&e.address)
            .is_some_and(|r| r.state == state && r.incarnation == e.incarnation)
    }

    /// The first current expiry of `queue` (entries of records that moved
    /// on wake nobody; they are dropped when their time comes).
    fn next_expiry(&self, queue: &VecDeque<Expiry>, state: MemberState) -> Option<Instant> {
        queue
            .iter()
            .find(|e| self.is_current(e, state))
            .map(|e| e.at)
    }

    fn expire_records(&mut self, now: Instant) {
        self.remove_due(now, MemberState::Down);
        // A leaver whose last word was cut off (a partition) is not left
        // listed as leaving for ever: it has stopped by now.
        self.remove_due(now, MemberState::Leaving);
        while let Some(e) = self.tombstones.pop_front() {
            if now < e.at {
                self.tombstones.push_front(e);
                break;
            }
            if self.is_current(&e, MemberState::Removed) {
                self.members.remove(&e.address);
                self.broadcasts.remove(&e.address);
                self.heard.remove(&e.address);
            }
        }
    }

    /// Moves the records of `state` (down or leaving) whose delay is over
    /// to removed.
    fn remove_due(&mut self, now: Instant, state: MemberState) {
        loop {
            let queue = match state {
                MemberState::Leaving => &mut self.departures,
                _ => &mut self.removals,
            };
            let Some(e) = queue.pop_front() else {
                break;
            };
            if now < e.at {
                queue.push_front(e);
                break;
            }
            if !self.is_current(&e, state) {
                continue;
            }
            if let Some(r) = self.members.get_mut(&e.address) {
                r.state = MemberState::Removed;
                let m = r.clone();
                self.entered(now, &m);
                self.membership_changed();
                self.events.push_back(ClusterEvent::MemberRemoved(m));
            }
        }
    }

    // ---- sending -----------------------------------------------------------

    /// How many times a claim is gossiped.
    fn retransmit_limit(&self) -> u32 {
        let n = (self.live.len() + 1) as f64;
        self.config.retransmit_mult * (n.log10().ceil() as u32).max(1)
    }

    /// Sends `body` to `to` with as much gossip as fits, `first` ahead.
    fn send(&mut self, to: &Arc<str>, body: Body, first: Option<&Arc<str>>) {
        let mut packet = Packet {
            cluster: Arc::clone(&self.name),
            from: Arc::clone(&self.me.address),
            from_incarnation: self.me.incarnation,
            from_life: self.me.life,
            body,
            entries: Vec::new(),
        };
        let budget = self
            .config
            .max_packet
            .saturating_sub(packet.header_len() + 1);
        let limit = self.retransmit_limit();
        packet.entries = self
            .broadcasts
            .take(budget, crate::wire::MAX_ENTRIES, limit, first);
        self.push_packet(to, &packet);
    }

    fn push_packet(&mut self, to: &Arc<str>, packet: &Packet) {
        let bytes = packet.encode();
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += bytes.len() as u64;
        self.out.push_back(Transmit {
            to: Arc::clone(to),
            packet: bytes,
            heard_life: self.heard.get(to).copied(),
        });
    }

    fn gossip_round(&mut self) {
        if self.broadcasts.is_empty() {
            return;
        }
        let targets = self.gossip_targets();
        for t in targets {
            if self.broadcasts.is_empty() {
                break;
            }
            self.send(&t, Body::Gossip, None);
        }
    }
}

#[cfg(test)]
mod partition_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unreachable_tests;
