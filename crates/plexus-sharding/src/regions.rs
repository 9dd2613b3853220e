//! A member's whole part in sharding as one sans-IO protocol: its region
//! of every entity type it hosts or sends to, and the coordinators it runs
//! while it is the oldest `Up` member (`ALGORITHM.md`).
//!
//! ```text
//!   send / arrived / marker / entity_stopped   (the host's entity traffic)
//!   set_members (the cluster's view)            ─► Regions ─► events: forward,
//!   handle_packet (control messages, wire.rs)                 activate, deliver,
//!   handle_timeout                                            passivate, refuse,
//!                                                             marker, refused, left
//!                                               ─► control packets to members
//! ```
//!
//! Entities and the messages for them are the host's: a message travels
//! through here as an opaque parcel `P`, and comes out in an [`Event`] that
//! says what to do with it. Control messages between regions and
//! coordinators are packets ([`crate::wire`]); one addressed to this member
//! itself is handled at once, without leaving it.
//!
//! The coordinator of every type runs on the oldest member that is `Up` (or
//! suspected, still up) in this member's view; a region listens only to
//! the coordinator its view names, so an old coordinator's words after a
//! change are ignored. When the coordinator changes, every region reports
//! the shards it hosts to the new one, renews its lease with it and asks
//! again for the homes it waits for. A coordinator renews the leases of
//! regions whose members are not down only, and adds a region when its
//! member is up: a downed member's lease runs out, and its shards move only
//! after that (`lease.rs`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_cluster::{Member, MemberState};

use crate::allocation::{Placement, Rebalance};
use crate::coordinator::{Coordinator, CoordinatorConfig, CoordinatorOutput};
use crate::region::{EntityError, Region, RegionConfig, RegionOutput};
use crate::shard::{EntityId, HandOffId, ShardId};
use crate::wire::{Body, Message};

/// A member's sharding settings (every entity type's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardingConfig {
    /// Shards per entity type: the same on every member, for the
    /// cluster's life. Default 1,000.
    pub shards: u32,
    /// Messages held per shard while its home is unknown or moving.
    /// Default 10,000.
    pub held_limit: usize,
    /// Entities of one type active on this member at once; the least
    /// recently used is passivated to make room. Default 100,000.
    pub max_active: usize,
    /// An entity without a message this long is passivated. Default 2 min.
    pub passivate_after: Duration,
    /// A region's lease on its shards. Default 10 s.
    pub lease: Duration,
    /// How long after a silent region's lease the coordinator counts it
    /// stopped. Default 2 s.
    pub margin: Duration,
    /// How often a coordinator evens out the load. Default 5 s.
    pub rebalance_every: Duration,
    /// A coordinator's rebalancing rule. Default: 2 shards apart, at most
    /// 10 % of the shards moving at once.
    pub rebalance: Rebalance,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        let shards = 1_000;
        Self {
            shards,
            held_limit: 10_000,
            max_active: 100_000,
            passivate_after: Duration::from_secs(120),
            lease: Duration::from_secs(10),
            margin: Duration::from_secs(2),
            rebalance_every: Duration::from_secs(5),
            rebalance: Rebalance::for_shards(shards),
        }
    }
}

/// A sharding setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sharding setting `{setting}` {why}")]
pub struct ConfigError {
    /// The setting.
    pub setting: &'static str,
    /// What is wrong with it.
    pub why: &'static str,
}

impl ShardingConfig {
    /// Checks that the settings can work.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first setting that cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |setting, why| Err(ConfigError { setting, why });
        if self.shards == 0 || self.shards > crate::wire::MAX_SHARDS as u32 {
            return fail("shards", "must be 1 to 65,536");
        }
        if self.held_limit == 0 {
            return fail("held_limit", "must be at least 1");
        }
        if self.max_active == 0 {
            return fail("max_active", "must be at least 1");
        }
        if self.passivate_after.is_zero() {
            return fail("passivate_after", "must be more than 0");
        }
        if self.lease < Duration::from_millis(300) {
            // Renewed every third of it: shorter leaves no time for a
            // renewal's round trip.
            return fail("lease", "must be at least 300 ms");
        }
        if self.margin.is_zero() {
            return fail("margin", "must be more than 0 (it covers the clocks' rate difference and the resolver's sweep)");
        }
        if self.rebalance_every.is_zero() {
            return fail("rebalance_every", "must be more than 0");
        }
        Ok(())
    }

    fn region(&self) -> RegionConfig {
        RegionConfig {
            shards: self.shards,
            held_limit: self.held_limit,
            max_active: self.max_active,
            passivate_after: self.passivate_after,
            lease: self.lease,
        }
    }

    fn coordinator(&self) -> CoordinatorConfig {
        CoordinatorConfig {
            shards: self.shards,
            lease: self.lease,
            margin: self.margin,
            rebalance_every: self.rebalance_every,
            rebalance: self.rebalance,
        }
    }
}

