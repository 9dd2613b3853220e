//! A region as one machine: routing, the lease, the active entities, and
//! the old home's side of a hand-off (`ALGORITHM.md`).
//!
//! The caller (the region's actor, later under the shared driver) feeds it
//! messages for entities and the coordinator's and other regions' words,
//! and carries out its [`RegionOutput`]s: forward to another region,
//! activate, deliver, passivate, send markers and acks, renew the lease.
//!
//! Guarantees, tested below: an entity is activated only while the lease
//! holds; a message for a local entity is delivered once, in order per
//! entity, also across a passivation (held while it stops, then it is
//! activated again); a shard handed over is stopped only after every
//! region's marker, with every message sent before the markers delivered;
//! a lost lease passivates everything at once and refuses what comes
//! after.
//!
//! Sans-IO: time comes in as `now`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::entities::{Entities, Touch};
use crate::lease::{LeaseState, RegionLease, Stamp};
use crate::routing::{MarkerWait, RouteError, Routed, Routing, RoutingOutput};
use crate::shard::{shard_of, EntityId, HandOffId, ShardId};

/// A region's settings.
#[derive(Debug, Clone, Copy)]
pub struct RegionConfig {
    /// The type's shard count.
    pub shards: u32,
    /// Messages held per shard while its home is unknown or moving.
    pub held_limit: usize,
    /// Entities running at once.
    pub max_active: usize,
    /// An entity without a message this long is passivated.
    pub passivate_after: Duration,
    /// The lease's length; renewed every third of it.
    pub lease: Duration,
}

/// Why a message to an entity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityError {
    /// Its shard's messages wait for a home and the bound is reached.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// The region hosting it holds no lease (not granted yet, or lost: cut
    /// off from the coordinator), and as many messages as it holds already
    /// wait for one.
    #[error("the region hosting it holds no lease (not granted yet, or lost: cut off from the coordinator) and its buffer is full; try again later")]
    Unavailable,
    /// No member hosts the entity type (none registered it).
    #[error("no member hosts this entity type (none registered it)")]
    NoRegion,
    /// The member it was sent to crashed or left before it was handled
    /// (after a crash, messages in flight to the member are lost).
    #[error("the member hosting it went away before it was handled; it may not have been")]
    Lost,
}

/// What the caller must do, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum RegionOutput<M> {
    /// Ask the coordinator for a shard's home.
    AskHome(ShardId),
    /// The lease ran out before a renewal was answered (the coordinator
    /// is unreachable, or this member answered its renewal timer late):
    /// the `active` entities are passivated, and messages to its shards
    /// are held (bounded), then refused, until it is renewed. For the
    /// operator: a member that keeps losing its lease needs a longer one.
    LeaseLapsed {
        /// Entities active when it ran out.
        active: usize,
    },
    /// Send a message to the region hosting its entity.
    Forward {
        /// That region.
        to: Arc<str>,
        /// The entity.
        id: EntityId,
        /// The message.
        message: M,
    },
    /// Start the entity (its factory), before the delivery that follows.
    Activate(EntityId),
    /// Hand a message to the running entity.
    Deliver {
        /// The entity.
        id: EntityId,
        /// The message.
        message: M,
    },
    /// Stop the entity (its `stopping` hook runs); report it with
    /// [`Region::entity_stopped`].
    Passivate(EntityId),
    /// Refuse a message to its sender.
    Refuse {
        /// The entity.
        id: EntityId,
        /// The message.
        message: M,
        /// Why.
        error: EntityError,
    },
    /// Send a hand-off marker to the shard's old home, behind this region's
    /// messages to it.
    Marker {
        /// The shard.
        shard: ShardId,
        /// The old home.
        to: Arc<str>,
        /// The hand-off.
        handoff: HandOffId,
    },
    /// Tell the coordinator this region holds the shard's messages.
    HandOffAck(ShardId, HandOffId),
    /// Tell the coordinator the shard stopped here.
    ShardStopped(ShardId, HandOffId),
    /// A remembering region ([`Region::remember`]): the shard is hosted
    /// here from now on, under a lease that holds. Read the ids remembered
    /// for it and [`wake`](Region::wake) each.
    ShardStarted(ShardId),
    /// A remembering region: this entity was activated by a message; add
    /// it to its shard's remembered ids.
    Remember(EntityId),
    /// A remembering region: this entity is passivated because it was idle
    /// or to make room, not because its shard stops here; take it out of
    /// its shard's remembered ids.
    Forget(EntityId),
    /// Send the coordinator a lease renewal with this number, and the
    /// shards this region hosts.
    Renew {
        /// The request's number.
        seq: u64,
        /// The lease still holds (the report is current).
        leased: bool,
        /// The shards homed here.
        hosted: Vec<ShardId>,
        /// The mark of the coordinator's last answer heard here.
        echo: Stamp,
    },
}

