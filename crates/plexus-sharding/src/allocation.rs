//! The coordinator's map of shards to regions, and how it places and
//! rebalances them (`ALGORITHM.md`, "Placement and rebalancing").
//!
//! Guarantees, each a property test below:
//!
//! - every shard has at most one home, and the regions' counts add up;
//! - a new shard goes to the region with the fewest shards (ties by
//!   address), so allocating keeps the counts within one of each other;
//! - a join moves shards only to the newcomer, a leave only the leaver's
//!   shards, and a rebalance run to its end leaves the most and the least
//!   loaded regions less than the threshold apart.
//!
//! A move is only planned here: the hand-off takes time, and the
//! coordinator applies it ([`Allocation::apply`]) once the old home stopped
//! the shard.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::shard::ShardId;

/// Which region hosts each shard of one entity type.
#[derive(Debug, Clone)]
pub struct Allocation {
    shards: u32,
    homes: BTreeMap<ShardId, Arc<str>>,
    regions: BTreeMap<Arc<str>, BTreeSet<ShardId>>,
    /// Regions leaving: they get no shard, and every shard of theirs moves.
    draining: BTreeSet<Arc<str>>,
    /// The region every shard lives on ([`Placement::Oldest`]), if any.
    pin: Option<Arc<str>>,
}

/// Where a type's shards go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Placement {
    /// Spread over the regions, evened out by rebalancing.
    #[default]
    Spread,
    /// All on the region of the oldest member that is up (a singleton's
    /// type): when another member becomes the oldest, they move there.
    Oldest,
}

/// A shard to hand over from one region to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The shard.
    pub shard: ShardId,
    /// Its home now.
    pub from: Arc<str>,
    /// Its home after the hand-off.
    pub to: Arc<str>,
}

/// The rebalancing rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebalance {
    /// Moves start when the most loaded region has at least this many
    /// shards more than the least loaded (at least 2: a difference of one
    /// is as even as an odd count gets). Default 2.
    pub threshold: u32,
    /// The most hand-offs under way at once. Default 10 % of the shards,
    /// at least 1.
    pub max_moves: u32,
}

impl Rebalance {
    /// The default rule for `shards` shards.
    pub fn for_shards(shards: u32) -> Self {
        Self {
            threshold: 2,
            max_moves: (shards / 10).max(1),
        }
    }
}

/// Why a shard has no home.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// No member hosts this entity type (none registered it, or none is
    /// up).
    #[error("no region hosts this entity type")]
    NoRegions,
    /// The shard is outside `0..shards`.
    #[error("{shard} is not one of the type's {shards} shards")]
    NoSuchShard {
        /// The shard asked for.
        shard: ShardId,
        /// The type's shard count.
        shards: u32,
    },
}

impl Allocation {
    /// An empty map for a type of `shards` shards (at least 1).
    pub fn new(shards: u32) -> Self {
        Self {
            shards: shards.max(1),
            homes: BTreeMap::new(),
            regions: BTreeMap::new(),
            draining: BTreeSet::new(),
            pin: None,
        }
    }

    /// Pins every shard to `region` (or unpins them): new shards are
    /// allocated there, and [`rebalance`](Allocation::rebalance) moves the
    /// others there. `true` if it changed.
    pub fn pin(&mut self, region: Option<Arc<str>>) -> bool {
        let changed = self.pin != region;
        self.pin = region;
        changed
    }

    /// The region a pin names, if it is one and does not leave.
    fn pinned(&self) -> Option<&Arc<str>> {
        self.pin
            .as_ref()
            .filter(|p| self.regions.contains_key(*p) && !self.draining.contains(*p))
    }

    /// The type's shard count.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The regions, by address, with the shards each hosts.
    pub fn regions(&self) -> impl Iterator<Item = (&Arc<str>, &BTreeSet<ShardId>)> {
        self.regions.iter()
    }

    /// Where `shard` lives, if it was allocated.
    pub fn home(&self, shard: ShardId) -> Option<&Arc<str>> {
        self.homes.get(&shard)
    }

    /// Adds a region that hosts nothing yet; `false` if it was there.
    pub fn add_region(&mut self, region: Arc<str>) -> bool {
        if self.regions.contains_key(&region) {
            return false;
        }
        self.regions.insert(region, BTreeSet::new());
        true
    }

    /// Removes a region (its member left or was downed) and returns the
    /// shards it hosted, now without a home: the coordinator allocates them
    /// again under the rules of `ALGORITHM.md` (after a hand-off, or after
    /// the old home's lease ran out).
    pub fn remove_region(&mut self, region: &str) -> Vec<ShardId> {
        self.draining.remove(region);
        let Some(hosted) = self.regions.remove(region) else {
            return Vec::new();
        };
        for shard in &hosted {
            self.homes.remove(shard);
        }
        hosted.into_iter().collect()
    }

    /// Marks `region` as leaving (its member leaves gracefully): it gets no
    /// new shard, and [`rebalance`](Allocation::rebalance) moves all of
    /// its shards away. `false` if it is not a region.
    pub fn drain(&mut self, region: &str) -> bool {
        match self.regions.get_key_value(region) {
            Some((address, _)) => {
                self.draining.insert(address.clone());
                true
            }
            None => false,
        }
    }

    /// Whether `region` is leaving.
    pub fn is_draining(&self, region: &str) -> bool {
        self.draining.contains(region)
    }