/// What the host must do, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<P> {
    /// Send the message to the region of `entity_type` at member `to`.
    Forward {
        /// The entity type.
        entity_type: Arc<str>,
        /// The member hosting its shard.
        to: Arc<str>,
        /// The entity.
        id: EntityId,
        /// The message.
        parcel: P,
    },
    /// Start the entity (before the delivery that follows).
    Activate {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
    },
    /// Hand the message to the running entity.
    Deliver {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
        /// The message.
        parcel: P,
    },
    /// A region's lease ran out before a renewal was answered: its
    /// `active` entities are being passivated (the [`Passivate`]
    /// events follow). Worth a warning to the operator.
    ///
    /// [`Passivate`]: Event::Passivate
    LeaseLapsed {
        /// The entity type.
        entity_type: Arc<str>,
        /// Entities active when it ran out.
        active: usize,
    },
    /// Stop the entity (its `stopping` hook runs), then report it with
    /// [`Regions::entity_stopped`].
    Passivate {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
    },
    /// Refuse the message to its sender.
    Refuse {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
        /// The message.
        parcel: P,
        /// Why.
        error: EntityError,
    },
    /// Send a hand-off marker for `shard` to the region of `entity_type`
    /// at member `to`, behind this member's messages to it (the same
    /// link and lane).
    Marker {
        /// The entity type.
        entity_type: Arc<str>,
        /// The shard.
        shard: ShardId,
        /// The old home.
        to: Arc<str>,
        /// The hand-off.
        handoff: HandOffId,
    },
    /// A message this member sent with request number `request` is in
    /// its entity's mailbox on its home.
    Delivered {
        /// The request's number.
        request: u64,
    },
    /// A message this member sent with request number `request` was
    /// refused by its home.
    Refused {
        /// The request's number.
        request: u64,
        /// Why.
        error: EntityError,
    },
    /// After [`Regions::leave`]: this member hosts no shard any more.
    Left,
    /// A remembering type's shard is hosted here from now on: read the
    /// ids remembered for it and [`wake`](Regions::wake) each.
    ShardStarted {
        /// The entity type.
        entity_type: Arc<str>,
        /// The shard.
        shard: ShardId,
    },
    /// A remembering type's entity was activated by a message: add it to
    /// its shard's remembered ids.
    Remember {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
    },
    /// A remembering type's entity was passivated for idleness or room
    /// (not because its shard stops here): take it out of its shard's
    /// remembered ids.
    Forget {
        /// The entity type.
        entity_type: Arc<str>,
        /// The entity.
        id: EntityId,
    },
}

/// A member's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionsStats {
    /// Per entity type: its active entities here.
    pub active: BTreeMap<Arc<str>, usize>,
    /// Per entity type: the shards homed here.
    pub shards: BTreeMap<Arc<str>, usize>,
    /// Messages held for a home, a hand-off or the first lease.
    pub held: usize,
    /// Entities activated.
    pub activations: u64,
    /// Entities passivated.
    pub passivations: u64,
    /// Shards handed over from here.
    pub handoffs: u64,
    /// Messages refused here.
    pub refusals: u64,
    /// Leases of a region here that ran out before a renewal was
    /// answered (its entities were stopped).
    pub lease_lapses: u64,
    /// Control packets refused as malformed.
    pub bad_packets: u64,
    /// Whether this member runs the coordinators.
    pub coordinator: bool,
}

#[derive(Debug)]
struct TypeState<P> {
    region: Region<P>,
    /// Registered here: it hosts shards. Otherwise it only routes (a
    /// proxy region): it never renews a lease, so it is never a home.
    hosts: bool,
    /// The coordinator said it hosts nothing after this member's leave.
    drained: bool,
    /// Where its shards go, as registered here.
    placement: Placement,
}