/// One region of one entity type. See the [module docs](self).
#[derive(Debug)]
pub struct Region<M> {
    me: Arc<str>,
    entity_type: Arc<str>,
    config: RegionConfig,
    routing: Routing<(EntityId, M)>,
    lease: RegionLease,
    next_renew: Instant,
    entities: Entities,
    /// Shards the coordinator named this region the home of, until they
    /// stopped here (a hand-off) or the lease ran out.
    homed: BTreeSet<ShardId>,
    /// Active entities (running or stopping) of each shard hosted here.
    hosted: BTreeMap<ShardId, BTreeSet<EntityId>>,
    /// Messages for an entity that is stopping, delivered after it is
    /// activated again.
    waiting: BTreeMap<EntityId, VecDeque<M>>,
    /// Old-home hand-offs waiting for markers.
    markers: BTreeMap<ShardId, MarkerWait>,
    /// Markers that came before the coordinator's `HandOff` (they travel
    /// on other paths), by hand-off; those of other hand-offs than the one
    /// awaited are stale and dropped when it is.
    early_markers: BTreeMap<ShardId, BTreeMap<HandOffId, BTreeSet<Arc<str>>>>,
    /// Shards stopping after their hand-off: `ShardStopped` once empty.
    stopping: BTreeMap<ShardId, HandOffId>,
    /// Messages for local entities while no lease holds (before the first,
    /// or after one ran out; bounded by `held_limit`): delivered once it is
    /// renewed, or routed to their shard's home if it is not here any more.
    before_lease: VecDeque<(ShardId, EntityId, M)>,
    /// The mark of the coordinator's last answer to a renewal, echoed in
    /// the next one.
    echo: Stamp,
    /// Whether it reports what to remember ([`Region::remember`]).
    remember: bool,
    /// Remembering: the homed shards reported started under the lease
    /// that holds now (cleared when it runs out: they start again).
    started: BTreeSet<ShardId>,
    /// Remembering: entities woken while still stopping, woken again once
    /// they stopped.
    rewake: BTreeSet<EntityId>,
    /// Entities kept running wherever their shard is hosted
    /// ([`Region::keep_running`]).
    keep: BTreeSet<EntityId>,
    /// Its member was downed ([`Region::lose_lease`]) and no coordinator
    /// answered a renewal sent since: a `Home` naming this region now may
    /// have been meant for its member's previous life (sent before the
    /// coordinator saw it downed and re-homed its shards, and held in a
    /// link through a partition), so it is not taken.
    unconfirmed_life: bool,
    out: VecDeque<RegionOutput<M>>,
}

impl<M> Region<M> {
    /// The region `me` of `entity_type`, starting at `now`: it asks for its
    /// lease at once.
    pub fn new(me: Arc<str>, entity_type: Arc<str>, config: RegionConfig, now: Instant) -> Self {
        let mut region = Self {
            me,
            entity_type,
            routing: Routing::new(config.held_limit),
            lease: RegionLease::new(config.lease),
            next_renew: now,
            entities: Entities::new(config.max_active, config.passivate_after),
            homed: BTreeSet::new(),
            hosted: BTreeMap::new(),
            waiting: BTreeMap::new(),
            markers: BTreeMap::new(),
            early_markers: BTreeMap::new(),
            stopping: BTreeMap::new(),
            before_lease: VecDeque::new(),
            echo: Stamp::NONE,
            remember: false,
            started: BTreeSet::new(),
            rewake: BTreeSet::new(),
            keep: BTreeSet::new(),
            unconfirmed_life: false,
            out: VecDeque::new(),
            config,
        };
        region.renew_if_due(now);
        region
    }

