//! Failure detection: each member watches its `replication_factor` ring
//! predecessors (so each member is watched by its successors).
//!
//! A watched member is pinged every probe interval; its acks feed a phi
//! accrual detector ([`plexus_net::phi`]). When phi crosses `suspect_phi`,
//! the watcher probes it indirectly through `indirect_probes` other members
//! (SWIM sec. 3.1) and pings it again; if nothing answers within the probe
//! timeout, the watcher suspects it and tells the suspect itself, the
//! suspect's other watchers and a few random members (a `suspect` packet,
//! an independent accusation).
//!
//! Lifeguard (Dadgar et al. 2018): a helper that hears nothing answers with
//! a nack, so a watcher that gets neither acks nor nacks learns that it is
//! the slow one; such a watcher, or one that wakes up late for its own
//! deadlines, raises its local health multiplier, which stretches its
//! probe interval and timeouts instead of letting it accuse the healthy.
//! A watcher whose helpers answered nothing at all holds its accusation of
//! a member for one round, never more: Lifeguard slows the accusations of
//! a member that is itself unhealthy, it does not silence them. A member
//! cut off from all others must still suspect its predecessors within two
//! (stretched) rounds, or it would never count itself as the minority and
//! down itself, while the majority downs and removes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus_net::phi::PhiDetector;
use rand::seq::SliceRandom;
use rand::Rng;

use super::{Membership, MAX_HEALTH};
use crate::member::MemberState;
use crate::ring::hash64;
use crate::wire::Body;

/// A watched member.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    pub(super) detector: PhiDetector,
    /// The seq of the indirect probe under way.
    pub(super) indirect: Option<u32>,
    /// The incarnation this watcher already accused.
    pub(super) accused: Option<u64>,
    /// The incarnation whose accusation this watcher held once (its
    /// helpers answered nothing): the next failed round accuses.
    pub(super) held: Option<u64>,
}

/// A ping awaiting its ack.
#[derive(Debug, Clone)]
pub(super) struct PendingPing {
    pub(super) target: Arc<str>,
    /// For a ping-req: whom to relay the ack (or a nack) to, and their seq.
    pub(super) relay: Option<(Arc<str>, u32)>,
    pub(super) expires: Instant,
}

/// An indirect probe under way.
#[derive(Debug, Clone)]
pub(super) struct Indirect {
    pub(super) target: Arc<str>,
    pub(super) deadline: Instant,
    pub(super) helpers: u32,
    pub(super) nacks: u32,
}

impl Membership {
    fn scaled(&self, d: Duration) -> Duration {
        if self.config.lifeguard {
            d * (1 + self.health)
        } else {
            d
        }
    }

    pub(super) fn take_seq(&mut self) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    /// Rebuilds the watch ring and the watched set after a membership change.
    pub(super) fn refresh_live(&mut self, now: Instant) {
        if !self.live_dirty {
            return;
        }
        self.live_dirty = false;
        let mut live: Vec<(u64, Arc<str>)> = self
            .members
            .values()
            .filter(|r| r.state.is_live())
            .map(|r| (hash64(&[r.address.as_bytes()]), Arc::clone(&r.address)))
            .collect();
        if self.me.state.is_live() {
            live.push((
                hash64(&[self.me.address.as_bytes()]),
                Arc::clone(&self.me.address),
            ));
        }
        live.sort();
        self.live = live;
        self.leaving = self
            .members
            .values()
            .filter(|r| r.state == MemberState::Leaving)
            .map(|r| Arc::clone(&r.address))
            .collect();
        let watched = if matches!(self.me.state, MemberState::Up | MemberState::Suspect) {
            self.predecessors(&self.me.address)
        } else {
            Vec::new()
        };
        self.watches.retain(|a, _| watched.contains(a));
        for a in watched {
            if !self.watches.contains_key(&a) {
                self.watches.insert(
                    a,
                    Watch {
                        detector: PhiDetector::new(self.phi.clone(), now),
                        indirect: None,
                        accused: None,
                        held: None,
                    },
                );
            }
        }
        self.indirect
            .retain(|_, i| self.watches.contains_key(&i.target));
    }

