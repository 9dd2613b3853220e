//! The sending side of an adaptive lane: its frames are numbered and split
//! between the lane's candidate links by the ratio an
//! [`AdaptiveSelector`] learns from each candidate's goodput; the receiver
//! puts them back in order (`Peer::resequenced`).
//!
//! A frame goes to the candidate the selector's interleaving pattern
//! picks among those that would deliver it in time: a candidate whose queue
//! would take longer to drain, at its measured goodput, than the quickest
//! candidate's plus a margin ([`MARGIN`], or as much again) is skipped, and
//! one not measured yet takes only [`PROBE_QUEUE`] bytes. The receiver
//! releases frames in number order, so a frame queued behind a slow
//! candidate holds up everything sent after it on the others: keeping the
//! candidates' queueing delays alike bounds that wait, and a candidate
//! that stalls gets no more frames (it keeps its pattern share only while
//! it keeps up). If none qualifies, the quickest takes the frame. Every
//! 100 ms a sampler task
//! tells the selector what each candidate carried (bytes queued minus the
//! growth of its queue) and whether its queue stayed non-empty (then that
//! is its capacity).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_core::Lane;
use plexus_net::Frame;
use plexus_transport::{LinkTrySendError, Strand};

use super::links::LaneLink;
use crate::node::lock;
use crate::selector::{AdaptiveSelector, CandidateStats, CapacityConfig, Sample};
use crate::wire::{put_sequenced_header, MAX_CANDIDATES};

/// A candidate whose goodput is not measured yet takes frames only while
/// fewer bytes than this wait on it.
pub(crate) const PROBE_QUEUE: usize = 64 << 10;
/// How much longer than the quickest candidate's a candidate's queue may
/// take to drain (at least; or as long again as the quickest's).
pub(crate) const MARGIN: Duration = Duration::from_millis(20);
/// How often the sampler feeds the selector.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// An adaptive lane's candidates and the state of its split.
pub(crate) struct AdaptiveLane {
    pub(crate) lane: Lane,
    pub(crate) candidates: Vec<LaneLink>,
    state: Mutex<SplitState>,
}

struct SplitState {
    selector: AdaptiveSelector,
    next_seq: u64,
    /// Per candidate: bytes queued on it since the last sample, and its
    /// queue length then.
    sent: Vec<u64>,
    queued_then: Vec<usize>,
    /// Per candidate: whether its queue was seen empty since the last
    /// sample (a send found it empty, or the sampler did).
    ran_dry: Vec<bool>,
    /// Per candidate: frames sent.
    frames: Vec<u64>,
}

impl AdaptiveLane {
    pub(crate) fn new(lane: Lane, candidates: Vec<LaneLink>, now: Instant) -> Arc<Self> {
        let n = candidates.len();
        // Two to `MAX_CANDIDATES` candidates (the configuration and the
        // wire's bounds), within what the learner takes.
        let selector = AdaptiveSelector::new(now, n, CapacityConfig::default())
            .expect("2..=4 candidates with the default configuration");
        Arc::new(Self {
            lane,
            candidates,
            state: Mutex::new(SplitState {
                selector,
                next_seq: 0,
                sent: vec![0; n],
                queued_then: vec![0; n],
                ran_dry: vec![true; n],
                frames: vec![0; n],
            }),
        })
    }

    /// Numbers `frame` and queues it on a candidate, without waiting. The
    /// number goes before the frame as a header of its own: the frame is
    /// not copied.
    pub(crate) fn try_send(&self, frame: &Bytes) -> Result<(), LinkTrySendError> {
        let mut st = lock(&self.state);
        // Per candidate (fixed arrays: nothing allocated per frame): its
        // queued bytes, and the seconds its queue takes to drain at its
        // goodput (`None`: not measured yet).
        let n = self.candidates.len();
        let mut queued = [0usize; MAX_CANDIDATES];
        let mut drain = [None::<f64>; MAX_CANDIDATES];
        for (c, (candidate, stats)) in self.candidates.iter().zip(st.selector.stats()).enumerate() {
            queued[c] = candidate.sender.queued_bytes();
            drain[c] = (stats.goodput_bytes_per_s > 1.0)
                .then(|| queued[c] as f64 / stats.goodput_bytes_per_s);
        }
        let quickest = drain[..n]
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let bound = if quickest.is_finite() {
            quickest + MARGIN.as_secs_f64().max(quickest)
        } else {
            0.0
        };
        let in_time = |c: usize| match drain[c] {
            Some(d) => d <= bound,
            None => queued[c] < PROBE_QUEUE,
        };
        let first = st.selector.pick_where(in_time).unwrap_or_else(|| {
            // None in time: the one that drains first.
            (0..n)
                .min_by(|&a, &b| {
                    let key = |c: usize| drain[c].unwrap_or(queued[c] as f64 / 1e6);
                    key(a).total_cmp(&key(b))
                })
                .unwrap_or(0)
        });
        let seq = st.next_seq;
        let mut header = [0u8; 12];
        let header_len = {
            let mut b = &mut header[..];
            put_sequenced_header(&mut b, self.lane.index() as u8, seq);
            12 - b.len()
        };
        let mut wrapped = Frame::from_payload(frame.clone());
        wrapped.push_header(&header[..header_len]);
        // The picked candidate, then the others: a number is used only
        // once a link took its frame, so the receiver never waits for one
        // that was not sent.
        let mut last = None;
        for c in (0..n).map(|i| (first + i) % n) {
            let len = wrapped.len() as u64;
            match self.candidates[c]
                .sender
                .try_send_frame_on(Strand::ZERO, wrapped.clone())
            {
                Ok(()) => {
                    st.next_seq += 1;
                    st.sent[c] += len;
                    st.frames[c] += 1;
                    if queued[c] == 0 {
                        st.ran_dry[c] = true;
                    }
                    return Ok(());
                }
                Err(e @ LinkTrySendError::Full { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least two candidates"))
    }

    /// Feeds the selector one sample per candidate (the sampler task's
    /// tick).
    pub(crate) fn sample(&self, now: Instant) {
        let mut st = lock(&self.state);
        for (c, candidate) in self.candidates.iter().enumerate() {
            let queued = candidate.sender.queued_bytes();
            let grew = queued as i64 - st.queued_then[c] as i64;
            let delivered = (st.sent[c] as i64 - grew).max(0) as u64;
            let backlogged = !st.ran_dry[c] && queued > 0;
            let rate = delivered as f64 / SAMPLE_EVERY.as_secs_f64();
            let delay = if rate > 0.0 {
                Duration::from_secs_f64(queued as f64 / rate)
            } else {
                Duration::ZERO
            };
            st.selector.on_sample(
                now,
                c,
                Sample {
                    bytes_delivered: delivered,
                    delay,
                    backlogged,
                },
            );
            st.sent[c] = 0;
            st.queued_then[c] = queued;
            st.ran_dry[c] = queued == 0;
        }
    }

    /// The selector's view of each candidate, with its frame count.
    pub(crate) fn stats(&self) -> Vec<(CandidateStats, u64)> {
        let st = lock(&self.state);
        st.selector
            .stats()
            .iter()
            .copied()
            .zip(st.frames.iter().copied())
            .collect()
    }
}