    /// A message for entity `id`.
    pub fn send(&mut self, id: EntityId, message: M, now: Instant) {
        let shard = shard_of(&self.entity_type, &id, self.config.shards);
        match self.routing.route(shard, (id, message)) {
            Ok(Routed::To(home, (id, message))) => self.dispatch(home, id, message, now),
            Ok(Routed::Held) => {}
            Err((error, (id, message))) => self.out.push_back(RegionOutput::Refuse {
                id,
                message,
                error: error.into(),
            }),
        }
        self.drain_routing(now);
    }

    /// A message for entity `id` that another region forwarded here,
    /// taking this region for its home. While the shard is homed here and
    /// not stopping, it is handled here, even during its hand-off: it left
    /// its sender before that sender's marker, so it belongs to this
    /// incarnation. Otherwise (the sender's route is stale) it is routed
    /// on, like a message sent here.
    pub fn arrived(&mut self, id: EntityId, message: M, now: Instant) {
        let shard = shard_of(&self.entity_type, &id, self.config.shards);
        if self.homed.contains(&shard) && !self.stopping.contains_key(&shard) {
            self.local(shard, id, message, now);
        } else {
            self.send(id, message, now);
        }
    }

    /// From now on this region reports what to remember: the entities
    /// activated by a message ([`RegionOutput::Remember`]), those
    /// passivated for idleness or room ([`RegionOutput::Forget`]), and each
    /// shard as it starts here ([`RegionOutput::ShardStarted`]), so the
    /// caller can [`wake`](Region::wake) the ids remembered for it.
    pub fn remember(&mut self, now: Instant) {
        self.remember = true;
        self.start_shards(now);
    }

    /// Keeps entity `id` running (a singleton): this region asks for its
    /// shard's home now, and runs it, with no message, while it hosts the
    /// shard under a lease; it is never passivated for idleness or room.
    /// Every region of the type must keep the same ids.
    pub fn keep_running(&mut self, id: EntityId, now: Instant) {
        let shard = shard_of(&self.entity_type, &id, self.config.shards);
        if self.keep.insert(id.clone()) {
            self.out.push_back(RegionOutput::AskHome(shard));
        }
        self.started.remove(&shard);
        self.start_shards(now);
    }

    /// Activates entity `id` without a message (it is remembered for a
    /// shard that started here): nothing if it is active or stopping, or
    /// if its shard is not hosted here under a lease that holds now (its
    /// shard starts again, here or elsewhere, and is woken then).
    pub fn wake(&mut self, id: EntityId, now: Instant) {
        let shard = shard_of(&self.entity_type, &id, self.config.shards);
        if !self.homed.contains(&shard)
            || self.stopping.contains_key(&shard)
            || !self.lease.holds(now)
        {
            return;
        }
        if self.entities.is_known(&id) {
            // Still stopping from before (a lease that ran out): it starts
            // again once it stopped.
            self.rewake.insert(id);
            return;
        }
        if let Touch::Activate { evict } = self.touch(&id, now) {
            if let Some(lru) = evict {
                self.evict(lru);
            }
            self.hosted.entry(shard).or_default().insert(id.clone());
            self.out.push_back(RegionOutput::Activate(id));
        }
    }

    fn touch(&mut self, id: &EntityId, now: Instant) -> Touch {
        if self.keep.contains(id) {
            self.entities.touch_kept(id, now)
        } else {
            self.entities.touch(id, now)
        }
    }

    /// The shards homed here (what a new coordinator is told).
    pub fn homed(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.homed.iter().copied()
    }

    /// Active entities (running or stopping).
    pub fn active(&self) -> usize {
        self.entities.active()
    }

    /// Messages held: for a shard's home, or for the first lease.
    pub fn held(&self) -> usize {
        self.routing.held_total() + self.before_lease.len()
    }