    /// Where `address` is on the watch ring, if it is live.
    fn live_position(&self, address: &str) -> Option<usize> {
        let point = hash64(&[address.as_bytes()]);
        self.live
            .binary_search_by(|(p, a)| (*p, &**a).cmp(&(point, address)))
            .ok()
    }

    /// The `replication_factor` live members next to `address` on the watch
    /// ring: after it (its watchers) or before it (the members it watches).
    fn ring_neighbours(&self, address: &str, after: bool) -> Vec<Arc<str>> {
        let Some(i) = self.live_position(address) else {
            return Vec::new();
        };
        let n = self.live.len();
        let k = self.config.replication_factor.min(n - 1);
        (1..=k)
            .map(|d| {
                let j = if after { (i + d) % n } else { (i + n - d) % n };
                Arc::clone(&self.live[j].1)
            })
            .collect()
    }

    /// The members watching `address`.
    pub(super) fn watchers(&self, address: &str) -> Vec<Arc<str>> {
        self.ring_neighbours(address, true)
    }

    /// The members `address` watches.
    fn predecessors(&self, address: &str) -> Vec<Arc<str>> {
        self.ring_neighbours(address, false)
    }

    /// How many members watch `address` ([`Self::watchers`] without
    /// building the list).
    pub(super) fn watchers_of(&self, address: &str) -> usize {
        self.live_position(address).map_or(0, |_| {
            self.config.replication_factor.min(self.live.len() - 1)
        })
    }

    pub(super) fn probe_round(&mut self, now: Instant) {
        self.next_probe = now + self.scaled(self.config.probe_interval);
        let targets: Vec<Arc<str>> = self.watches.keys().cloned().collect();
        for t in targets {
            let seq = self.take_seq();
            self.send_ping(now, seq, &t, self.config.lifeguard);
        }
    }

    /// Pings `target` under `seq`, its ack awaited for three probe
    /// intervals. With `buddy` a suspect hears of its suspicion in the ping,
    /// first thing, and can refute at once (Lifeguard's buddy system).
    pub(super) fn send_ping(&mut self, now: Instant, seq: u32, target: &Arc<str>, buddy: bool) {
        self.pings.insert(
            seq,
            PendingPing {
                target: Arc::clone(target),
                relay: None,
                expires: now + self.config.probe_interval * 3,
            },
        );
        let suspect = self
            .members
            .get(target)
            .filter(|r| buddy && r.state == MemberState::Suspect)
            .cloned();
        let first = suspect.map(|r| {
            self.broadcasts.push(r);
            Arc::clone(target)
        });
        self.send(target, Body::Ping { seq }, first.as_ref());
    }

    pub(super) fn watch_deadline(&self, w: &Watch) -> Option<Instant> {
        if w.indirect.is_some() {
            return None;
        }
        let extra = if self.config.lifeguard {
            self.config.probe_timeout * self.health
        } else {
            Duration::ZERO
        };
        Some(w.detector.deadline(&self.suspect_threshold) + extra)
    }

    pub(super) fn check_watches(&mut self, now: Instant) {
        let due: Vec<Arc<str>> = self
            .watches
            .iter()
            .filter(|(_, w)| self.watch_deadline(w).is_some_and(|d| now >= d))
            .map(|(a, _)| Arc::clone(a))
            .collect();
        for target in due {
            self.start_indirect(now, target);
        }
        let done: Vec<u32> = self
            .indirect
            .iter()
            .filter(|(_, i)| now >= i.deadline)
            .map(|(s, _)| *s)
            .collect();
        for seq in done {
            if let Some(i) = self.indirect.remove(&seq) {
                self.indirect_failed(now, i);
            }
        }
        let expired: Vec<u32> = self
            .pings
            .iter()
            .filter(|(_, p)| now >= p.expires)
            .map(|(s, _)| *s)
            .collect();
        for seq in expired {
            if let Some(p) = self.pings.remove(&seq) {
                if let (Some((origin, origin_seq)), true) = (p.relay, self.config.lifeguard) {
                    self.send(&origin, Body::Nack { seq: origin_seq }, None);
                }
            }
        }
    }

