//! Split-brain resolution on a fresh count.
//!
//! A member's view counts as reachable every member no watcher of its side
//! has found silent. In a partition that view is incomplete for a while:
//! each member is watched by its ring successors only, so a member of the
//! other side whose watchers are all on its own side is not seen to be
//! gone until the ring changes. Deciding on such a view let both sides of
//! a 60/40 split each count a majority (each counted the other side's
//! unobserved members as its own).
//!
//! So staying needs evidence. The member that resolves for its side (the
//! lowest-address reachable watcher of the lowest unreachable member: it
//! knows first; else the lowest address it counts as reachable) whose view
//! says "stay" first *sweeps*: it pings
//! every member that counts (the unreachable too, each suspect with its
//! suspicion so it can refute in the ack), pings the silent ones once more
//! halfway, and decides on the members that acked, downing only the
//! unreachable that stayed silent: a round trip after the unreachable set
//! settled is evidence that a member is on this side now
//! (changes during the sweep do not abandon it: the count is taken on the
//! view at its end, with the silent members on the other side). Two sides
//! cannot both collect acks from a majority (an ack needs both
//! directions), so at most one side stays. Even a single unreachable
//! member is swept for: when a partition is detected one member at a time,
//! each side would otherwise down the other's members one by one and both
//! would stay.
//!
//! Only that member sweeps, so a crash costs one member O(N) pings, not
//! every member. A member whose resolver is on the other side (unobserved
//! there, so still counted as reachable) sees nobody act: after a second
//! `stable_after` it sweeps itself. A member whose view says "down myself"
//! sweeps too before it gives up: its view may hold stale suspicions (a
//! one-way partition lets the other side accuse members of this one), and
//! with a quorum exactly met one false absence would down a whole side.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::Membership;
use crate::event::{ClusterEvent, DownReason};
use crate::member::MemberState;
use crate::split_brain::{decide, Decision, Seen};

/// A sweep under way.
#[derive(Debug, Clone)]
pub(super) struct Sweep {
    resend_at: Option<Instant>,
    deadline: Instant,
    /// Members that have not acked yet.
    waiting: BTreeSet<Arc<str>>,
}

impl Membership {
    /// When the resolver acts next, if anything is unreachable: after
    /// `stable_after` without change, or the sweep's next step.
    pub(super) fn split_brain_due(&self) -> Option<Instant> {
        if self.me.state != MemberState::Up || self.unreachable.is_empty() {
            return None;
        }
        let stable = self.last_change + self.config.stable_after;
        Some(match &self.sweep {
            Some(s) => s.resend_at.unwrap_or(s.deadline),
            None if self.deferred == Some(self.last_change) => stable + self.config.stable_after,
            None => stable,
        })
    }

    pub(super) fn resolve_split_brain(&mut self, now: Instant) {
        // A sweep is decided at its deadline, which comes only while
        // something is unreachable: one left over from a partition that
        // resolved otherwise (the others downed the silent member first)
        // holds acks of long ago, and decided on a later partition it
        // counted the other side as answering (campaign seed 1873: a
        // minority stayed and downed the majority).
        if self
            .sweep
            .as_ref()
            .is_some_and(|s| now >= s.deadline + self.config.probe_timeout * 2)
        {
            self.sweep = None;
        }
        let Some(sweep) = self.sweep.as_mut() else {
            let decision = self.decide_on(None);
            if decision.0 == Decision::DownSelf
                || self.leads_its_side()
                || self.deferred == Some(self.last_change)
            {
                self.deferred = None;
                self.start_sweep(now);
            } else {
                // The resolver sweeps; if it does not act (it may be on the
                // other side, unobserved), sweep after another stable_after.
                self.deferred = Some(self.last_change);
            }
            return;
        };
        if sweep.resend_at.is_some_and(|t| now >= t) {
            sweep.resend_at = None;
            let again: Vec<Arc<str>> = sweep.waiting.iter().cloned().collect();
            self.ping_all(now, &again);
            return;
        }
        if now >= sweep.deadline {
            let silent = self.sweep.take().map(|s| s.waiting).unwrap_or_default();
            let decision = self.decide_on(Some(&silent));
            tracing::info!(
                target: "plexus::cluster",
                silent = silent.len(),
                "split-brain resolver counted the members that answered"
            );
            self.act(now, decision, Some(&silent));
        }
    }