    /// The coordinator named `home` for `shard`. After its member was
    /// downed, a `Home` naming this region is dropped until the
    /// coordinator answered a renewal sent since: the link from the
    /// coordinator is in order, so what comes after that answer was sent
    /// knowing this member's new life, and what came before may be meant
    /// for the old one, whose shards went elsewhere (the shard's home is
    /// asked for again at the next renewal).
    pub fn home_is(&mut self, shard: ShardId, home: Arc<str>, now: Instant) {
        if home == self.me && self.unconfirmed_life {
            return;
        }
        if home == self.me {
            self.homed.insert(shard);
        } else {
            self.homed.remove(&shard);
            self.started.remove(&shard);
        }
        self.routing.home_is(shard, home);
        self.drain_routing(now);
        self.start_shards(now);
    }

    /// The coordinator says no region hosts the type: the messages waiting
    /// for `shard`'s home are refused, and the next one asks again.
    pub fn no_home(&mut self, shard: ShardId) {
        for (id, message) in self.routing.give_up(shard) {
            self.out.push_back(RegionOutput::Refuse {
                id,
                message,
                error: EntityError::NoRegion,
            });
        }
    }

    /// The coordinator began hand-off `handoff` of `shard` from
    /// `old_home`.
    pub fn begin_hand_off(
        &mut self,
        shard: ShardId,
        old_home: Arc<str>,
        handoff: HandOffId,
        now: Instant,
    ) {
        self.routing.begin_hand_off(shard, old_home, handoff);
        self.drain_routing(now);
    }

    /// As the old home: stop `shard` once the markers of `regions` for
    /// `handoff` came. The same hand-off again (its answer was late or
    /// lost) changes nothing, or, for a shard not homed here any more, is
    /// answered again at once.
    pub fn hand_off(
        &mut self,
        shard: ShardId,
        handoff: HandOffId,
        regions: impl IntoIterator<Item = Arc<str>>,
    ) {
        if self
            .markers
            .get(&shard)
            .is_some_and(|w| w.handoff() == handoff)
            || self.stopping.get(&shard) == Some(&handoff)
        {
            return;
        }
        if !self.homed.contains(&shard) {
            self.out
                .push_back(RegionOutput::ShardStopped(shard, handoff));
            return;
        }
        let mut wait = MarkerWait::new(shard, handoff, regions);
        let early = self.early_markers.remove(&shard).unwrap_or_default();
        for from in early
            .into_iter()
            .filter(|(h, _)| *h == handoff)
            .flat_map(|(_, f)| f)
        {
            wait.marker(&from);
        }
        if wait.done() {
            self.stop_shard(shard, handoff);
        } else {
            self.markers.insert(shard, wait);
        }
    }

    /// `from`'s marker for hand-off `handoff` of `shard` arrived (behind
    /// its messages).
    pub fn marker(&mut self, from: &str, shard: ShardId, handoff: HandOffId) {
        if let Some(wait) = self
            .markers
            .get_mut(&shard)
            .filter(|w| w.handoff() == handoff)
        {
            if wait.marker(from) {
                self.markers.remove(&shard);
                self.stop_shard(shard, handoff);
            }
            return;
        }
        // A marker repeated after its wait ended is dropped; any other is
        // early (or stale, and dropped once its shard's hand-off waits).
        if self.stopping.get(&shard) != Some(&handoff) {
            let early = self.early_markers.entry(shard).or_default();
            early.entry(handoff).or_default().insert(from.into());
            // Repeats of ended hand-offs are all that pile up: keep a few.
            while early.len() > 8 {
                early.pop_first();
            }
        }
    }

    /// `region` is gone: routes to it are asked for again, and no marker
    /// is awaited from it.
    pub fn region_gone(&mut self, region: &str, now: Instant) {
        self.routing.region_gone(region);
        let done: Vec<(ShardId, HandOffId)> = self
            .markers
            .iter_mut()
            .filter_map(|(shard, w)| w.region_gone(region).then_some((*shard, w.handoff())))
            .collect();
        for (shard, handoff) in done {
            self.markers.remove(&shard);
            self.stop_shard(shard, handoff);
        }
        self.drain_routing(now);
    }

