//! The links of one session with a peer node: the primary link (the one
//! the handshake ran on, dialled for the URI's scheme) and a link per
//! mapped lane (see `docs/PROTOCOL.md`, "Lanes"). A frame goes out on its
//! lane's link, or on the primary link if the lane has none.
//!
//! A lane link carries one lane, so it keeps that lane's order on one
//! strand: strands matter only on the primary link, which carries every
//! lane without a link of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use plexus_core::Lane;
use plexus_net::Guarantees;
use plexus_transport::{LinkSendError, LinkSender, LinkStats, LinkTrySendError, Strand};

use super::adaptive::AdaptiveLane;

/// Which link of a session a frame takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// Its lane's link, or the primary link if the lane has none.
    Lane(Lane),
    /// The primary link, whatever the lanes: a forged ref's fence, which
    /// must follow the frames it fences on the primary link's strand.
    Primary,
}

/// A lane connection of a session, before it is split.
pub(crate) struct BoundLink {
    pub(crate) lane: Lane,
    pub(crate) candidate: u8,
    pub(crate) scheme: String,
    pub(crate) link: plexus_transport::Link,
}

/// The sending half of one lane connection.
#[derive(Clone)]
pub(crate) struct LaneLink {
    pub(crate) scheme: String,
    pub(crate) sender: LinkSender,
    pub(crate) guarantees: Guarantees,
}

/// How a lane's frames leave.
#[derive(Clone)]
pub(crate) enum LaneRoute {
    /// On the primary link (the lane has no link of its own).
    Primary,
    /// On the lane's own link.
    Own(LaneLink),
    /// Split between candidate links, numbered.
    Adaptive(Arc<AdaptiveLane>),
}

/// The sending halves of a session's links. Cheap to clone (reference
/// counts); closing it closes every link of the session.
#[derive(Clone)]
pub(crate) struct SessionLinks {
    primary: LinkSender,
    /// Per lane (by [`Lane::index`]).
    lanes: [LaneRoute; Lane::COUNT],
    /// Per lane: frames sent on it.
    frames: Arc<[AtomicU64; Lane::COUNT]>,
}