    /// Whether this member resolves for its side: the lowest-address
    /// reachable watcher of the lowest unreachable member (watchers suspect
    /// first and, confirming each other, mature first), or without one the
    /// lowest address it counts as reachable (Akka's leader rule).
    fn leads_its_side(&self) -> bool {
        let reachable = |a: &Arc<str>| {
            *a == self.me.address
                || (!self.unreachable.contains(a)
                    && self
                        .members
                        .get(a)
                        .is_some_and(|r| r.state.counts_for_quorum()))
        };
        let watcher = self
            .unreachable
            .first()
            .and_then(|target| self.watchers(target).into_iter().filter(reachable).min());
        match watcher {
            Some(w) => w == self.me.address,
            None => !self.members.values().any(|r| {
                r.state.counts_for_quorum()
                    && r.address < self.me.address
                    && !self.unreachable.contains(&r.address)
            }),
        }
    }

    /// An ack from `target`: evidence for a sweep under way.
    pub(super) fn sweep_ack(&mut self, target: &Arc<str>) {
        if let Some(s) = self.sweep.as_mut() {
            s.waiting.remove(target);
        }
    }

    fn start_sweep(&mut self, now: Instant) {
        // The unreachable too: a stale suspicion (one a member brought from
        // a side that lost) must not down a member that answers now. A
        // suspect's ping carries its suspicion first, so it refutes in the
        // ack (Lifeguard's buddy system).
        let waiting: BTreeSet<Arc<str>> = self
            .members
            .values()
            .filter(|r| r.state.counts_for_quorum())
            .map(|r| Arc::clone(&r.address))
            .collect();
        // Not stretched by local health: a member that is itself slow
        // counts fewer acks and at worst downs itself (the safe side),
        // while a stretched sweep kept a losing side up for many seconds.
        let timeout = self.config.probe_timeout * 2;
        let targets: Vec<Arc<str>> = waiting.iter().cloned().collect();
        self.sweep = Some(Sweep {
            resend_at: Some(now + timeout / 2),
            deadline: now + timeout,
            waiting,
        });
        self.ping_all(now, &targets);
    }

    fn ping_all(&mut self, now: Instant, targets: &[Arc<str>]) {
        for t in targets {
            let seq = self.take_seq();
            self.send_ping(now, seq, t, true);
        }
    }

    /// The strategy's decision with the unreachable members counted as the
    /// other side, or, after a sweep, the `silent` ones (every member was
    /// pinged: an answer outweighs an older observation).
    fn decide_on(&self, silent: Option<&BTreeSet<Arc<str>>>) -> (Decision, DownReason) {
        let mut seen: Vec<Seen<'_>> = self
            .members
            .values()
            .filter(|r| r.state.counts_for_quorum())
            .map(|r| Seen {
                address: &r.address,
                up_number: r.up_number,
                reachable: match silent {
                    Some(silent) => !silent.contains(&r.address),
                    None => !self.unreachable.contains(&r.address),
                },
            })
            .collect();
        seen.push(Seen {
            address: &self.me.address,
            up_number: self.me.up_number,
            reachable: true,
        });
        let members = seen.len();
        let reachable = seen.iter().filter(|s| s.reachable).count();
        let decision = decide(self.config.split_brain, &seen);
        let reason = DownReason::SplitBrain {
            strategy: self.config.split_brain,
            reachable,
            members,
        };
        tracing::info!(target: "plexus::cluster", ?decision, %reason, "split-brain resolver decided");
        (decision, reason)
    }

    /// Carries out a decision; staying downs the unreachable members that
    /// are also in `silent` (all of them without a sweep).
    fn act(
        &mut self,
        now: Instant,
        (decision, reason): (Decision, DownReason),
        silent: Option<&BTreeSet<Arc<str>>>,
    ) {
        match decision {
            Decision::DownUnreachable => {
                let down: Vec<Arc<str>> = self
                    .unreachable
                    .iter()
                    .filter(|a| silent.is_none_or(|s| s.contains(*a)))
                    .cloned()
                    .collect();
                for a in down {
                    self.unreachable.remove(&a);
                    self.suspicions.remove(&a);
                    if let Some(r) = self.members.get_mut(&a) {
                        r.state = MemberState::Down;
                        let m = r.clone();
                        self.entered(now, &m);
                        self.broadcasts.push(m.clone());
                        self.events.push_back(ClusterEvent::MemberDowned {
                            member: m,
                            reason: reason.clone(),
                        });
                    }
                }
                self.membership_changed();
                self.last_change = now;
            }
            Decision::DownSelf => self.go_down(now, reason),
        }
    }
}