    /// The coordinator answered a renewal (granted or not) with `stamp`:
    /// echoed in the next renewal, so the coordinator counts this region
    /// as heard from when it answered.
    pub fn stamped(&mut self, stamp: Stamp) {
        self.echo = stamp;
    }

    /// The coordinator answered renewal `seq`: the shards it `revoked`
    /// (reported here but homed elsewhere) are given up first, then the
    /// lease is extended and the messages that waited for the first lease
    /// are delivered.
    pub fn renewed(&mut self, seq: u64, revoked: &[ShardId], now: Instant) {
        for &shard in revoked {
            self.started.remove(&shard);
            if self.homed.remove(&shard) {
                self.passivate_shard(shard);
                let me = self.me.clone();
                self.routing.forget(shard, &me);
            }
        }
        self.drain_routing(now);
        let ok = self.lease.answered(seq);
        if ok {
            // An answer to a request sent since the downing (`give_up`
            // forgot the older ones): later `Home`s are for this life.
            self.unconfirmed_life = false;
        }
        if ok && self.lease.holds(now) {
            self.release_waiting(now);
            self.start_shards(now);
        }
    }

    /// The caller stopped entity `id`.
    pub fn entity_stopped(&mut self, id: &EntityId, now: Instant) {
        self.entities.stopped(id);
        let shard = shard_of(&self.entity_type, id, self.config.shards);
        if let Some(ids) = self.hosted.get_mut(&shard) {
            ids.remove(id);
        }
        if let Some(waiting) = self.waiting.remove(id) {
            if !self.homed.contains(&shard) {
                // Its shard was taken from this region meanwhile (revoked,
                // or the member downed): to its home, ahead of what came
                // after.
                let messages = waiting.into_iter().map(|m| (id.clone(), m)).collect();
                self.routing.route_first(shard, messages);
                self.drain_routing(now);
            } else if self.lease.holds(now) {
                // Sent before anything that stops its shard: delivered here.
                for message in waiting {
                    self.local(shard, id.clone(), message, now);
                }
                if self.stopping.contains_key(&shard) {
                    self.passivate(id.clone());
                }
            } else {
                // The lease ran out meanwhile: they wait for it ahead of
                // everything that came after them (already accepted, so
                // past the bound if need be).
                for message in waiting.into_iter().rev() {
                    self.before_lease.push_front((shard, id.clone(), message));
                }
            }
        }
        self.shard_stopped_if_empty(shard);
        if self.rewake.remove(id) && !self.entities.is_known(id) {
            self.wake(id.clone(), now);
            if self.remember && self.entities.is_known(id) {
                // Forgotten meanwhile, perhaps (it stopped idle): again.
                self.out.push_back(RegionOutput::Remember(id.clone()));
            }
        }
    }