/// A member's regions and coordinators. See the [module docs](self).
#[derive(Debug)]
pub struct Regions<P> {
    me: Arc<str>,
    config: ShardingConfig,
    types: BTreeMap<Arc<str>, TypeState<P>>,
    /// The coordinators this member runs (it is the oldest up member).
    coordinators: BTreeMap<Arc<str>, Coordinator>,
    /// The member the view names as the coordinators' home.
    coordinator_at: Option<Arc<str>>,
    /// Every member's state in the view.
    view: BTreeMap<Arc<str>, MemberState>,
    /// Every member's life in the view: a new one at an address is a new
    /// region there (the old one is gone).
    lives: BTreeMap<Arc<str>, u64>,
    /// This member's up-number (the high bits of its coordinators'
    /// epochs) and how often it became the coordinator (the low bits).
    up_number: u64,
    generation: u8,
    /// Its member is not up (yet, or again in a new life): its regions
    /// renew no lease and its coordinators are gone. A member joining is
    /// not up: a coordinator that still lists an earlier life at its
    /// address would take its renewals for that life's and grant them,
    /// with that life's shards (campaign seeds 4, a downed member's new
    /// life, and 1354, a process restarted after a crash).
    downed: bool,
    /// Its member suspects so many members that the rest are no majority
    /// (its coordinators renew no lease meanwhile).
    cut_off: bool,
    leaving: bool,
    left: bool,
    /// A proxy outside the cluster: the member every message goes
    /// through ([`Regions::proxy`]).
    via: Option<Arc<str>>,
    /// Every member's up-number in the view (the oldest has the lowest).
    ups: BTreeMap<Arc<str>, u64>,
    /// The types whose shards live on the oldest member (singletons'),
    /// as their regions said.
    oldest_types: BTreeSet<Arc<str>>,
    /// Control messages to this member itself.
    loopback: VecDeque<Message>,
    transmits: VecDeque<(Arc<str>, Bytes)>,
    events: VecDeque<Event<P>>,
    stats: RegionsStats,
}

impl<P> Regions<P> {
    /// The sharding of member `me` (its address), alone until
    /// [`set_members`](Regions::set_members).
    pub fn new(me: Arc<str>, config: ShardingConfig) -> Self {
        Self {
            me,
            config,
            types: BTreeMap::new(),
            coordinators: BTreeMap::new(),
            coordinator_at: None,
            view: BTreeMap::new(),
            lives: BTreeMap::new(),
            up_number: 0,
            generation: 0,
            downed: true,
            cut_off: false,
            leaving: false,
            left: false,
            via: None,
            ups: BTreeMap::new(),
            oldest_types: BTreeSet::new(),
            loopback: VecDeque::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: RegionsStats::default(),
        }
    }

    /// The sharding of node `me` outside the cluster, which sends every
    /// message through the member `via` (a region of the entity's type
    /// there routes it as its own). It hosts nothing and runs no
    /// coordinator; answers to its senders ([`Event::Delivered`],
    /// [`Event::Refused`]) come back to it as to a member.
    pub fn proxy(me: Arc<str>, via: Arc<str>, config: ShardingConfig) -> Self {
        Self {
            via: Some(via),
            ..Self::new(me, config)
        }
    }

    /// This member's address.
    pub fn me(&self) -> &Arc<str> {
        &self.me
    }

    /// The settings.
    pub fn config(&self) -> &ShardingConfig {
        &self.config
    }

    /// The member the coordinators run on, as this member sees it.
    pub fn coordinator(&self) -> Option<&Arc<str>> {
        self.coordinator_at.as_ref()
    }

    /// This member hosts entities of `entity_type` from now on.
    pub fn register(&mut self, entity_type: Arc<str>, now: Instant) {
        let at = self.coordinator_at.clone();
        let proxy = self.types.contains_key(&entity_type);
        let state = self.type_state(&entity_type, now);
        if !state.hosts {
            state.hosts = true;
            if proxy {
                // A new region asks at once; a proxy never asked.
                state.region.renew_now(now);
            }
        }
        if let Some(at) = at {
            // A region registered after its member's leave began has
            // nothing to hand over, but the coordinator must not give it
            // shards.
            if self.leaving {
                self.control(&at, &entity_type, Body::Leaving);
            }
        }
        self.pump(now);
    }

    /// This member's region of `entity_type` (registered here) reports
    /// what to remember from now on: [`Event::Remember`],
    /// [`Event::Forget`] and [`Event::ShardStarted`] (see
    /// [`Region::remember`]).
    pub fn remember(&mut self, entity_type: &Arc<str>, now: Instant) {
        self.type_state(entity_type, now).region.remember(now);
        self.pump(now);
    }

    /// Makes `entity_type` (registered here) a singleton's type: its
    /// shards live on the oldest up member that registered it, and its
    /// entity `id` runs there with no message, moving when another member
    /// becomes the oldest (a hand-off, as any shard's) and starting again
    /// after its member is downed (once its lease ran out). Do the same on
    /// every member that registers the type.
    pub fn singleton(&mut self, entity_type: &Arc<str>, id: EntityId, now: Instant) {
        let t = self.type_state(entity_type, now);
        t.placement = Placement::Oldest;
        // The coordinator hears of the placement before the question for
        // the entity's shard, not at the next renewal.
        t.region.renew_now(now);
        t.region.keep_running(id, now);
        self.pump(now);
    }

