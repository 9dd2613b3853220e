//! The coordinator of one entity type: which region hosts each shard, the
//! leases, and the hand-offs (`ALGORITHM.md`).
//!
//! It answers regions' questions for a shard's home, allocating shards that
//! have none; it renews regions' leases; it rebalances on a timer, moving a
//! shard by a hand-off (`BeginHandOff` to every region, `HandOff` to the old
//! home once all acked, the new home after `ShardStopped`); and it re-homes
//! the shards of a region that is gone only once that region's lease and
//! the margin are over ([`Grants`]). It never names two homes for a shard
//! at once, and answers no question about a shard being handed over.
//!
//! Sans-IO: inputs are method calls with `now`, outputs are
//! [`CoordinatorOutput`]s the driver sends; timers through
//! [`poll_timeout`](Coordinator::poll_timeout) /
//! [`handle_timeout`](Coordinator::handle_timeout).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::allocation::{Allocation, Rebalance};
use crate::lease::{Grants, Stamp};
use crate::shard::{HandOffId, ShardId};

/// The coordinator's settings.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorConfig {
    /// Shards of the type.
    pub shards: u32,
    /// A lease's length.
    pub lease: Duration,
    /// How long after a lease's end a silent region counts as stopped.
    pub margin: Duration,
    /// How often the load is evened out.
    pub rebalance_every: Duration,
    /// The rebalancing rule.
    pub rebalance: Rebalance,
}

/// Something for the driver to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorOutput {
    /// Tell `to` that `shard` lives in `home` (an answer, or news after a
    /// hand-off to every region that asked).
    Home {
        /// The region told.
        to: Arc<str>,
        /// The shard.
        shard: ShardId,
        /// Its home.
        home: Arc<str>,
    },
    /// Tell `to` to hold `shard`'s messages and mark its old home.
    BeginHandOff {
        /// The region told.
        to: Arc<str>,
        /// The shard.
        shard: ShardId,
        /// Its old home.
        from: Arc<str>,
        /// The hand-off.
        handoff: HandOffId,
    },
    /// Tell the old home `to` to stop `shard` once the markers of
    /// `regions` arrived.
    HandOff {
        /// The old home.
        to: Arc<str>,
        /// The shard.
        shard: ShardId,
        /// The regions whose markers it waits for.
        regions: Vec<Arc<str>>,
        /// The hand-off.
        handoff: HandOffId,
    },
    /// Tell `to` that no region hosts the type (none registered it), so
    /// the messages waiting for `shard`'s home are refused.
    NoHome {
        /// The region that asked.
        to: Arc<str>,
        /// The shard.
        shard: ShardId,
    },
    /// Tell the leaving region `to` that it hosts nothing any more.
    Drained {
        /// The region.
        to: Arc<str>,
    },
    /// Answer `to`'s lease renewal `seq`.
    Renewed {
        /// The region.
        to: Arc<str>,
        /// Its request's number.
        seq: u64,
        /// Shards it reported that are not its own.
        revoked: Vec<ShardId>,
        /// The mark the region echoes in its next renewal.
        stamp: Stamp,
    },
    /// Tell `to` its renewal `seq` is not granted (no majority of the
    /// regions heard from within a lease), with a fresh mark: echoed, its
    /// next renewal counts as recent.
    NotRenewed {
        /// The region.
        to: Arc<str>,
        /// Its request's number.
        seq: u64,
        /// The mark to echo.
        stamp: Stamp,
    },
}

#[derive(Debug)]
struct HandOff {
    id: HandOffId,
    from: Arc<str>,
    to: Arc<str>,
    /// Regions told to begin (the old home waits for their markers), less
    /// those gone since.
    told: BTreeSet<Arc<str>>,
    /// Regions whose `BeginHandOff` ack has not come.
    acks: BTreeSet<Arc<str>>,
    /// `HandOff` went to the old home.
    stopping: bool,
}