    /// When [`handle_timeout`](Region::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            Some(self.next_renew),
            self.entities.poll_timeout(),
            self.lease.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Renews the lease when due, passivates idle entities, and stops
    /// everything when the lease ran out.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.renew_if_due(now);
        for id in self.entities.handle_timeout(now) {
            self.out.push_back(RegionOutput::Passivate(id.clone()));
            if self.remember {
                self.out.push_back(RegionOutput::Forget(id));
            }
        }
        if self.lease.handle_timeout(now) == LeaseState::Expired {
            self.out.push_back(RegionOutput::LeaseLapsed {
                active: self.entities.active(),
            });
            // Renewed, the shards start again: what they remember wakes.
            self.started.clear();
            // Its shards stay its own (the coordinator moves them only
            // after its member is down, and then `lose_lease` follows):
            // their messages are refused until the lease is renewed.
            self.passivate_all();
        }
    }

    /// Gives the lease up and stops everything at once: this region's
    /// member was downed. Its shards are no longer its own (they move
    /// once the coordinator counts it stopped), so their homes are asked
    /// for again.
    pub fn lose_lease(&mut self, now: Instant) {
        self.unconfirmed_life = true;
        self.lease.give_up();
        self.passivate_all();
        self.homed.clear();
        self.started.clear();
        let me = self.me.clone();
        self.routing.region_gone(&me);
        self.drain_routing(now);
        // What waited for the lease goes to the shards' new homes.
        self.release_waiting(now);
    }

    /// Asks the coordinator again for every shard whose messages wait for
    /// a home (a new coordinator took over: the old one may never answer).
    pub fn reask(&mut self) {
        let mut shards: BTreeSet<ShardId> = self.routing.waiting().into_iter().collect();
        // A kept entity's shard with no home known: it must start somewhere.
        for id in &self.keep {
            let shard = shard_of(&self.entity_type, id, self.config.shards);
            if self.routing.home(shard).is_none() {
                shards.insert(shard);
            }
        }
        for shard in shards {
            self.out.push_back(RegionOutput::AskHome(shard));
        }
    }

    /// Sends a lease renewal now (to a new coordinator).
    pub fn renew_now(&mut self, now: Instant) {
        self.next_renew = now;
        self.renew_if_due(now);
    }

    fn passivate_all(&mut self) {
        let all: Vec<EntityId> = self.hosted.values().flatten().cloned().collect();
        for id in all {
            self.passivate(id);
        }
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<RegionOutput<M>> {
        self.out.pop_front()
    }

    fn renew_if_due(&mut self, now: Instant) {
        if now >= self.next_renew {
            let leased = self.lease.holds(now);
            let seq = self.lease.request(now);
            let hosted = self.homed.iter().copied().collect();
            self.out.push_back(RegionOutput::Renew {
                seq,
                leased,
                hosted,
                echo: self.echo,
            });
            // A question or its answer lost with a link: asked again.
            self.reask();
            self.next_renew = now + self.config.lease / 3;
        }
    }

    fn drain_routing(&mut self, now: Instant) {
        while let Some(o) = self.routing.poll_output() {
            match o {
                RoutingOutput::AskHome(shard) => self.out.push_back(RegionOutput::AskHome(shard)),
                RoutingOutput::Send(home, (id, message)) => self.dispatch(home, id, message, now),
                RoutingOutput::Marker { shard, to, handoff } => {
                    if to == self.me {
                        // Its own messages are all in: handled in order here.
                        self.marker(&to.clone(), shard, handoff);
                    } else {
                        self.out
                            .push_back(RegionOutput::Marker { shard, to, handoff });
                    }
                }
                RoutingOutput::HandOffAck(shard, handoff) => {
                    self.out.push_back(RegionOutput::HandOffAck(shard, handoff));
                }
            }
        }
    }

    fn dispatch(&mut self, home: Arc<str>, id: EntityId, message: M, now: Instant) {
        if home == self.me {
            let shard = shard_of(&self.entity_type, &id, self.config.shards);
            if !self.homed.contains(&shard) {
                // Routed here as the old home of a hand-off (it was held
                // since before it began) by a region that does not host
                // the shard (its lease ran out and its shards moved, or
                // its member restarted): nothing of the shard runs here,
                // and an entity started now would outlive the hand-off,
                // which finds nothing to stop and reports the shard
                // stopped at once (campaign seed 1398). Held for the new
                // home instead, in order, ahead of what comes later.
                let me = self.me.clone();
                self.routing.forget(shard, &me);
                self.send(id, message, now);
                return;
            }
            self.local(shard, id, message, now);
        } else {
            self.out.push_back(RegionOutput::Forward {
                to: home,
                id,
                message,
            });
        }
    }

    /// Delivers what waited for the lease: here if its shard still is
    /// (also a shard being stopped: it came before the markers, and the
    /// shard is reported stopped only after it), else routed to its home.
    fn release_waiting(&mut self, now: Instant) {
        let mut elsewhere: BTreeMap<ShardId, Vec<(EntityId, M)>> = BTreeMap::new();
        for (shard, id, message) in std::mem::take(&mut self.before_lease) {
            if self.homed.contains(&shard) {
                self.local(shard, id, message, now);
            } else {
                elsewhere.entry(shard).or_default().push((id, message));
            }
        }
        // Older than whatever was routed for their shards since: ahead.
        for (shard, messages) in elsewhere {
            self.routing.route_first(shard, messages);
        }
        self.drain_routing(now);
        let stopping: Vec<ShardId> = self.stopping.keys().copied().collect();
        for shard in stopping {
            self.passivate_shard(shard);
            self.shard_stopped_if_empty(shard);
        }
    }

    /// A message for an entity of a shard hosted here.
    fn local(&mut self, shard: ShardId, id: EntityId, message: M, now: Instant) {
        if !self.lease.holds(now) {
            if self.before_lease.len() < self.config.held_limit {
                self.before_lease.push_back((shard, id, message));
                return;
            }
            self.out.push_back(RegionOutput::Refuse {
                id,
                message,
                error: EntityError::Unavailable,
            });
            return;
        }
        match self.touch(&id, now) {
            Touch::Active => {}
            Touch::Activate { evict } => {
                if let Some(lru) = evict {
                    self.evict(lru);
                }
                self.hosted.entry(shard).or_default().insert(id.clone());
                self.out.push_back(RegionOutput::Activate(id.clone()));
                if self.remember {
                    self.out.push_back(RegionOutput::Remember(id.clone()));
                }
            }
            Touch::Stopping => {
                self.waiting.entry(id).or_default().push_back(message);
                return;
            }
        }
        self.out.push_back(RegionOutput::Deliver { id, message });
    }

    /// Every marker came: passivate the shard's entities, and report it
    /// stopped once they are.
    fn stop_shard(&mut self, shard: ShardId, handoff: HandOffId) {
        self.stopping.insert(shard, handoff);
        self.passivate_shard(shard);
        self.shard_stopped_if_empty(shard);
    }

    /// Asks the caller to stop every running entity of `shard`.
    fn passivate_shard(&mut self, shard: ShardId) {
        let ids: Vec<EntityId> = self
            .hosted
            .get(&shard)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default();
        for id in ids {
            self.passivate(id);
        }
    }

    /// Asks the caller to stop `id` if it is running (not already
    /// stopping).
    /// Passivates the least recently used entity to make room.
    fn evict(&mut self, lru: EntityId) {
        self.out.push_back(RegionOutput::Passivate(lru.clone()));
        if self.remember {
            self.out.push_back(RegionOutput::Forget(lru));
        }
    }

    /// Remembering: reports every homed shard not started yet under the
    /// lease that holds now.
    fn start_shards(&mut self, now: Instant) {
        if (!self.remember && self.keep.is_empty()) || !self.lease.holds(now) {
            return;
        }
        let fresh: Vec<ShardId> = self
            .homed
            .iter()
            .filter(|s| !self.started.contains(s) && !self.stopping.contains_key(s))
            .copied()
            .collect();
        for shard in fresh {
            self.started.insert(shard);
            if self.remember {
                self.out.push_back(RegionOutput::ShardStarted(shard));
            }
            let kept: Vec<EntityId> = self
                .keep
                .iter()
                .filter(|id| shard_of(&self.entity_type, id, self.config.shards) == shard)
                .cloned()
                .collect();
            for id in kept {
                self.wake(id, now);
            }
        }
    }

    fn passivate(&mut self, id: EntityId) {
        if self.entities.passivate(&id) {
            self.out.push_back(RegionOutput::Passivate(id));
        }
    }

    fn shard_stopped_if_empty(&mut self, shard: ShardId) {
        let Some(&handoff) = self.stopping.get(&shard) else {
            return;
        };
        if self.hosted.get(&shard).is_some_and(|ids| !ids.is_empty()) {
            return;
        }
        // Messages that came before the markers wait for the lease: they
        // are this incarnation's.
        if self.before_lease.iter().any(|(s, _, _)| *s == shard) {
            return;
        }
        self.hosted.remove(&shard);
        self.homed.remove(&shard);
        self.started.remove(&shard);
        self.stopping.remove(&shard);
        self.out
            .push_back(RegionOutput::ShardStopped(shard, handoff));
    }
}

#[cfg(test)]
mod tests;
