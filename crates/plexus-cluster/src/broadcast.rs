//! Claims waiting to be gossiped, each sent a bounded number of times
//! (memberlist's transmit-limited queue; SWIM sec. 4.1's infection-style
//! dissemination).
//!
//! A newer claim about a member replaces the queued one. Packets take the
//! claims sent least often first, as many as fit in their byte budget; a
//! claim is dropped once sent `limit` times, `limit` growing with the log
//! of the cluster size so a claim reaches everyone with high probability.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::member::Member;
use crate::wire::entry_len;

/// Where a claim stands in line: least sent first, then newest first.
type Rank = (u32, Reverse<u64>, Arc<str>);

#[derive(Debug, Clone)]
struct Queued {
    member: Member,
    transmits: u32,
    /// Insertion order, so ties go to the newest claim.
    order: u64,
}

impl Queued {
    fn rank(&self) -> Rank {
        (
            self.transmits,
            Reverse(self.order),
            Arc::clone(&self.member.address),
        )
    }
}

/// Claims that do not fit the space left in a packet are skipped; after
/// this many in a row the packet is taken as full (claims differ in size
/// only by their address, so the rest would not fit either).
const MISFITS_BEFORE_FULL: usize = 16;

/// The queue. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub(crate) struct Broadcasts {
    queued: BTreeMap<Arc<str>, Queued>,
    /// The queued claims in the order packets take them, so a packet costs
    /// O(claims taken × log queued), not a sort of the queue.
    line: BTreeSet<Rank>,
    next_order: u64,
}

impl Broadcasts {
    /// Queues `member`'s claim (replacing an older one about it).
    pub(crate) fn push(&mut self, member: Member) {
        self.next_order += 1;
        let q = Queued {
            member,
            transmits: 0,
            order: self.next_order,
        };
        self.line.insert(q.rank());
        if let Some(old) = self.queued.insert(Arc::clone(&q.member.address), q) {
            self.line.remove(&old.rank());
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queued.len()
    }

    /// Claims for one packet: `first` (a claim to put ahead of all, e.g. a
    /// suspect's own suspicion), then the least-sent ones that fit in
    /// `budget` bytes, at most `max`. Each taken claim counts one transmit;
    /// claims sent `limit` times leave the queue.
    pub(crate) fn take(
        &mut self,
        budget: usize,
        max: usize,
        limit: u32,
        first: Option<&Arc<str>>,
    ) -> Vec<Member> {
        let mut out = Vec::new();
        if self.queued.is_empty() || max == 0 {
            return out;
        }
        let mut left = budget;
        let mut taken: Vec<Rank> = Vec::new();
        let head = first.and_then(|f| self.queued.get(f)).map(Queued::rank);
        let mut misfits = 0;
        for rank in head
            .iter()
            .chain(self.line.iter().filter(|r| Some(*r) != head.as_ref()))
        {
            if out.len() == max || misfits == MISFITS_BEFORE_FULL {
                break;
            }
            let Some(q) = self.queued.get(&rank.2) else {
                continue;
            };
            let len = entry_len(&q.member);
            if len > left {
                misfits += 1;
                continue;
            }
            misfits = 0;
            left -= len;
            out.push(q.member.clone());
            taken.push(rank.clone());
        }
        for rank in taken {
            self.line.remove(&rank);
            let Some(q) = self.queued.get_mut(&rank.2) else {
                continue;
            };
            q.transmits += 1;
            if q.transmits >= limit {
                self.queued.remove(&rank.2);
            } else {
                self.line.insert(q.rank());
            }
        }
        out
    }

    /// Drops the queued claim about `address`.
    pub(crate) fn remove(&mut self, address: &str) {
        if let Some(q) = self.queued.remove(address) {
            self.line.remove(&q.rank());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_sent_go_first_and_spent_claims_leave() {
        let mut b = Broadcasts::default();
        b.push(Member::joining("a", 1, 1));
        b.push(Member::joining("b", 1, 1));
        let first = b.take(1000, 1, 2, None);
        assert_eq!(&*first[0].address, "b", "newest first on a tie");
        let second = b.take(1000, 1, 2, None);
        assert_eq!(&*second[0].address, "a", "then the least sent");
        assert_eq!(b.take(1000, 10, 2, None).len(), 2);
        assert!(b.is_empty());
    }

    #[test]
    fn a_newer_claim_replaces_the_queued_one_and_budget_is_respected() {
        let mut b = Broadcasts::default();
        b.push(Member::joining("a", 1, 1));
        b.push(Member::joining("a", 2, 1));
        assert_eq!(b.len(), 1);
        assert!(b.take(5, 10, 3, None).is_empty(), "an entry needs 29 bytes");
        assert_eq!(b.take(29, 10, 3, None)[0].incarnation, 2);
    }
}