impl SessionLinks {
    pub(crate) fn new(primary: LinkSender) -> Self {
        Self {
            primary,
            lanes: std::array::from_fn(|_| LaneRoute::Primary),
            frames: Arc::new(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// Sets how `lane`'s frames leave.
    pub(crate) fn with_lane(mut self, lane: Lane, route: LaneRoute) -> Self {
        self.lanes[lane.index()] = route;
        self
    }

    /// The primary link.
    pub(crate) fn primary(&self) -> &LinkSender {
        &self.primary
    }

    /// What the link(s) carrying `lane` guarantee, given what the primary
    /// link's stack does. An adaptive lane is reliable and ordered (its
    /// candidates are reliable; the receiver resequences).
    pub(crate) fn guarantees(&self, lane: Lane, primary: Guarantees) -> Guarantees {
        match &self.lanes[lane.index()] {
            LaneRoute::Primary => primary,
            LaneRoute::Own(l) => l.guarantees,
            LaneRoute::Adaptive(_) => Guarantees::RELIABLE_ORDERED,
        }
    }

    /// Frames sent on `lane` so far in this session.
    pub(crate) fn frames(&self, lane: Lane) -> u64 {
        self.frames[lane.index()].load(Ordering::Relaxed)
    }

    /// The adaptive lanes of the session.
    pub(crate) fn adaptive(&self) -> impl Iterator<Item = &Arc<AdaptiveLane>> {
        self.lanes.iter().filter_map(|r| match r {
            LaneRoute::Adaptive(a) => Some(a),
            _ => None,
        })
    }

    /// Where a frame on `carrier` and `strand` goes: its lane's link (on
    /// one strand), the lane's candidates, or the primary link on
    /// `strand`.
    fn route(
        &self,
        carrier: Carrier,
        strand: Strand,
    ) -> Result<(&LinkSender, Strand), &AdaptiveLane> {
        if let Carrier::Lane(lane) = carrier {
            self.frames[lane.index()].fetch_add(1, Ordering::Relaxed);
        }
        self.route_run(carrier, strand)
    }

    /// Where `carrier`'s frames on `strand` go, not yet counted.
    fn route_run(
        &self,
        carrier: Carrier,
        strand: Strand,
    ) -> Result<(&LinkSender, Strand), &AdaptiveLane> {
        match carrier {
            Carrier::Lane(lane) => match &self.lanes[lane.index()] {
                LaneRoute::Own(l) => Ok((&l.sender, Strand::ZERO)),
                LaneRoute::Adaptive(a) => Err(a),
                LaneRoute::Primary => Ok((&self.primary, strand)),
            },
            Carrier::Primary => Ok((&self.primary, strand)),
        }
    }

    /// Queues `frame` on `carrier` if there is room, without waiting.
    pub(crate) fn try_send_on(
        &self,
        carrier: Carrier,
        strand: Strand,
        frame: Bytes,
    ) -> Result<(), LinkTrySendError> {
        match self.route(carrier, strand) {
            Ok((sender, strand)) => sender.try_send_on(strand, frame),
            Err(adaptive) => adaptive.try_send(&frame).map_err(|e| e.with_message(frame)),
        }
    }

    /// [`try_send_on`](Self::try_send_on) for a frame in a scratch buffer.
    pub(crate) fn try_send_copy_on(
        &self,
        carrier: Carrier,
        strand: Strand,
        frame: &[u8],
    ) -> Result<(), LinkTrySendError> {
        match self.route(carrier, strand) {
            Ok((sender, strand)) => sender.try_send_copy_on(strand, frame),
            Err(adaptive) => {
                let frame = Bytes::copy_from_slice(frame);
                adaptive.try_send(&frame).map_err(|e| e.with_message(frame))
            }
        }
    }

    /// Queues copies of a run of frames on `carrier` and `strand` if the
    /// link has room for all of them, without waiting: the frames lie end
    /// to end in `bytes`, frame `i` ending at `ends[i]` (see
    /// [`LinkSender::try_send_copies_on`]). Returns how many were queued:
    /// all or none (then also on an adaptive lane, whose candidates take
    /// frames one by one).
    pub(crate) fn try_send_copies_on(
        &self,
        carrier: Carrier,
        strand: Strand,
        bytes: &[u8],
        ends: &[u32],
    ) -> usize {
        let (sender, strand) = match self.route_run(carrier, strand) {
            Ok(route) => route,
            Err(_) => return 0,
        };
        let sent = sender.try_send_copies_on(strand, bytes, ends);
        if let Carrier::Lane(lane) = carrier {
            self.frames[lane.index()].fetch_add(sent as u64, Ordering::Relaxed);
        }
        sent
    }

    /// Waits until a frame of `len` bytes fits on the link that carries
    /// `carrier` (on an adaptive lane: on its candidate with the shortest
    /// queue, which drains first). Returns also when that link closes.
    pub(crate) async fn room(&self, carrier: Carrier, len: usize) {
        let sender = match carrier {
            Carrier::Primary => &self.primary,
            Carrier::Lane(lane) => match &self.lanes[lane.index()] {
                LaneRoute::Primary => &self.primary,
                LaneRoute::Own(l) => &l.sender,
                LaneRoute::Adaptive(a) => {
                    match a.candidates.iter().min_by_key(|c| c.sender.queued_bytes()) {
                        Some(c) => &c.sender,
                        None => &self.primary,
                    }
                }
            },
        };
        let _ = sender.room(len).await;
    }

    /// Queues a session frame (`GOODBYE`) on the primary link.
    pub(crate) fn try_send(&self, frame: Bytes) -> Result<(), LinkTrySendError> {
        self.primary.try_send(frame)
    }

    /// Sends a session frame on the primary link as its last (see
    /// [`LinkSender::try_send_last_on`]): a sender still holding these
    /// links gets its frame back instead of queuing it behind.
    pub(crate) fn try_send_last(&self, frame: Bytes) -> Result<(), LinkTrySendError> {
        self.primary.try_send_last_on(Strand::ZERO, frame)
    }

    /// Sends a session frame on the primary link, waiting for room.
    pub(crate) async fn send(&self, frame: Bytes) -> Result<(), LinkSendError> {
        self.primary.send(frame).await
    }

    /// The primary link's peer address.
    pub(crate) fn peer(&self) -> &str {
        self.primary.peer()
    }

    /// The primary link's counters.
    pub(crate) fn stats(&self) -> LinkStats {
        self.primary.stats()
    }

    /// Closes every link of the session (each after flushing).
    pub(crate) fn close(&self) {
        self.primary.close();
        for route in &self.lanes {
            match route {
                LaneRoute::Primary => {}
                LaneRoute::Own(l) => l.sender.close(),
                LaneRoute::Adaptive(a) => {
                    for c in &a.candidates {
                        c.sender.close();
                    }
                }
            }
        }
    }
}

impl SessionLinks {
    /// What each lane carries and how: its links, their queues and, on an
    /// adaptive lane, the split and each candidate's measured goodput.
    pub(crate) fn lane_stats(&self, primary_scheme: &str) -> Vec<(Lane, u64, Vec<LaneCandidate>)> {
        let candidate = |scheme: &str, sender: &LinkSender, guarantees| LaneCandidate {
            scheme: scheme.to_owned(),
            peer: sender.peer().to_owned(),
            guarantees,
            queued_bytes: sender.queued_bytes(),
            stats: sender.stats(),
            share: 1.0,
            goodput_bytes_per_s: None,
            delay: None,
            frames: None,
        };
        Lane::ALL
            .into_iter()
            .map(|lane| {
                let candidates = match &self.lanes[lane.index()] {
                    LaneRoute::Primary => {
                        vec![candidate(primary_scheme, &self.primary, None)]
                    }
                    LaneRoute::Own(l) => vec![candidate(&l.scheme, &l.sender, Some(l.guarantees))],
                    LaneRoute::Adaptive(a) => a
                        .candidates
                        .iter()
                        .zip(a.stats())
                        .map(|(l, (s, frames))| LaneCandidate {
                            share: s.share,
                            goodput_bytes_per_s: Some(s.goodput_bytes_per_s),
                            delay: Some(s.delay),
                            frames: Some(frames),
                            ..candidate(&l.scheme, &l.sender, Some(l.guarantees))
                        })
                        .collect(),
                };
                (lane, self.frames(lane), candidates)
            })
            .collect()
    }
}

/// One link that carries a lane; see [`Node::lane_stats`](crate::Node::lane_stats).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LaneCandidate {
    /// The scheme of the link.
    pub scheme: String,
    /// The link's peer address.
    pub peer: String,
    /// What its stack guarantees (`None` for the primary link: the
    /// guarantees of the URI's scheme).
    pub guarantees: Option<Guarantees>,
    /// Bytes queued on the link that its stack has not taken yet.
    pub queued_bytes: usize,
    /// The link's counters (the primary link's for a lane it carries).
    pub stats: LinkStats,
    /// The share of the lane's frames it is given (1 unless adaptive).
    pub share: f64,
    /// Its goodput as the adaptive lane's learner estimates it.
    pub goodput_bytes_per_s: Option<f64>,
    /// Its delay (queueing) as the adaptive lane's learner estimates it.
    pub delay: Option<std::time::Duration>,
    /// Frames of the lane it carried (adaptive lanes only).
    pub frames: Option<u64>,
}
