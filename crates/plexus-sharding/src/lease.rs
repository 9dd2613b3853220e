//! Shard leases: how long a region may host its shards without hearing from
//! the coordinator, and when the coordinator may count them as stopped
//! (`ALGORITHM.md`, "At most one activation").
//!
//! A region renews all its shards in one request. Its lease runs `lease`
//! from the moment it **sent** the request the coordinator answered, on
//! its own clock ([`RegionLease`]); the coordinator counts the region's
//! shards as stopped `lease + margin` after it **answered** ([`Grants`]).
//! The request left before the answer, so the region's lease always ends
//! before the coordinator's count, by the time the answer took plus
//! `margin` (which covers the two clocks' rate difference): no clock is
//! compared across members.
//!
//! Sans-IO: time comes in as `now`; nothing here sleeps or sends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A region's side: the lease on its shards, renewed by requests it sends
/// and answers it gets.
#[derive(Debug, Clone)]
pub struct RegionLease {
    lease: Duration,
    /// Requests sent and not yet answered: their number and when they left.
    pending: BTreeMap<u64, Instant>,
    next: u64,
    valid_until: Option<Instant>,
}

/// What [`RegionLease::handle_timeout`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// The lease holds until the given time.
    Valid(Instant),
    /// The lease ran out: stop every shard now.
    Expired,
    /// No lease was ever granted (or it was given up).
    None,
}

impl RegionLease {
    /// No lease yet; once granted it lasts `lease` from each request.
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            pending: BTreeMap::new(),
            next: 0,
            valid_until: None,
        }
    }

    /// A renewal request leaves now: its number, for the coordinator to
    /// echo. Requests older than the last answered one are forgotten when
    /// an answer comes, so at most the requests of one lease period wait.
    pub fn request(&mut self, now: Instant) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.pending.insert(seq, now);
        seq
    }

    /// The coordinator answered request `seq`: the lease now holds until
    /// `lease` after that request left. An answer to an unknown or
    /// superseded request changes nothing (`false`), and an answer never
    /// shortens the lease.
    pub fn answered(&mut self, seq: u64) -> bool {
        let Some(sent) = self.pending.remove(&seq) else {
            return false;
        };
        self.pending.retain(|&s, _| s > seq);
        let until = sent + self.lease;
        self.valid_until = Some(self.valid_until.map_or(until, |v| v.max(until)));
        true
    }

    /// Gives the lease up (the region stopped its shards: its member is
    /// leaving or was downed).
    pub fn give_up(&mut self) {
        self.valid_until = None;
        self.pending.clear();
    }

    /// When [`handle_timeout`](RegionLease::handle_timeout) has work: the
    /// lease's end.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.valid_until
    }

    /// The lease at `now`; [`LeaseState::Expired`] once, when it ran out,
    /// and [`LeaseState::None`] after that until an answer renews it.
    pub fn handle_timeout(&mut self, now: Instant) -> LeaseState {
        match self.valid_until {
            Some(until) if now < until => LeaseState::Valid(until),
            Some(_) => {
                self.valid_until = None;
                LeaseState::Expired
            }
            None => LeaseState::None,
        }
    }

    /// Whether the region may host shards at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }
}

/// The coordinator's side: when it started and when it last answered each
/// region, so it knows from when on a silent region's shards are surely
/// stopped.
#[derive(Debug, Clone)]
pub struct Grants {
    lease: Duration,
    margin: Duration,
    /// When this coordinator first heard from a majority of its regions.
    quorum_at: Option<Instant>,
    answered: BTreeMap<Arc<str>, Instant>,
}

impl Grants {
    /// A coordinator granting leases of `lease`, counted as over `margin`
    /// after they end.
    pub fn new(lease: Duration, margin: Duration) -> Self {
        Self {
            lease,
            margin,
            quorum_at: None,
            answered: BTreeMap::new(),
        }
    }

    /// This coordinator hears from a majority of its regions at `now` (the
    /// first time counts).
    pub fn quorum(&mut self, now: Instant) {
        self.quorum_at.get_or_insert(now);
    }

    /// The coordinator answers `region`'s renewal now.
    pub fn answer(&mut self, region: Arc<str>, now: Instant) {
        self.answered.insert(region, now);
    }

    /// When a lease this coordinator granted `region` surely ended:
    /// `lease + margin` after its last answer (`None` if it never
    /// answered).
    pub fn answered_end(&self, region: &str) -> Option<Instant> {
        self.answered
            .get(region)
            .map(|&at| at + self.lease + self.margin)
    }

    /// From when on `region` hosts nothing under any lease: after this
    /// coordinator's last answer to it (see
    /// [`answered_end`](Grants::answered_end)), and after every older
    /// coordinator's lease (see [`old_leases_end`](Grants::old_leases_end));
    /// `None` while that is not known.
    pub fn stopped_from(&self, region: &str) -> Option<Instant> {
        let old = self.old_leases_end()?;
        Some(self.answered_end(region).map_or(old, |end| end.max(old)))
    }

    /// Whether `region`'s shards may go elsewhere at `now` without a
    /// hand-off (its member is down or gone): see
    /// [`stopped_from`](Grants::stopped_from).
    pub fn surely_stopped(&self, region: &str, now: Instant) -> bool {
        self.stopped_from(region).is_some_and(|at| now >= at)
    }

    /// When every lease an older coordinator may have granted is surely
    /// over: `2 × lease + margin` after this one first heard from a
    /// majority of the regions (`None` before). From then on a majority
    /// renews with this one, so an older one hears from a minority within
    /// a lease and stops renewing: its last grant ends a lease later.
    pub fn old_leases_end(&self) -> Option<Instant> {
        self.quorum_at.map(|at| at + 2 * self.lease + self.margin)
    }

    /// Whether every lease an older coordinator may have granted is surely
    /// over at `now`: a shard no region reported is hosted nowhere.
    pub fn old_leases_over(&self, now: Instant) -> bool {
        self.old_leases_end().is_some_and(|end| now >= end)
    }

    /// Forgets a region that was removed and whose shards went elsewhere.
    pub fn forget(&mut self, region: &str) {
        self.answered.remove(region);
    }
}

/// A coordinator's mark on its answer to a lease renewal, which the region
/// echoes in its next renewal: the coordinator counts a region as heard
/// from when it issued the echoed mark, not when the renewal arrived, so
/// renewals that waited in a link (a partition) count as old and cannot
/// make the majority of a coordinator the others have left behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    /// The coordinator's epoch (another coordinator's marks mean nothing).
    pub epoch: u32,
    /// When it answered: nanoseconds after it started, plus one (0: none).
    pub nanos: u64,
}

impl Stamp {
    /// No mark (no answer heard from the coordinator yet).
    pub const NONE: Stamp = Stamp { epoch: 0, nanos: 0 };
}

#[cfg(test)]
mod tests;
