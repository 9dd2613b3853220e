//! Claims waiting to be gossiped, each sent a bounded number of times
//! (memberlist's transmit-limited queue; SWIM sec. 4.1's infection-style
//! dissemination).
//!
//! A newer claim about a member replaces the queued one. Packets take the
//! claims sent least often first, as many as fit in their byte budget; a
//! claim is dropped once sent `limit` times, `limit` growing with the log
//! of the cluster size so a claim reaches everyone with high probability.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::member::Member;
use crate::wire::entry_len;

#[derive(Debug, Clone)]
struct Queued {
    member: Member,
    transmits: u32,
    /// Insertion order, so ties go to the newest claim.
    order: u64,
}

/// The queue. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub(crate) struct Broadcasts {
    queued: BTreeMap<Arc<str>, Queued>,
    next_order: u64,
}

impl Broadcasts {
    /// Queues `member`'s claim (replacing an older one about it).
    pub(crate) fn push(&mut self, member: Member) {
        self.next_order += 1;
        self.queued.insert(
            Arc::clone(&member.address),
            Queued {
                member,
                transmits: 0,
                order: self.next_order,
            },
        );
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
        let mut left = budget;
        if self.queued.is_empty() || max == 0 {
            return out;
        }
        let mut order: Vec<(u32, std::cmp::Reverse<u64>, Arc<str>)> = self
            .queued
            .iter()
            .map(|(a, q)| (q.transmits, std::cmp::Reverse(q.order), Arc::clone(a)))
            .collect();
        order.sort_unstable();
        if let Some(f) = first {
            if let Some(i) = order.iter().position(|o| &o.2 == f) {
                let item = order.remove(i);
                order.insert(0, item);
            }
        }
        let mut spent = Vec::new();
        for (_, _, address) in order {
            if out.len() == max {
                break;
            }
            let Some(q) = self.queued.get_mut(&address) else {
                continue;
            };
            let len = entry_len(&q.member);
            if len > left {
                continue;
            }
            left -= len;
            q.transmits += 1;
            out.push(q.member.clone());
            if q.transmits >= limit {
                spent.push(address);
            }
        }
        for a in spent {
            self.queued.remove(&a);
        }
        out
    }

    /// Drops the queued claim about `address`.
    pub(crate) fn remove(&mut self, address: &str) {
        self.queued.remove(address);
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
        assert!(b.take(5, 10, 3, None).is_empty(), "an entry needs 21 bytes");
        assert_eq!(b.take(21, 10, 3, None)[0].incarnation, 2);
    }
}
