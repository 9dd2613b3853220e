//! A region's routing of messages to shards, and its half of a hand-off
//! (`ALGORITHM.md`, "Planned hand-off").
//!
//! A region knows the home of the shards it sent to. A message for a shard
//! whose home it does not know, or whose hand-off is under way, is held
//! (bounded per shard) until the coordinator names the home; then the held
//! messages leave in the order they came. When a hand-off begins, the
//! region holds the shard's new messages and sends a marker to the old home
//! behind everything it already sent there, so the old home knows when the
//! last of them arrived ([`MarkerWait`]).
//!
//! Guarantees (property test below): every message routed is handed on
//! exactly once or refused with a typed error, and a shard's messages are
//! handed on in the order they were routed.
//!
//! Sans-IO and generic over the message: the caller sends, asks and acks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::shard::{HandOffId, ShardId};

/// Where a message goes now.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed<M> {
    /// To the shard's home (maybe this region itself): send it there.
    To(Arc<str>, M),
    /// Held until the shard's home is known.
    Held,
}

/// What the region must do for the routing, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum RoutingOutput<M> {
    /// Ask the coordinator for the shard's home (once per unknown shard).
    AskHome(ShardId),
    /// Send a held message to its shard's home, now known.
    Send(Arc<str>, M),
    /// A hand-off began: send the marker to the old home, on the link and
    /// lane this region's messages for the shard took.
    Marker {
        /// The shard handed over.
        shard: ShardId,
        /// Its old home.
        to: Arc<str>,
        /// The hand-off.
        handoff: HandOffId,
    },
    /// Tell the coordinator this region holds the shard's messages now.
    HandOffAck(ShardId, HandOffId),
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The shard's home is being looked up or handed over, and as many
    /// messages as the region holds per shard are already waiting.
    #[error("{shard}: {limit} messages already wait for its hand-off; try again later")]
    HandOffBufferFull {
        /// The shard.
        shard: ShardId,
        /// The bound per shard.
        limit: usize,
    },
}

#[derive(Debug)]
enum Route<M> {
    Home(Arc<str>),
    /// Held until the home is known: not known yet (`moving: None`), or a
    /// hand-off began (its marker is sent).
    Held {
        held: VecDeque<M>,
        moving: Option<HandOffId>,
    },
}

/// One region's routes to the shards of one entity type. See the
/// [module docs](self).
#[derive(Debug)]
pub struct Routing<M> {
    routes: BTreeMap<ShardId, Route<M>>,
    held_limit: usize,
    out: VecDeque<RoutingOutput<M>>,
}

impl<M> Routing<M> {
    /// Routes that hold at most `held_limit` messages per shard while its
    /// home is unknown.
    pub fn new(held_limit: usize) -> Self {
        Self {
            routes: BTreeMap::new(),
            held_limit: held_limit.max(1),
            out: VecDeque::new(),
        }
    }

    /// Routes `message` to `shard`.
    ///
    /// # Errors
    ///
    /// [`RouteError::HandOffBufferFull`] if it would be held and the
    /// shard's bound is reached, with the message handed back.
    pub fn route(&mut self, shard: ShardId, message: M) -> Result<Routed<M>, (RouteError, M)> {
        match self.routes.get_mut(&shard) {
            Some(Route::Home(home)) => Ok(Routed::To(home.clone(), message)),
            Some(Route::Held { held, .. }) => {
                if held.len() >= self.held_limit {
                    let error = RouteError::HandOffBufferFull {
                        shard,
                        limit: self.held_limit,
                    };
                    return Err((error, message));
                }
                held.push_back(message);
                Ok(Routed::Held)
            }
            None => {
                self.routes.insert(
                    shard,
                    Route::Held {
                        held: VecDeque::from([message]),
                        moving: None,
                    },
                );
                self.out.push_back(RoutingOutput::AskHome(shard));
                Ok(Routed::Held)
            }
        }
    }

    /// The coordinator named `home` as the shard's home: the messages held
    /// for it leave, in order.
    pub fn home_is(&mut self, shard: ShardId, home: Arc<str>) {
        let before = self.routes.insert(shard, Route::Home(home.clone()));
        if let Some(Route::Held { held, .. }) = before {
            self.out.extend(
                held.into_iter()
                    .map(|m| RoutingOutput::Send(home.clone(), m)),
            );
        }
    }

    /// The coordinator began hand-off `handoff` of `shard` from
    /// `old_home`: new messages are held, and the old home gets a marker
    /// behind those already sent to it. Messages held for an unknown home,
    /// or since an earlier hand-off whose end this region did not hear of,
    /// were sent before this marker too: they go to the old home ahead of
    /// it. The same begin again (the coordinator asks again when an ack is
    /// late) sends the marker and the ack again and nothing else: what is
    /// held since is for the new home. Every region sends a marker, even
    /// one that never sent the shard anything: the old home waits for one
    /// from each region the coordinator told.
    pub fn begin_hand_off(&mut self, shard: ShardId, old_home: Arc<str>, handoff: HandOffId) {
        let route = self.routes.entry(shard).or_insert(Route::Held {
            held: VecDeque::new(),
            moving: None,
        });
        match route {
            Route::Held { moving, .. } if *moving == Some(handoff) => {}
            Route::Held { held, moving } => {
                *moving = Some(handoff);
                self.out.extend(
                    std::mem::take(held)
                        .into_iter()
                        .map(|m| RoutingOutput::Send(old_home.clone(), m)),
                );
            }
            Route::Home(_) => {
                *route = Route::Held {
                    held: VecDeque::new(),
                    moving: Some(handoff),
                };
            }
        }
        self.out.push_back(RoutingOutput::Marker {
            shard,
            to: old_home,
            handoff,
        });
        self.out
            .push_back(RoutingOutput::HandOffAck(shard, handoff));
    }