/// The coordinator of one entity type. See the [module docs](self).
#[derive(Debug)]
pub struct Coordinator {
    config: CoordinatorConfig,
    allocation: Allocation,
    grants: Grants,
    handoffs: BTreeMap<ShardId, HandOff>,
    /// Shards whose home is gone, with the end of this coordinator's last
    /// lease to it (fixed when it went: a new life of its member at the
    /// same address renews a lease of its own): re-homed once that and
    /// every older coordinator's leases are over.
    orphans: BTreeMap<ShardId, Option<Instant>>,
    /// Regions waiting for a shard's home.
    askers: BTreeMap<ShardId, BTreeSet<Arc<str>>>,
    /// Shards without a home known to be hosted nowhere (stopped by a
    /// hand-off, or orphans whose lease is over) before the old
    /// coordinators' leases are surely over; after that every shard
    /// without a home is.
    free: BTreeSet<ShardId>,
    /// Leaving regions told they are drained.
    drained: BTreeSet<Arc<str>>,
    /// Regions that route to the type's shards but host none (members
    /// that did not register it): told of hand-offs as the hosting ones
    /// are, so their messages to an old home come before its markers and
    /// the later ones wait for the new home.
    followers: BTreeSet<Arc<str>>,
    /// Members the membership lists as leaving.
    leaving_members: BTreeSet<Arc<str>>,
    /// When each region last asked for a renewal (for the quorum).
    heard: BTreeMap<Arc<str>, Instant>,
    /// Its member suspects most of the cluster: no lease is renewed.
    cut_off: bool,
    /// Its epoch (in its marks).
    epoch: u32,
    /// When it started: every region renews within a lease of that, so a
    /// type with none by then is registered nowhere.
    created: Instant,
    /// A region waits for a shard that only the end of the old
    /// coordinators' leases lets this one place.
    start_wait: bool,
    next_rebalance: Instant,
    /// The next hand-off's number: this coordinator's epoch in the high
    /// 32 bits.
    next_handoff: u64,
    out: VecDeque<CoordinatorOutput>,
}

impl Coordinator {
    /// A coordinator that starts at `now` with no region. `epoch` tells
    /// it apart from every other coordinator of the type, past or future
    /// (its member's up-number and how often that member became the
    /// coordinator): the high half of its hand-offs' numbers.
    pub fn new(config: CoordinatorConfig, now: Instant, epoch: u32) -> Self {
        Self {
            allocation: Allocation::new(config.shards),
            grants: Grants::new(config.lease, config.margin),
            handoffs: BTreeMap::new(),
            orphans: BTreeMap::new(),
            askers: BTreeMap::new(),
            free: BTreeSet::new(),
            drained: BTreeSet::new(),
            followers: BTreeSet::new(),
            leaving_members: BTreeSet::new(),
            heard: BTreeMap::new(),
            cut_off: false,
            created: now,
            start_wait: false,
            next_rebalance: now + config.rebalance_every,
            next_handoff: u64::from(epoch) << 32,
            epoch,
            out: VecDeque::new(),
            config,
        }
    }

    /// The map of shards to regions.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// Hand-offs under way.
    pub fn handoffs(&self) -> usize {
        self.handoffs.len()
    }

    /// A region joined (its member is up and registered the type).
    pub fn region_up(&mut self, region: Arc<str>, now: Instant) {
        if self.drained.contains(&region) {
            // It left (its member is on its way out).
            return;
        }
        self.followers.remove(&region);
        self.allocation.add_region(region.clone());
        if self.leaving_members.contains(&region) {
            self.allocation.drain(&region);
        }
        self.serve_askers(now);
    }

    /// `region` routes messages to the type's shards without hosting any
    /// (its member did not register the type): it takes part in every
    /// hand-off from now on, until it registers or is gone.
    pub fn follow(&mut self, region: Arc<str>) {
        let hosts = self.allocation.regions().any(|(r, _)| *r == region);
        if !hosts && !self.drained.contains(&region) {
            self.followers.insert(region);
        }
    }