    fn start_indirect(&mut self, now: Instant, target: Arc<str>) {
        let seq = self.take_seq();
        let mut candidates: Vec<Arc<str>> = self
            .live
            .iter()
            .map(|(_, a)| a)
            .filter(|a| **a != target && **a != self.me.address)
            .filter(|a| {
                self.members
                    .get(*a)
                    .is_some_and(|r| r.state == MemberState::Up)
            })
            .cloned()
            .collect();
        candidates.shuffle(&mut self.rng);
        candidates.truncate(self.config.indirect_probes);
        for h in &candidates {
            self.send(
                h,
                Body::PingReq {
                    seq,
                    target: Arc::clone(&target),
                },
                None,
            );
        }
        self.send_ping(now, seq, &target, false);
        let deadline = now + self.scaled(self.config.probe_timeout);
        self.indirect.insert(
            seq,
            Indirect {
                target: Arc::clone(&target),
                deadline,
                helpers: candidates.len() as u32,
                nacks: 0,
            },
        );
        if let Some(w) = self.watches.get_mut(&target) {
            w.indirect = Some(seq);
        }
    }

    fn indirect_failed(&mut self, now: Instant, i: Indirect) {
        if self.config.lifeguard && i.nacks < i.helpers {
            // Helpers did not even nack: the problem may be this member.
            self.health = (self.health + 1).min(MAX_HEALTH);
        }
        let Some(w) = self.watches.get_mut(&i.target) else {
            return;
        };
        w.indirect = None;
        // Probe again only after the next regular round.
        w.detector.reset_silence(now);
        let Some(record) = self.members.get(&i.target) else {
            return;
        };
        let member = record.clone();
        if w.accused == Some(member.incarnation) || !member.state.is_live() {
            return;
        }
        // Lifeguard (sec. 4.1): helpers that answer nothing at all, not even
        // a nack, point at this member being the slow one (its inbox late,
        // its link down). It holds the accusation for one round, its raised
        // health stretching the next probe; if that round fails too, it
        // accuses. Holding until its health was exhausted kept a member cut
        // off by a partition from suspecting anyone for some 45 probe
        // intervals: it never counted itself the minority, and stayed up
        // long after the majority had downed and removed it.
        let silent = i.helpers > 0 && i.nacks == 0;
        if self.config.lifeguard && silent && w.held != Some(member.incarnation) {
            w.held = Some(member.incarnation);
            return;
        }
        w.accused = Some(member.incarnation);
        self.stats.suspicions_raised += 1;
        let me = Arc::clone(&self.me.address);
        if member.state != MemberState::Suspect {
            let mut claim = member.clone();
            claim.state = MemberState::Suspect;
            self.apply_claim(now, &me, claim);
        }
        self.start_suspicion(now, &member, Some(&me));
        // The accusation, to the suspect (so it can refute), its other
        // watchers (who confirm or not) and a few others.
        let mut tell: Vec<Arc<str>> = self.watchers(&i.target);
        tell.retain(|a| *a != me);
        tell.push(Arc::clone(&i.target));
        for extra in self.gossip_targets() {
            if !tell.contains(&extra) {
                tell.push(extra);
            }
        }
        for to in tell {
            self.send(
                &to,
                Body::Suspect {
                    target: Arc::clone(&i.target),
                    incarnation: member.incarnation,
                },
                None,
            );
        }
    }

    pub(super) fn on_ack(&mut self, now: Instant, seq: u32) {
        let Some(p) = self.pings.remove(&seq) else {
            return;
        };
        if let Some((origin, origin_seq)) = p.relay {
            self.send(&origin, Body::Ack { seq: origin_seq }, None);
            return;
        }
        self.sweep_ack(&p.target);
        let half = self.config.probe_interval / 4;
        if let Some(w) = self.watches.get_mut(&p.target) {
            if let Some(s) = w.indirect.take() {
                self.indirect.remove(&s);
            }
            // It answered: a later silence is held once again.
            w.held = None;
            // Two acks of one round (direct and relayed) are one sign of
            // life, not a tiny inter-arrival sample.
            if now >= w.detector.last_arrival() + half {
                w.detector.on_arrival(now);
            }
        }
        if self.config.lifeguard {
            self.health = self.health.saturating_sub(1);
        }
    }