    /// `region` is gone (its member left or was downed): the shards homed
    /// there are held again and their homes asked for anew.
    pub fn region_gone(&mut self, region: &str) {
        for (shard, route) in &mut self.routes {
            if matches!(route, Route::Home(home) if **home == *region) {
                *route = Route::Held {
                    held: VecDeque::new(),
                    moving: None,
                };
                self.out.push_back(RoutingOutput::AskHome(*shard));
            }
        }
    }

    /// The home of `shard` as far as this region knows: `None` while it is
    /// unknown or moving.
    pub fn home(&self, shard: ShardId) -> Option<&Arc<str>> {
        match self.routes.get(&shard) {
            Some(Route::Home(home)) => Some(home),
            _ => None,
        }
    }

    /// The messages held for `shard`.
    pub fn held(&self, shard: ShardId) -> usize {
        match self.routes.get(&shard) {
            Some(Route::Held { held, .. }) => held.len(),
            _ => 0,
        }
    }

    /// `shard` is no longer homed at `region` (the coordinator said so):
    /// its messages are held and its home asked for anew.
    pub fn forget(&mut self, shard: ShardId, region: &str) {
        if let Some(Route::Home(home)) = self.routes.get(&shard) {
            if **home == *region {
                self.routes.insert(
                    shard,
                    Route::Held {
                        held: VecDeque::new(),
                        moving: None,
                    },
                );
                self.out.push_back(RoutingOutput::AskHome(shard));
            }
        }
    }

    /// Messages for `shard` older than any routed since (they waited
    /// elsewhere in the region): they go ahead of those held, or on to the
    /// home if it is known.
    pub fn route_first(&mut self, shard: ShardId, messages: Vec<M>) {
        if messages.is_empty() {
            return;
        }
        match self.routes.get_mut(&shard) {
            Some(Route::Home(home)) => {
                let home = home.clone();
                self.out.extend(
                    messages
                        .into_iter()
                        .map(|m| RoutingOutput::Send(home.clone(), m)),
                );
            }
            Some(Route::Held { held, .. }) => {
                for m in messages.into_iter().rev() {
                    held.push_front(m);
                }
            }
            None => {
                self.routes.insert(
                    shard,
                    Route::Held {
                        held: messages.into(),
                        moving: None,
                    },
                );
                self.out.push_back(RoutingOutput::AskHome(shard));
            }
        }
    }

    /// No home will come for `shard` (its type is hosted nowhere): the
    /// messages held for it are handed back, and the next one asks again.
    /// A shard with a known home or a hand-off under way is left alone.
    pub fn give_up(&mut self, shard: ShardId) -> Vec<M> {
        match self.routes.get(&shard) {
            Some(Route::Held { moving: None, .. }) => match self.routes.remove(&shard) {
                Some(Route::Held { held, .. }) => held.into(),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// The shards whose messages wait for a home.
    pub fn waiting(&self) -> Vec<ShardId> {
        self.routes
            .iter()
            .filter(|(_, route)| matches!(route, Route::Held { .. }))
            .map(|(shard, _)| *shard)
            .collect()
    }

    /// Messages held for all shards.
    pub fn held_total(&self) -> usize {
        self.routes
            .values()
            .map(|route| match route {
                Route::Held { held, .. } => held.len(),
                Route::Home(_) => 0,
            })
            .sum()
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<RoutingOutput<M>> {
        self.out.pop_front()
    }
}

/// The old home's wait for the markers of a hand-off: the shard stops once
/// every region named by the coordinator sent its marker or is gone.
#[derive(Debug, Clone)]
pub struct MarkerWait {
    shard: ShardId,
    handoff: HandOffId,
    waiting: BTreeSet<Arc<str>>,
}

impl MarkerWait {
    /// Waits for the markers of `regions` for hand-off `handoff` of
    /// `shard`.
    pub fn new(
        shard: ShardId,
        handoff: HandOffId,
        regions: impl IntoIterator<Item = Arc<str>>,
    ) -> Self {
        Self {
            shard,
            handoff,
            waiting: regions.into_iter().collect(),
        }
    }

    /// The shard handed over.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The hand-off.
    pub fn handoff(&self) -> HandOffId {
        self.handoff
    }

    /// `region`'s marker arrived; returns whether none is awaited any more.
    pub fn marker(&mut self, region: &str) -> bool {
        self.waiting.remove(region);
        self.done()
    }

    /// `region` is gone (nothing more arrives from it); returns whether
    /// none is awaited any more.
    pub fn region_gone(&mut self, region: &str) -> bool {
        self.marker(region)
    }

    /// Whether every marker arrived: the shard may stop.
    pub fn done(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests;