    /// Pins every shard of the type to `region` ([`Placement::Oldest`]:
    /// the caller names the oldest member's region, again whenever it
    /// changes): shards elsewhere are handed over to it at once.
    ///
    /// [`Placement::Oldest`]: crate::allocation::Placement::Oldest
    pub fn pin(&mut self, region: Option<Arc<str>>, now: Instant) {
        if self.allocation.pin(region) {
            self.rebalance();
            self.serve_askers(now);
        }
    }

    /// A region's member is leaving gracefully: every shard of the region
    /// is handed over now (not at the next rebalance), and it gets no new
    /// one. The region keeps its lease until it is gone.
    pub fn region_leaving(&mut self, region: &str) {
        if self.allocation.drain(region) {
            self.rebalance();
            self.report_drained();
        } else if self.drained.insert(region.into()) {
            // Never a region here: it hosts nothing, and never will.
            self.out
                .push_back(CoordinatorOutput::Drained { to: region.into() });
        }
    }

    /// A region's member left or was downed: its shards are re-homed once
    /// its lease is surely over; hand-offs from it wait for the same, those
    /// to it pick another home.
    pub fn region_gone(&mut self, region: &str, now: Instant) {
        let region: Arc<str> = region.into();
        self.drained.remove(&region);
        self.followers.remove(&region);
        self.leaving_members.remove(&region);
        self.heard.remove(&region);
        let stopped_from = self.grants.answered_end(&region);
        self.grants.forget(&region);
        for shard in self.allocation.remove_region(&region) {
            if !self.handoffs.contains_key(&shard) {
                self.orphans.insert(shard, stopped_from);
            }
        }
        let mut from_gone = Vec::new();
        for (shard, handoff) in &mut self.handoffs {
            handoff.acks.remove(&region);
            handoff.told.remove(&region);
            if handoff.from == region {
                from_gone.push(*shard);
            }
        }
        for shard in from_gone {
            // Stopped only when its lease is over: an orphan.
            self.handoffs.remove(&shard);
            self.orphans.insert(shard, stopped_from);
        }
        for askers in self.askers.values_mut() {
            askers.remove(&region);
        }
        self.advance_handoffs();
        self.rehome_orphans(now);
        self.serve_askers(now);
    }

    /// A member is leaving (the membership says so; its region may not
    /// have said it yet, or said it to another coordinator): its region,
    /// now or when it comes, gets no shard and hands over what it has.
    pub fn member_leaving(&mut self, member: &str) {
        self.leaving_members.insert(member.into());
        if self.allocation.regions().any(|(r, _)| **r == *member) {
            self.region_leaving(member);
        }
    }

    /// `region` asks where `shard` lives.
    pub fn ask_home(&mut self, region: Arc<str>, shard: ShardId, now: Instant) {
        if shard.0 >= self.config.shards {
            return;
        }
        self.askers.entry(shard).or_default().insert(region);
        self.serve_askers(now);
        self.refuse_homeless(now);
    }

    /// Whether no region hosts the type (none registered it, or all left).
    fn no_regions(&self) -> bool {
        self.allocation
            .regions()
            .all(|(r, _)| self.drained.contains(r))
    }

    /// With no region a lease after its start, the askers are told no
    /// home will come (their messages are refused, not held for ever).
    fn refuse_homeless(&mut self, now: Instant) {
        if !self.no_regions() || now < self.created + self.config.lease {
            return;
        }
        for (shard, askers) in std::mem::take(&mut self.askers) {
            for to in askers {
                self.out.push_back(CoordinatorOutput::NoHome { to, shard });
            }
        }
    }

