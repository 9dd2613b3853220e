//! The member list as each event leaves it.
//!
//! A [`Membership`](crate::Membership) applies a whole packet (a join reply
//! carries every member) before its events are drained, so its
//! [`members`](crate::Membership::members) are as of the *last* event of
//! the batch. A [`View`] replays the events one by one onto the list a
//! subscriber last saw, so each event can be reported with the list as it
//! is after that event and not after later ones: a joiner's list shows
//! itself `Up` only from its own [`ClusterEvent::MemberUp`] on, and every
//! member `Up` only from that member's. A driver resets the view to the
//! membership's own list at the end of each batch ([`View::reset`]), so
//! whatever the events do not say (tombstones expiring) is caught up there.

use std::sync::Arc;

use crate::event::ClusterEvent;
use crate::member::{Member, MemberState};
use crate::ring::Ring;

/// A member list (the local member included, sorted by address) and its
/// ring, moved forward by events. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct View {
    local: Member,
    members: Vec<Member>,
    ring: Arc<Ring>,
    ring_stale: bool,
    vnodes_per_weight: u32,
    lookup_probes: u32,
}

impl View {
    /// A view of `members` (which include `local`) and their `ring`, whose
    /// later rings are built with `vnodes_per_weight` and `lookup_probes`
    /// (the cluster's settings).
    pub fn new(
        local: Member,
        members: Vec<Member>,
        ring: Arc<Ring>,
        vnodes_per_weight: u32,
        lookup_probes: u32,
    ) -> Self {
        let mut view = Self {
            local: local.clone(),
            members: Vec::new(),
            ring: Arc::clone(&ring),
            ring_stale: false,
            vnodes_per_weight,
            lookup_probes,
        };
        view.reset(local, members, ring);
        view
    }

    /// Replaces the view with the membership's own state (at the end of a
    /// batch of events).
    pub fn reset(&mut self, local: Member, mut members: Vec<Member>, ring: Arc<Ring>) {
        members.sort_by(|a, b| a.address.cmp(&b.address));
        self.local = local;
        self.members = members;
        self.ring = ring;
        self.ring_stale = false;
    }

    /// Moves the view past `event`.
    pub fn apply(&mut self, event: &ClusterEvent) {
        match event {
            ClusterEvent::Subscribed { .. } => {}
            ClusterEvent::Formed { local } | ClusterEvent::Admitted { local, .. } => {
                self.upsert(local.clone());
            }
            // A member first heard of in a later state is reported joined,
            // then up, ... with its latest claim: each event shows it in
            // the state the event names.
            ClusterEvent::MemberJoined(m) => self.upsert(Member {
                state: MemberState::Joining,
                up_number: 0,
                ..m.clone()
            }),
            ClusterEvent::MemberUp(m) | ClusterEvent::MemberReachable(m) => self.upsert(Member {
                state: MemberState::Up,
                ..m.clone()
            }),
            ClusterEvent::MemberSuspected(m) => self.upsert(Member {
                state: MemberState::Suspect,
                ..m.clone()
            }),
            ClusterEvent::MemberUnreachable(m)
            | ClusterEvent::MemberLeaving(m)
            | ClusterEvent::MemberRemoved(m)
            | ClusterEvent::MemberDowned { member: m, .. } => self.upsert(m.clone()),
            ClusterEvent::Refuted { incarnation } => {
                let local = Member {
                    incarnation: *incarnation,
                    ..self.local.clone()
                };
                self.upsert(local);
            }
            ClusterEvent::SelfDowned { .. } => {
                // A downed member forgets the others (it rejoins through
                // the cluster's own view).
                let local = Member {
                    state: MemberState::Down,
                    ..self.local.clone()
                };
                self.members.clear();
                self.upsert(local);
            }
            ClusterEvent::Rejoining { incarnation } => {
                let local = Member::joining(
                    Arc::clone(&self.local.address),
                    *incarnation,
                    self.local.weight,
                );
                self.upsert(local);
            }
            ClusterEvent::Left => {
                let local = Member {
                    state: MemberState::Removed,
                    ..self.local.clone()
                };
                self.upsert(local);
            }
        }
    }

    /// This member as the view has it.
    pub fn local(&self) -> &Member {
        &self.local
    }

    /// Every member in the view, sorted by address.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The ring of the view's members that own keys (rebuilt when an event
    /// changed who owns them).
    pub fn ring(&mut self) -> &Arc<Ring> {
        if self.ring_stale {
            self.ring_stale = false;
            let owners: Vec<(&Arc<str>, u16)> = self
                .members
                .iter()
                .filter(|m| m.state.owns_keys())
                .map(|m| (&m.address, m.weight))
                .collect();
            let same = owners.len() == self.ring.members().len()
                && owners
                    .iter()
                    .zip(self.ring.members())
                    .all(|((a, _), b)| *a == b);
            if !same {
                self.ring = Arc::new(Ring::new(
                    owners,
                    self.vnodes_per_weight,
                    self.lookup_probes,
                ));
            }
        }
        &self.ring
    }

    fn upsert(&mut self, m: Member) {
        if m.address == self.local.address {
            self.local = m.clone();
        }
        let owns = |x: &Member| x.state.owns_keys().then_some(x.weight);
        match self.members.binary_search_by(|x| x.address.cmp(&m.address)) {
            Ok(i) => {
                self.ring_stale |= owns(&self.members[i]) != owns(&m);
                self.members[i] = m;
            }
            Err(i) => {
                self.ring_stale |= owns(&m).is_some();
                self.members.insert(i, m);
            }
        }
    }
}

#[cfg(test)]
mod tests;