    pub(super) fn on_ping_req(
        &mut self,
        now: Instant,
        from: &Arc<str>,
        seq: u32,
        target: Arc<str>,
    ) {
        if *target == *self.me.address {
            self.send(from, Body::Ack { seq }, None);
            return;
        }
        let my_seq = self.take_seq();
        self.pings.insert(
            my_seq,
            PendingPing {
                target: Arc::clone(&target),
                relay: Some((Arc::clone(from), seq)),
                expires: now + self.config.probe_timeout * 4 / 5,
            },
        );
        self.send(&target, Body::Ping { seq: my_seq }, None);
    }

    /// `from` says its own probes of `target` failed.
    pub(super) fn on_accusation(
        &mut self,
        now: Instant,
        from: &Arc<str>,
        target: &Arc<str>,
        incarnation: u64,
    ) {
        if **target == *self.me.address {
            let mut claim = self.me.clone();
            claim.incarnation = incarnation;
            claim.state = MemberState::Suspect;
            self.claim_about_me(now, from, claim);
            return;
        }
        let Some(record) = self.members.get(target) else {
            return;
        };
        if record.incarnation != incarnation || !record.state.is_live() {
            return;
        }
        if record.state != MemberState::Suspect {
            let mut claim = record.clone();
            claim.state = MemberState::Suspect;
            self.apply_claim(now, from, claim);
        }
        if let Some(s) = self.suspicions.get_mut(target) {
            if s.incarnation == incarnation {
                s.accusers.insert(Arc::clone(from));
            }
        }
    }

    /// Lifeguard's self-awareness: a member that wakes up well after its own
    /// deadline was stalled (paused, starved); acks may be waiting in its
    /// queue, so it gives its indirect probes time instead of accusing.
    pub(super) fn notice_stall(&mut self, now: Instant) {
        if !self.config.lifeguard {
            return;
        }
        let Some(due) = self.poll_timeout() else {
            return;
        };
        if now <= due + self.config.probe_timeout / 2 {
            return;
        }
        self.stats.stalls_noticed += 1;
        self.health = (self.health + 2).min(MAX_HEALTH);
        let grace = now + self.scaled(self.config.probe_timeout);
        for i in self.indirect.values_mut() {
            i.deadline = i.deadline.max(grace);
        }
        for w in self.watches.values_mut() {
            if w.indirect.is_none() {
                w.detector.reset_silence(now);
            }
        }
    }

    /// One ring neighbour (rotating) and random live members, up to the
    /// fanout.
    pub(super) fn gossip_targets(&mut self) -> Vec<Arc<str>> {
        let fanout = self.config.gossip_fanout;
        let mut out: Vec<Arc<str>> = Vec::with_capacity(fanout);
        let neighbours = self.predecessors(&self.me.address);
        if !neighbours.is_empty() {
            let i = (self.next_seq as usize) % neighbours.len();
            out.push(Arc::clone(&neighbours[i]));
        }
        // Random others among the live and the leaving (who still hear
        // gossip), drawn by index: O(fanout) per round, not O(members),
        // since every member gossips every round.
        let (live, leaving) = (self.live.len(), self.leaving.len());
        let pool = live + leaving;
        let want = fanout.saturating_sub(out.len());
        let mut tries = 0;
        while out.len() < fanout && tries < want * 8 {
            tries += 1;
            if pool == 0 {
                break;
            }
            let i = self.rng.gen_range(0..pool);
            let a = if i < live {
                &self.live[i].1
            } else {
                &self.leaving[i - live]
            };
            if *a != self.me.address && !out.contains(a) {
                out.push(Arc::clone(a));
            }
        }
        out
    }
}