    /// Activates the remembered entity `id` of `entity_type` without a
    /// message, if its shard is hosted here now (see [`Region::wake`]).
    pub fn wake(&mut self, entity_type: &Arc<str>, id: EntityId, now: Instant) {
        if let Some(t) = self.types.get_mut(entity_type) {
            t.region.wake(id, now);
        }
        self.pump(now);
    }

    /// Whether this member hosts entities of `entity_type`.
    pub fn hosts(&self, entity_type: &str) -> bool {
        self.types.get(entity_type).is_some_and(|t| t.hosts)
    }

    /// A message for entity `id` of `entity_type`, sent on this member.
    pub fn send(&mut self, entity_type: &Arc<str>, id: EntityId, parcel: P, now: Instant) {
        if let Some(via) = &self.via {
            // Outside the cluster: the member routes it.
            self.events.push_back(Event::Forward {
                entity_type: entity_type.clone(),
                to: via.clone(),
                id,
                parcel,
            });
            return;
        }
        self.type_state(entity_type, now)
            .region
            .send(id, parcel, now);
        self.pump(now);
    }

    /// A message for entity `id` that another member's region forwarded
    /// here.
    pub fn arrived(&mut self, entity_type: &Arc<str>, id: EntityId, parcel: P, now: Instant) {
        self.type_state(entity_type, now)
            .region
            .arrived(id, parcel, now);
        self.pump(now);
    }

    /// `from`'s marker for hand-off `handoff` of `shard` arrived, behind
    /// its messages.
    pub fn marker(
        &mut self,
        entity_type: &Arc<str>,
        from: &str,
        shard: ShardId,
        handoff: HandOffId,
        now: Instant,
    ) {
        self.type_state(entity_type, now)
            .region
            .marker(from, shard, handoff);
        self.pump(now);
    }

    /// The host stopped entity `id` (after [`Event::Passivate`]).
    pub fn entity_stopped(&mut self, entity_type: &str, id: &EntityId, now: Instant) {
        if let Some(t) = self.types.get_mut(entity_type) {
            t.region.entity_stopped(id, now);
        }
        self.pump(now);
    }

    /// Tells the member `origin` that its message with request number
    /// `request` was refused here.
    pub fn refuse_to(
        &mut self,
        origin: &Arc<str>,
        entity_type: &str,
        request: u64,
        error: EntityError,
    ) {
        self.control(origin, entity_type, Body::Refused { request, error });
    }

    /// Tells the member `origin` that its message with request number
    /// `request` is in its entity's mailbox here.
    pub fn delivered_to(&mut self, origin: &Arc<str>, entity_type: &str, request: u64) {
        self.control(origin, entity_type, Body::Delivered(request));
    }

    /// Hands over every shard hosted here (this member is about to leave
    /// the cluster); [`Event::Left`] comes when none is left.
    pub fn leave(&mut self, now: Instant) {
        if self.leaving {
            return;
        }
        self.leaving = true;
        if let Some(at) = self.coordinator_at.clone() {
            let hosting: Vec<Arc<str>> = self
                .types
                .iter()
                .filter(|(_, t)| t.hosts)
                .map(|(name, _)| name.clone())
                .collect();
            for entity_type in hosting {
                self.control(&at, &entity_type, Body::Leaving);
            }
        }
        self.pump(now);
        self.check_left();
    }