    /// `region` renews its lease with request `seq`, reporting the shards
    /// it hosts. While this coordinator rebuilds its map (until the old
    /// coordinators' leases are surely over) it adopts a reported shard
    /// that has no home, from a region whose lease still holds (`leased`:
    /// the report of one whose lease ran out may be stale, its shards
    /// homed elsewhere meanwhile); every reported shard homed elsewhere,
    /// or not adopted, is revoked in the answer, which the region applies
    /// before its lease is extended.
    ///
    /// `echo` is the mark of this coordinator's last answer the region had
    /// heard when it sent the renewal: the region counts toward the quorum
    /// as heard from then (a renewal that waited in a link is old news),
    /// or now if it echoes no mark of this coordinator.
    pub fn renew(
        &mut self,
        region: Arc<str>,
        seq: u64,
        leased: bool,
        hosted: &[ShardId],
        echo: Stamp,
        now: Instant,
    ) {
        let heard_at = if echo.epoch == self.epoch && echo.nanos > 0 {
            (self.created + Duration::from_nanos(echo.nanos - 1)).min(now)
        } else {
            now
        };
        let before = self.heard.get(&region).copied();
        self.heard
            .insert(region.clone(), before.map_or(heard_at, |b| b.max(heard_at)));
        let stamp = self.stamp(now);
        if !self.has_quorum(now) {
            // Cut off from most regions (this member may be on the losing
            // side of a partition, whether or not its membership says so
            // yet): no lease is renewed, so they all run out. The fresh
            // mark lets a region that still follows it count again.
            self.out.push_back(CoordinatorOutput::NotRenewed {
                to: region,
                seq,
                stamp,
            });
            return;
        }
        self.grants.quorum(now);
        let rebuilding = leased && !self.grants.old_leases_over(now);
        let mut revoked = Vec::new();
        for &shard in hosted {
            let adoptable = match self.allocation.home(shard) {
                Some(home) => *home == region,
                None => {
                    rebuilding
                        && !self.orphans.contains_key(&shard)
                        && !self.handoffs.contains_key(&shard)
                        && self.allocation.adopt(region.clone(), shard) == Ok(true)
                }
            };
            if !adoptable {
                revoked.push(shard);
            }
        }
        self.grants.answer(region.clone(), now);
        self.out.push_back(CoordinatorOutput::Renewed {
            to: region,
            seq,
            revoked,
            stamp,
        });
        self.serve_askers(now);
    }

    /// The mark of an answer given at `now`.
    fn stamp(&self, now: Instant) -> Stamp {
        let since = now.saturating_duration_since(self.created).as_nanos();
        Stamp {
            epoch: self.epoch,
            nanos: u64::try_from(since).unwrap_or(u64::MAX - 1) + 1,
        }
    }

    /// `region` holds `shard`'s messages and marked its old home.
    pub fn hand_off_ack(&mut self, region: &str, shard: ShardId, id: HandOffId) {
        if let Some(handoff) = self.handoffs.get_mut(&shard).filter(|h| h.id == id) {
            handoff.acks.remove(region);
        }
        self.advance_handoffs();
    }

    /// The old home stopped `shard`: it moves to its new home.
    pub fn shard_stopped(&mut self, region: &str, shard: ShardId, id: HandOffId, now: Instant) {
        let Some(handoff) = self.handoffs.get(&shard) else {
            return;
        };
        if handoff.id != id || *handoff.from != *region || !handoff.stopping {
            return;
        }
        let handoff = self.handoffs.remove(&shard).expect("just found");
        if !self.allocation.apply(shard, &handoff.to) {
            // The new home left meanwhile: stopped everywhere, so it is
            // allocated afresh at once.
            self.free.insert(shard);
            if self.allocation.allocate(shard).is_ok() {
                self.free.remove(&shard);
            }
        }
        self.announce(shard);
        self.serve_askers(now);
        self.report_drained();
    }