    /// Records that `region` hosts `shard`: what a region reported to a new
    /// coordinator. Adds the region if needed; a shard already homed
    /// elsewhere keeps that home and `false` is returned (two reports of one
    /// shard cannot both hold, `ALGORITHM.md`).
    pub fn adopt(&mut self, region: Arc<str>, shard: ShardId) -> Result<bool, AllocateError> {
        self.check(shard)?;
        if let Some(home) = self.homes.get(&shard) {
            return Ok(**home == *region);
        }
        self.homes.insert(shard, region.clone());
        self.regions.entry(region).or_default().insert(shard);
        Ok(true)
    }

    /// The home of `shard`: where it is, or, for a shard without one, the
    /// region with the fewest shards (ties by address) that is not leaving,
    /// which it then is.
    ///
    /// # Errors
    ///
    /// [`AllocateError`] if there is no region or no such shard.
    pub fn allocate(&mut self, shard: ShardId) -> Result<Arc<str>, AllocateError> {
        self.check(shard)?;
        if let Some(home) = self.homes.get(&shard) {
            return Ok(home.clone());
        }
        let least = || {
            self.regions
                .iter()
                .filter(|(address, _)| !self.draining.contains(*address))
                .min_by_key(|(address, hosted)| (hosted.len(), *address))
                .map(|(address, _)| address.clone())
        };
        let region = self
            .pinned()
            .cloned()
            .or_else(least)
            .ok_or(AllocateError::NoRegions)?;
        self.homes.insert(shard, region.clone());
        self.regions
            .get_mut(&region)
            .expect("the region just chosen")
            .insert(shard);
        Ok(region)
    }

    /// The moves that empty the leaving regions and even the load.
    ///
    /// With a [pin](Allocation::pin) that is a region and does not leave:
    /// every shard elsewhere and not `moving` goes to it, at once.
    /// Otherwise, first every shard of a leaving region not already moving goes to
    /// the least loaded region that stays (however many: a leave waits for
    /// them). Then, at most `rule.max_moves` minus the hand-offs under way
    /// (`moving`, whose shards are not moved again) and those just
    /// planned, each move takes the lowest shard of the most loaded region
    /// to the least loaded one (ties by address), counting the moves
    /// planned before it, while the two are at least `rule.threshold`
    /// apart. Nothing changes until [`apply`](Allocation::apply).
    pub fn rebalance(&self, rule: Rebalance, moving: &BTreeSet<ShardId>) -> Vec<Move> {
        if let Some(pin) = self.pinned() {
            // Every shard not moving already goes to the pin, at once.
            return self
                .homes
                .iter()
                .filter(|(shard, home)| *home != pin && !moving.contains(*shard))
                .map(|(&shard, home)| Move {
                    shard,
                    from: home.clone(),
                    to: pin.clone(),
                })
                .collect();
        }
        let threshold = rule.threshold.max(2) as usize;
        // Counts after the hand-offs under way, which still count at their
        // old home until applied: a region losing a shard is as loaded as
        // it will be.
        let mut load: BTreeMap<&Arc<str>, usize> = self
            .regions
            .iter()
            .filter(|(address, _)| !self.draining.contains(*address))
            .map(|(address, hosted)| (address, hosted.len()))
            .collect();
        let mut taken: BTreeSet<ShardId> = moving.clone();
        let mut moves = Vec::new();
        for leaving in &self.draining {
            for &shard in &self.regions[leaving] {
                if taken.contains(&shard) {
                    continue;
                }
                let Some((&least, n)) = load.iter_mut().min_by_key(|(a, n)| (**n, **a)) else {
                    // No region stays: the shards wait for the leaver to go.
                    return moves;
                };
                *n += 1;
                taken.insert(shard);
                moves.push(Move {
                    shard,
                    from: leaving.clone(),
                    to: least.clone(),
                });
            }
        }
        let budget = (rule.max_moves.max(1) as usize).saturating_sub(taken.len());
        let mut evening = 0;
        while evening < budget {
            let Some((&most, &high)) = load
                .iter()
                .max_by_key(|(a, n)| (**n, std::cmp::Reverse(**a)))
            else {
                break;
            };
            let (&least, &low) = load
                .iter()
                .min_by_key(|(a, n)| (**n, **a))
                .expect("a region, since there is a most loaded one");
            if high < low + threshold {
                break;
            }
            let Some(&shard) = self.regions[most].iter().find(|s| !taken.contains(s)) else {
                // Every shard of the most loaded region is already moving.
                break;
            };
            taken.insert(shard);
            evening += 1;
            *load.get_mut(most).expect("a region") -= 1;
            *load.get_mut(least).expect("a region") += 1;
            moves.push(Move {
                shard,
                from: most.clone(),
                to: least.clone(),
            });
        }
        moves
    }

    /// Applies a hand-off that completed (its old home stopped it):
    /// `shard` now lives in `to`. `false` if `to` is not a region any more
    /// (it left meanwhile): the shard is then left without a home, to be
    /// allocated again.
    pub fn apply(&mut self, shard: ShardId, to: &Arc<str>) -> bool {
        if let Some(from) = self.homes.remove(&shard) {
            if let Some(hosted) = self.regions.get_mut(&from) {
                hosted.remove(&shard);
            }
        }
        let Some(hosted) = self.regions.get_mut(to) else {
            return false;
        };
        hosted.insert(shard);
        self.homes.insert(shard, to.clone());
        true
    }

    fn check(&self, shard: ShardId) -> Result<(), AllocateError> {
        if shard.0 >= self.shards {
            return Err(AllocateError::NoSuchShard {
                shard,
                shards: self.shards,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