    /// The cluster's view changed: `local` is this member, `members` every
    /// member known.
    pub fn set_members(&mut self, now: Instant, local: &Member, members: &[Member]) {
        let before = std::mem::take(&mut self.view);
        self.view = members
            .iter()
            .map(|m| (m.address.clone(), m.state))
            .collect();
        self.view.insert(local.address.clone(), local.state);
        self.up_number = local.up_number;
        self.ups = members
            .iter()
            .chain([local])
            .map(|m| (m.address.clone(), m.up_number))
            .collect();
        // A singleton's type follows the oldest member before a leaver's
        // shards move (they go there, not to the least loaded).
        let pinned: Vec<Arc<str>> = self.oldest_types.iter().cloned().collect();
        for entity_type in &pinned {
            self.pin_oldest(entity_type, None, now);
        }
        let lives_before = std::mem::take(&mut self.lives);
        self.lives = members
            .iter()
            .chain([local])
            .map(|m| (m.address.clone(), m.life))
            .collect();
        // Members gone since (or in a new life): routes to them are asked
        // for again, their markers not awaited, their shards re-homed after
        // their lease.
        let gone: Vec<Arc<str>> = before
            .iter()
            .filter(|(a, s)| {
                let now_gone = self.view.get(*a).is_none_or(|s| gone_state(*s));
                let new_life = lives_before.get(*a) != self.lives.get(*a);
                !gone_state(**s) && (now_gone || new_life)
            })
            .map(|(a, _)| a.clone())
            .collect();
        for address in &gone {
            for t in self.types.values_mut() {
                t.region.region_gone(address, now);
            }
            for c in self.coordinators.values_mut() {
                c.region_gone(address, now);
            }
        }
        let leaving: Vec<Arc<str>> = self
            .view
            .iter()
            .filter(|(a, s)| {
                **s == MemberState::Leaving && before.get(*a) != Some(&MemberState::Leaving)
            })
            .map(|(a, _)| a.clone())
            .collect();
        for address in &leaving {
            for c in self.coordinators.values_mut() {
                c.member_leaving(address);
            }
        }
        // Members this one counts (as the split-brain resolver does), and
        // of those the ones it does not suspect, itself included.
        let (mut counting, mut trusted) = (1, 1);
        for m in members.iter().filter(|m| m.address != local.address) {
            if m.state.counts_for_quorum() {
                counting += 1;
                trusted += usize::from(m.state != MemberState::Suspect);
            }
        }
        self.cut_off = trusted * 2 <= counting;
        for c in self.coordinators.values_mut() {
            c.set_cut_off(self.cut_off);
        }
        if gone_state(local.state) && !self.downed {
            // Downed (or removed): stop everything now, without waiting for
            // the lease; a new life starts with nothing.
            self.downed = true;
            for t in self.types.values_mut() {
                t.region.lose_lease(now);
            }
            self.coordinators.clear();
        } else if matches!(local.state, MemberState::Up | MemberState::Leaving) {
            self.downed = false;
        }
        let oldest = self
            .view
            .iter()
            .filter(|(_, s)| matches!(s, MemberState::Up | MemberState::Suspect))
            .min_by_key(|(a, _)| (self.up_number(members, local, a), (*a).clone()))
            .map(|(a, _)| a.clone());
        if oldest != self.coordinator_at {
            self.coordinator_moved(oldest, now);
        }
        self.pump(now);
        self.check_left();
    }