    /// When [`handle_timeout`](Coordinator::handle_timeout) has work: an
    /// orphan's old lease ends, the old coordinators' leases end while a
    /// region waits, or the next rebalance.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let old = self.grants.old_leases_end();
        let orphans = self
            .orphans
            .values()
            .filter_map(move |end| old.map(|old| end.map_or(old, |e| e.max(old))));
        let start = if self.start_wait { old } else { None };
        let homeless = (!self.askers.is_empty() && self.no_regions())
            .then_some(self.created + self.config.lease);
        orphans
            .chain(start)
            .chain(homeless)
            .chain([self.next_rebalance])
            .min()
    }

    /// Re-homes orphans whose old region is surely stopped, and rebalances
    /// when it is time.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.rehome_orphans(now);
        if now >= self.next_rebalance {
            self.next_rebalance = now + self.config.rebalance_every;
            self.resend_handoffs();
            self.rebalance();
        }
        self.serve_askers(now);
        self.refuse_homeless(now);
    }

    /// Its member's view: whether it suspects so many members that the
    /// rest, itself included, are no majority of the cluster. A member cut
    /// off alone that became the coordinator meanwhile has only its own
    /// region renewing with it, a majority of one among the regions it
    /// heard of; its membership's suspicions say otherwise, before its
    /// split-brain resolver downs it (campaign seed 315).
    pub fn set_cut_off(&mut self, cut_off: bool) {
        self.cut_off = cut_off;
    }

    /// Whether a majority of the regions (those not drained after a
    /// leave) asked for a renewal within the last lease, and its member is
    /// not cut off from most of the cluster: a coordinator that hears from
    /// fewer renews no one.
    fn has_quorum(&self, now: Instant) -> bool {
        if self.cut_off {
            return false;
        }
        let since = now.checked_sub(self.config.lease).unwrap_or(now);
        let (mut regions, mut heard) = (0usize, 0usize);
        for (region, _) in self.allocation.regions() {
            if self.drained.contains(region) {
                continue;
            }
            regions += 1;
            if self.heard.get(region).is_some_and(|&at| at >= since) {
                heard += 1;
            }
        }
        heard * 2 > regions
    }

    /// Tells each leaving region that hosts nothing, once.
    fn report_drained(&mut self) {
        let empty: Vec<Arc<str>> = self
            .allocation
            .regions()
            .filter(|(r, hosted)| {
                hosted.is_empty() && self.allocation.is_draining(r) && !self.drained.contains(*r)
            })
            .map(|(r, _)| r.clone())
            .collect();
        for to in empty {
            // Done with: no hand-off waits for it any more (its member may
            // leave before it answers).
            for handoff in self.handoffs.values_mut() {
                handoff.acks.remove(&to);
                handoff.told.remove(&to);
            }
            self.drained.insert(to.clone());
            self.out.push_back(CoordinatorOutput::Drained { to });
        }
        self.advance_handoffs();
    }

    fn rehome_orphans(&mut self, now: Instant) {
        let ready: Vec<ShardId> = self
            .orphans
            .iter()
            .filter(|(_, end)| self.grants.old_leases_over(now) && end.is_none_or(|e| now >= e))
            .map(|(shard, _)| *shard)
            .collect();
        for shard in ready {
            self.orphans.remove(&shard);
            if self.allocation.allocate(shard).is_ok() {
                self.announce(shard);
            } else {
                self.free.insert(shard);
            }
        }
    }

    /// The next thing to send.
    pub fn poll_output(&mut self) -> Option<CoordinatorOutput> {
        self.out.pop_front()
    }

    fn rebalance(&mut self) {
        let moving: BTreeSet<ShardId> = self.handoffs.keys().copied().collect();
        let moves = self.allocation.rebalance(self.config.rebalance, &moving);
        if moves.is_empty() {
            return;
        }
        // Planning moves changes no region: one set for them all (those
        // drained after a leave are done with).
        let regions: BTreeSet<Arc<str>> = self
            .allocation
            .regions()
            .map(|(r, _)| r.clone())
            .filter(|r| !self.drained.contains(r))
            .chain(self.followers.iter().cloned())
            .collect();
        for m in moves {
            let id = HandOffId(self.next_handoff);
            self.next_handoff += 1;
            for region in &regions {
                self.out.push_back(CoordinatorOutput::BeginHandOff {
                    to: region.clone(),
                    shard: m.shard,
                    from: m.from.clone(),
                    handoff: id,
                });
            }
            self.handoffs.insert(
                m.shard,
                HandOff {
                    id,
                    from: m.from,
                    to: m.to,
                    told: regions.clone(),
                    acks: regions.clone(),
                    stopping: false,
                },
            );
        }
    }

    /// Asks again what a hand-off under way waits for (a message lost with
    /// a link): `BeginHandOff` of the regions that have not acked; once
    /// all have, `HandOff` of the old home and `BeginHandOff` of every
    /// region told, whose markers may have been lost on their way to the
    /// old home (a region sends its marker again, and nothing else).
    /// Regions take all of them again harmlessly.
    fn resend_handoffs(&mut self) {
        for (shard, handoff) in &self.handoffs {
            if handoff.stopping {
                self.out.push_back(CoordinatorOutput::HandOff {
                    to: handoff.from.clone(),
                    shard: *shard,
                    regions: handoff.told.iter().cloned().collect(),
                    handoff: handoff.id,
                });
            }
            let waiting = if handoff.stopping {
                &handoff.told
            } else {
                &handoff.acks
            };
            for to in waiting {
                self.out.push_back(CoordinatorOutput::BeginHandOff {
                    to: to.clone(),
                    shard: *shard,
                    from: handoff.from.clone(),
                    handoff: handoff.id,
                });
            }
        }
    }

    /// Sends `HandOff` for every hand-off whose acks are all in.
    fn advance_handoffs(&mut self) {
        for (shard, handoff) in &mut self.handoffs {
            if !handoff.stopping && handoff.acks.is_empty() {
                handoff.stopping = true;
                self.out.push_back(CoordinatorOutput::HandOff {
                    to: handoff.from.clone(),
                    shard: *shard,
                    regions: handoff.told.iter().cloned().collect(),
                    handoff: handoff.id,
                });
            }
        }
    }

    /// Answers the regions waiting for homes that are known and not moving,
    /// allocating shards hosted nowhere.
    fn serve_askers(&mut self, now: Instant) {
        let old_leases_over = self.grants.old_leases_over(now);
        self.start_wait = false;
        let shards: Vec<ShardId> = self.askers.keys().copied().collect();
        for shard in shards {
            if self.handoffs.contains_key(&shard) || self.orphans.contains_key(&shard) {
                continue;
            }
            let home = match self.allocation.home(shard) {
                Some(home) => home.clone(),
                None if old_leases_over || self.free.contains(&shard) => {
                    match self.allocation.allocate(shard) {
                        Ok(home) => {
                            self.free.remove(&shard);
                            // The new home hears it first, ahead of any
                            // hand-off of the shard: it knows itself the
                            // home before the messages it must handle.
                            let asked = self.askers.get(&shard).is_some_and(|a| a.contains(&home));
                            if !asked {
                                self.out.push_back(CoordinatorOutput::Home {
                                    to: home.clone(),
                                    shard,
                                    home: home.clone(),
                                });
                            }
                            home
                        }
                        Err(_) => continue,
                    }
                }
                None => {
                    self.start_wait = true;
                    continue;
                }
            };
            if let Some(askers) = self.askers.remove(&shard) {
                for to in askers {
                    self.out.push_back(CoordinatorOutput::Home {
                        to,
                        shard,
                        home: home.clone(),
                    });
                }
            }
        }
    }

    /// Tells every region where `shard` lives now (after a move or a
    /// re-homing), those that asked included.
    fn announce(&mut self, shard: ShardId) {
        let Some(home) = self.allocation.home(shard).cloned() else {
            return;
        };
        let mut to: BTreeSet<Arc<str>> = self
            .allocation
            .regions()
            .map(|(r, _)| r.clone())
            .chain(self.followers.iter().cloned())
            .collect();
        to.extend(self.askers.remove(&shard).unwrap_or_default());
        for region in to {
            self.out.push_back(CoordinatorOutput::Home {
                to: region,
                shard,
                home: home.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
