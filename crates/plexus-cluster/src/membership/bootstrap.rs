//! Seeds from a discovery, and who forms the cluster when every member
//! discovers every other (the bootstrap rule, `docs/CLUSTER.md`
//! "Discovery"; the idea is Akka Cluster Bootstrap's).
//!
//! A member made with [`Membership::with_discovery`] starts joining even
//! without static seeds, and its driver hands it each discovery answer
//! through [`Membership::set_seeds`]. It joins through the discovered
//! seeds like through static ones. It forms a new cluster itself only when
//! all of these hold at a join round:
//!
//! 1. it was never in a cluster (a member that was, and was downed, only
//!    rejoins: forming then could split the cluster);
//! 2. the discovered seeds number at least `bootstrap_min_seeds` and its
//!    own address is among them and is the lowest;
//! 3. since the seed list last changed, it has sent a join to every other
//!    seed, the last of them at least one `join_retry` ago, and none
//!    admitted it.
//!
//! A joining member does not answer joins, so while nobody is up, every
//! member but the lowest waits; the lowest forms, and the others' next
//! join to it is answered. Members that discover the same list (any order:
//! it is sorted) agree on the lowest; `bootstrap_min_seeds` set to the
//! number of members started together makes every list that counts the
//! same one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::Membership;
use crate::config::{ClusterConfig, ConfigError};
use crate::member::MemberState;

/// The discovered seeds and the joins sent to them.
#[derive(Debug, Default)]
pub(super) struct Bootstrap {
    /// The last discovered seeds: sorted, deduplicated, at most
    /// `max_members`.
    pub(super) seeds: Vec<Arc<str>>,
    /// Seeds other than this member that a join went to since `seeds`
    /// last changed.
    pub(super) tried: BTreeSet<Arc<str>>,
}

impl Membership {
    /// A member whose seeds come from a discovery (as well as from
    /// [`ClusterConfig::seeds`]): unlike [`Membership::new`], it starts
    /// joining even with no static seeds, and forms a cluster only by the
    /// bootstrap rule (see [`Membership::set_seeds`]) or `form_after`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for settings that cannot work.
    pub fn with_discovery(
        config: ClusterConfig,
        address: impl Into<Arc<str>>,
        incarnation: u64,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Self::build(config, address.into(), incarnation, now, true)
    }

    /// Hands the member the seeds a discovery found (call it with each
    /// answer while the member joins). Addresses that cannot be member
    /// addresses (empty, longer than 255 bytes) are dropped; the rest are
    /// sorted, deduplicated and cut to `max_members`, so memory is bounded
    /// whatever the discovery returned. A changed list is tried at once
    /// and restarts the bootstrap rule's count of tried seeds.
    ///
    /// The bootstrap rule (module `bootstrap`, and `docs/CLUSTER.md`): a
    /// member that was never in a cluster, whose own address is the lowest
    /// of at least `bootstrap_min_seeds` discovered seeds, forms a new
    /// cluster once it sent a join to every other seed and none admitted
    /// it.
    pub fn set_seeds(&mut self, now: Instant, seeds: Vec<Arc<str>>) {
        let before = seeds.len();
        let mut seeds: Vec<Arc<str>> = seeds
            .into_iter()
            .filter(|s| !s.is_empty() && s.len() <= 255)
            .collect();
        if seeds.len() < before {
            tracing::warn!(
                target: "plexus::cluster",
                dropped = before - seeds.len(),
                "ignored discovered seeds that are empty or longer than 255 bytes"
            );
        }
        seeds.sort_unstable();
        seeds.dedup();
        seeds.truncate(self.config.max_members);
        if seeds == self.bootstrap.seeds {
            return;
        }
        self.bootstrap.seeds = seeds;
        self.bootstrap.tried.clear();
        if self.me.state == MemberState::Joining && self.next_join.is_some() {
            self.next_join = Some(now);
        }
    }

    /// The discovered seeds the member holds (sorted).
    pub fn seeds(&self) -> &[Arc<str>] {
        &self.bootstrap.seeds
    }

    /// Whether the bootstrap rule lets this member form the cluster now
    /// (called at a join round, before the round's join is sent).
    pub(super) fn bootstrap_forms(&self) -> bool {
        let b = &self.bootstrap;
        !self.ever_joined
            && b.seeds.len() >= self.config.bootstrap_min_seeds
            && b.seeds.first() == Some(&self.me.address)
            && b.seeds[1..].iter().all(|s| b.tried.contains(s))
    }

    /// Notes a join sent to `to` (counted if it is a discovered seed).
    pub(super) fn bootstrap_tried(&mut self, to: &Arc<str>) {
        if self.bootstrap.seeds.binary_search(to).is_ok() {
            self.bootstrap.tried.insert(Arc::clone(to));
        }
    }
}

#[cfg(test)]
mod tests;