    /// When [`handle_timeout`](Regions::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let regions = self.types.values().filter_map(|t| t.region.poll_timeout());
        let coordinators = self
            .coordinators
            .values()
            .filter_map(Coordinator::poll_timeout);
        regions.chain(coordinators).min()
    }

    /// Runs the regions' and coordinators' timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        for t in self.types.values_mut() {
            t.region.handle_timeout(now);
        }
        for c in self.coordinators.values_mut() {
            c.handle_timeout(now);
        }
        self.pump(now);
    }

    /// A control packet arrived (its sender is named inside).
    ///
    /// # Errors
    ///
    /// [`crate::wire::WireError`] for a malformed packet (counted and
    /// dropped).
    pub fn handle_control(
        &mut self,
        now: Instant,
        packet: &Bytes,
    ) -> Result<(), crate::wire::WireError> {
        let message = Message::decode(packet).inspect_err(|_| self.stats.bad_packets += 1)?;
        self.on_control(message, now);
        self.pump(now);
        Ok(())
    }

    /// The next control packet to send.
    pub fn poll_transmit(&mut self) -> Option<(Arc<str>, Bytes)> {
        self.transmits.pop_front()
    }

    /// The next thing for the host to do.
    pub fn poll_event(&mut self) -> Option<Event<P>> {
        self.events.pop_front()
    }

    /// The counters now.
    pub fn stats(&self) -> RegionsStats {
        let mut stats = self.stats.clone();
        stats.active = self
            .types
            .iter()
            .map(|(name, t)| (name.clone(), t.region.active()))
            .collect();
        stats.shards = self
            .types
            .iter()
            .map(|(name, t)| (name.clone(), t.region.homed().count()))
            .collect();
        stats.held = self.types.values().map(|t| t.region.held()).sum();
        stats.coordinator = self.coordinator_at.as_ref() == Some(&self.me);
        stats
    }

    fn up_number(&self, members: &[Member], local: &Member, address: &str) -> u64 {
        if *local.address == *address {
            return local.up_number;
        }
        members
            .iter()
            .find(|m| *m.address == *address)
            .map_or(u64::MAX, |m| m.up_number)
    }

    fn type_state(&mut self, entity_type: &Arc<str>, now: Instant) -> &mut TypeState<P> {
        let (me, config) = (&self.me, &self.config);
        self.types
            .entry(entity_type.clone())
            .or_insert_with(|| TypeState {
                region: Region::new(me.clone(), entity_type.clone(), config.region(), now),
                hosts: false,
                drained: false,
                placement: Placement::Spread,
            })
    }

    fn coordinator_moved(&mut self, to: Option<Arc<str>>, now: Instant) {
        if self.coordinator_at.as_ref() == Some(&self.me) {
            // Another member's coordinators decide from now on.
            self.coordinators.clear();
        }
        if to.as_ref() == Some(&self.me) {
            self.generation = self.generation.wrapping_add(1);
        }
        self.coordinator_at = to.clone();
        let Some(at) = to else { return };
        let names: Vec<Arc<str>> = self.types.keys().cloned().collect();
        for entity_type in names {
            let t = self.types.get_mut(&entity_type).expect("listed");
            if t.hosts {
                // The renewal reports what it hosts (a shard homed
                // elsewhere meanwhile is revoked in the answer).
                t.region.renew_now(now);
                if self.leaving {
                    self.control(&at, &entity_type, Body::Leaving);
                }
            } else {
                // It routes by homes it knows: it must hear of hand-offs.
                self.control(&at, &entity_type, Body::Follow);
            }
            self.types
                .get_mut(&entity_type)
                .expect("listed")
                .region
                .reask();
        }
    }

    /// Queues a control message (to itself: handled in the next pump).
    fn control(&mut self, to: &Arc<str>, entity_type: &str, body: Body) {
        let message = Message {
            from: self.me.clone(),
            entity_type: entity_type.into(),
            body,
        };
        if *to == self.me {
            self.loopback.push_back(message);
        } else {
            self.transmits.push_back((to.clone(), message.encode()));
        }
    }

    /// Carries out every region's and coordinator's output, and the
    /// control messages to itself, until none is left.
    fn pump(&mut self, now: Instant) {
        loop {
            let mut busy = false;
            let names: Vec<Arc<str>> = self.types.keys().cloned().collect();
            for entity_type in &names {
                while let Some(o) = self
                    .types
                    .get_mut(entity_type)
                    .and_then(|t| t.region.poll_output())
                {
                    busy = true;
                    self.region_output(entity_type, o);
                }
            }
            let names: Vec<Arc<str>> = self.coordinators.keys().cloned().collect();
            for entity_type in &names {
                while let Some(o) = self
                    .coordinators
                    .get_mut(entity_type)
                    .and_then(Coordinator::poll_output)
                {
                    busy = true;
                    self.coordinator_output(entity_type, o);
                }
            }
            while let Some(message) = self.loopback.pop_front() {
                busy = true;
                self.on_control(message, now);
            }
            if !busy {
                return;
            }
        }
    }

    fn region_output(&mut self, entity_type: &Arc<str>, o: RegionOutput<P>) {
        let t = entity_type.clone();
        let to_coordinator = |s: &mut Self, body| {
            if let Some(at) = s.coordinator_at.clone() {
                s.control(&at, entity_type, body);
            }
        };
        match o {
            RegionOutput::AskHome(shard) => to_coordinator(self, Body::AskHome(shard)),
            RegionOutput::HandOffAck(shard, handoff) => {
                to_coordinator(self, Body::HandOffAck(shard, handoff));
            }
            RegionOutput::ShardStopped(shard, handoff) => {
                self.stats.handoffs += 1;
                to_coordinator(self, Body::ShardStopped(shard, handoff));
            }
            RegionOutput::Renew {
                seq,
                leased,
                hosted,
                echo,
            } => {
                let (hosts, placement) = self
                    .types
                    .get(entity_type)
                    .map_or((false, Placement::Spread), |s| (s.hosts, s.placement));
                if hosts && !self.downed {
                    let body = Body::Renew {
                        seq,
                        leased,
                        placement,
                        hosted,
                        echo,
                    };
                    to_coordinator(self, body);
                }
            }
            RegionOutput::Forward { to, id, message } => self.events.push_back(Event::Forward {
                entity_type: t,
                to,
                id,
                parcel: message,
            }),
            RegionOutput::Activate(id) => {
                self.stats.activations += 1;
                self.events
                    .push_back(Event::Activate { entity_type: t, id });
            }
            RegionOutput::Deliver { id, message } => self.events.push_back(Event::Deliver {
                entity_type: t,
                id,
                parcel: message,
            }),
            RegionOutput::LeaseLapsed { active } => {
                self.stats.lease_lapses += 1;
                self.events.push_back(Event::LeaseLapsed {
                    entity_type: t,
                    active,
                });
            }
            RegionOutput::Passivate(id) => {
                self.stats.passivations += 1;
                self.events
                    .push_back(Event::Passivate { entity_type: t, id });
            }
            RegionOutput::Refuse { id, message, error } => {
                self.stats.refusals += 1;
                self.events.push_back(Event::Refuse {
                    entity_type: t,
                    id,
                    parcel: message,
                    error,
                });
            }
            RegionOutput::ShardStarted(shard) => self.events.push_back(Event::ShardStarted {
                entity_type: t,
                shard,
            }),
            RegionOutput::Remember(id) => self
                .events
                .push_back(Event::Remember { entity_type: t, id }),
            RegionOutput::Forget(id) => self.events.push_back(Event::Forget { entity_type: t, id }),
            RegionOutput::Marker { shard, to, handoff } => self.events.push_back(Event::Marker {
                entity_type: t,
                shard,
                to,
                handoff,
            }),
        }
    }

    fn coordinator_output(&mut self, entity_type: &Arc<str>, o: CoordinatorOutput) {
        match o {
            CoordinatorOutput::Home { to, shard, home } => {
                self.control(&to, entity_type, Body::Home { shard, home });
            }
            CoordinatorOutput::BeginHandOff {
                to,
                shard,
                from,
                handoff,
            } => {
                let body = Body::BeginHandOff {
                    shard,
                    handoff,
                    from,
                };
                self.control(&to, entity_type, body);
            }
            CoordinatorOutput::HandOff {
                to,
                shard,
                regions,
                handoff,
            } => {
                let body = Body::HandOff {
                    shard,
                    handoff,
                    regions,
                };
                self.control(&to, entity_type, body);
            }
            CoordinatorOutput::Drained { to } => self.control(&to, entity_type, Body::Drained),
            CoordinatorOutput::NoHome { to, shard } => {
                self.control(&to, entity_type, Body::NoHome(shard));
            }
            CoordinatorOutput::Renewed {
                to,
                seq,
                revoked,
                stamp,
            } => {
                let body = Body::Renewed {
                    seq,
                    revoked,
                    stamp,
                };
                self.control(&to, entity_type, body);
            }
            CoordinatorOutput::NotRenewed { to, seq, stamp } => {
                self.control(&to, entity_type, Body::NotRenewed { seq, stamp });
            }
        }
    }

    fn on_control(&mut self, message: Message, now: Instant) {
        let Message {
            from,
            entity_type,
            body,
        } = message;
        match body {
            Body::AskHome(_)
            | Body::HandOffAck(..)
            | Body::ShardStopped(..)
            | Body::Renew { .. }
            | Body::Leaving
            | Body::Follow => self.for_coordinator(from, &entity_type, body, now),
            Body::Home { .. }
            | Body::BeginHandOff { .. }
            | Body::HandOff { .. }
            | Body::Renewed { .. }
            | Body::NotRenewed { .. }
            | Body::NoHome(_)
            | Body::Drained => self.coordinator_said(&from, &entity_type, body, now),
            Body::Refused { request, error } => {
                self.events.push_back(Event::Refused { request, error });
            }
            Body::Delivered(request) => self.events.push_back(Event::Delivered { request }),
        }
    }

    fn for_coordinator(
        &mut self,
        from: Arc<str>,
        entity_type: &Arc<str>,
        body: Body,
        now: Instant,
    ) {
        if self.coordinator_at.as_ref() != Some(&self.me) || self.downed {
            return;
        }
        let state = self.view.get(&from).copied();
        let up = matches!(state, Some(MemberState::Up | MemberState::Suspect));
        let not_gone = state.is_some_and(|s| !gone_state(s));
        let config = self.config.coordinator();
        // Unique among the type's coordinators: 24 bits of up-number, 8 of
        // generation.
        let epoch = ((self.up_number as u32) << 8) | u32::from(self.generation);
        let cut_off = self.cut_off;
        let leaving: Vec<Arc<str>> = self
            .view
            .iter()
            .filter(|(_, s)| **s == MemberState::Leaving)
            .map(|(a, _)| a.clone())
            .collect();
        let c = self
            .coordinators
            .entry(entity_type.clone())
            .or_insert_with(|| {
                let mut c = Coordinator::new(config, now, epoch);
                for member in &leaving {
                    c.member_leaving(member);
                }
                c.set_cut_off(cut_off);
                c
            });
        match body {
            Body::AskHome(shard) => {
                // A member that routes without hosting hears of hand-offs
                // from now on (only while up: a late question from a gone
                // member would hold every hand-off for its ack).
                if up && not_gone {
                    c.follow(from.clone());
                }
                c.ask_home(from, shard, now);
            }
            Body::HandOffAck(shard, handoff) => c.hand_off_ack(&from, shard, handoff),
            Body::ShardStopped(shard, handoff) => c.shard_stopped(&from, shard, handoff, now),
            Body::Renew {
                seq,
                leased,
                placement,
                hosted,
                echo,
            } => {
                if placement == Placement::Oldest {
                    self.oldest_types.insert(entity_type.clone());
                }
                let c = self
                    .coordinators
                    .get_mut(entity_type)
                    .expect("created above");
                let known = c.allocation().regions().any(|(r, _)| *r == from);
                if up && !known {
                    c.region_up(from.clone(), now);
                }
                // A downed member's lease is never renewed: it runs out,
                // and its shards move after it (`ALGORITHM.md`).
                if (up || known) && not_gone {
                    c.renew(from.clone(), seq, leased, &hosted, echo, now);
                    if state == Some(MemberState::Leaving) && !c.allocation().is_draining(&from) {
                        c.region_leaving(&from);
                    }
                }
            }
            Body::Follow if up && not_gone => {
                if let Some(c) = self.coordinators.get_mut(entity_type) {
                    c.follow(from);
                }
            }
            Body::Leaving => {
                // A singleton's type picks its next oldest before the
                // leaver's shards move: they go there, not to the least
                // loaded.
                self.pin_oldest(entity_type, Some(&from), now);
                if let Some(c) = self.coordinators.get_mut(entity_type) {
                    c.region_leaving(&from);
                }
            }
            _ => {}
        }
        self.pin_oldest(entity_type, None, now);
    }

    /// Pins a [`Placement::Oldest`] type's shards to the region of the
    /// oldest member that is up and not leaving (nor `leaver`), if this
    /// member runs its coordinator.
    fn pin_oldest(&mut self, entity_type: &Arc<str>, leaver: Option<&str>, now: Instant) {
        if !self.oldest_types.contains(entity_type) {
            return;
        }
        let Some(c) = self.coordinators.get_mut(entity_type) else {
            return;
        };
        let oldest = c
            .allocation()
            .regions()
            .map(|(r, _)| r)
            .filter(|r| {
                matches!(
                    self.view.get(*r),
                    Some(MemberState::Up | MemberState::Suspect)
                ) && !c.allocation().is_draining(r)
                    && leaver.is_none_or(|l| ***r != *l)
            })
            .min_by_key(|r| (self.ups.get(*r).copied().unwrap_or(u64::MAX), (*r).clone()))
            .cloned();
        c.pin(oldest, now);
    }

    fn coordinator_said(
        &mut self,
        from: &Arc<str>,
        entity_type: &Arc<str>,
        body: Body,
        now: Instant,
    ) {
        // Only the coordinator this member's view names is listened to.
        if self.coordinator_at.as_ref() != Some(from) {
            return;
        }
        let t = self.type_state(entity_type, now);
        match body {
            Body::Home { shard, home } => t.region.home_is(shard, home, now),
            Body::BeginHandOff {
                shard,
                handoff,
                from,
            } => t.region.begin_hand_off(shard, from, handoff, now),
            Body::HandOff {
                shard,
                handoff,
                regions,
            } => t.region.hand_off(shard, handoff, regions),
            Body::Renewed {
                seq,
                revoked,
                stamp,
            } => {
                t.region.stamped(stamp);
                t.region.renewed(seq, &revoked, now);
            }
            Body::NotRenewed { stamp, .. } => t.region.stamped(stamp),
            Body::NoHome(shard) => t.region.no_home(shard),
            Body::Drained => {
                t.drained = true;
                self.check_left();
            }
            _ => {}
        }
    }

    fn check_left(&mut self) {
        let no_coordinator = self.coordinator_at.is_none();
        let drained = |t: &TypeState<P>| {
            !t.hosts || t.drained || (no_coordinator && t.region.homed().next().is_none())
        };
        if self.leaving && !self.left && self.types.values().all(drained) {
            self.left = true;
            self.events.push_back(Event::Left);
        }
    }
}

/// Whether a member in `state` is out of the cluster for sharding.
fn gone_state(state: MemberState) -> bool {
    matches!(state, MemberState::Down | MemberState::Removed)
}

#[cfg(test)]
mod tests;
