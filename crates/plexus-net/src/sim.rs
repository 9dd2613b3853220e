//! A deterministic test harness: two [`Stack`]s joined by a simulated link on
//! virtual time (in the spirit of quinn-proto's `Pair`).
//!
//! The link applies loss, duplication, latency with jitter and reordering to
//! datagrams, chosen by a seeded RNG, so a seed replays a run exactly. On a
//! byte-stream transport the link is reliable and ordered but re-chunks the
//! stream at random points, as TCP may. Time only moves when the harness
//! jumps to the next event (a datagram arriving or a stack deadline), so
//! tests covering minutes of protocol time run in milliseconds.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use bytes::Bytes;
//! use plexus_net::sim::{LinkModel, Pair};
//!
//! let spec = "udp / delivery / ordering".parse().unwrap();
//! let lossy = LinkModel { loss: 0.2, ..LinkModel::default() };
//! let mut pair = Pair::new(&spec, lossy, 7, Instant::now());
//! for i in 0..100u32 {
//!     pair.send_a(Bytes::copy_from_slice(&i.to_be_bytes())).unwrap();
//! }
//! pair.run_for(Duration::from_secs(30));
//! assert_eq!(pair.b.received.len(), 100);
//! ```

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::error::{LinkError, StackSendError};
use crate::layer::{DataUnit, LinkContext, LinkEvent};
use crate::spec::StackSpec;
use crate::stack::Stack;

/// Properties of the simulated link, the same in both directions.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkModel {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by an extra `2 * latency + jitter`
    /// (and so overtaken).
    pub reorder: f64,
    /// One-way latency.
    pub latency: Duration,
    /// Extra uniform random delay in `0..=jitter`.
    pub jitter: Duration,
}

impl Default for LinkModel {
    fn default() -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            latency: Duration::from_millis(5),
            jitter: Duration::ZERO,
        }
    }
}

/// One endpoint of a [`Pair`] and what it handed up.
#[derive(Debug)]
pub struct Endpoint {
    /// The stack under test.
    pub stack: Stack,
    /// Messages handed up, in order.
    pub received: Vec<Bytes>,
    /// Events raised, in order.
    pub events: Vec<LinkEvent>,
    /// Why the link closed, if it did.
    pub closed: Option<LinkError>,
    /// Frames this endpoint put on the wire.
    pub transmitted: u64,
}

#[derive(Debug)]
struct Datagram {
    at: Instant,
    order: u64,
    to_b: bool,
    data: Bytes,
}

/// Two stacks joined by a simulated link. See the [module docs](self).
#[derive(Debug)]
pub struct Pair {
    /// Endpoint A.
    pub a: Endpoint,
    /// Endpoint B.
    pub b: Endpoint,
    /// The virtual clock.
    pub now: Instant,
    /// The link; may be changed between steps (e.g. `loss = 1.0` for a
    /// partition).
    pub link: LinkModel,
    rng: SmallRng,
    stream: bool,
    in_flight: Vec<Datagram>,
    order: u64,
    /// Earliest arrival allowed next per direction (streams stay ordered).
    stream_floor: [Instant; 2],
}

impl Pair {
    /// Two instances of `spec` (link ids 0 and 1) created at `start`.
    pub fn new(spec: &StackSpec, link: LinkModel, seed: u64, start: Instant) -> Self {
        let endpoint = |link_id| Endpoint {
            stack: spec.build_link(LinkContext {
                now: start,
                link_id,
            }),
            received: Vec::new(),
            events: Vec::new(),
            closed: None,
            transmitted: 0,
        };
        Self {
            a: endpoint(0),
            b: endpoint(1),
            now: start,
            link,
            rng: SmallRng::seed_from_u64(seed),
            stream: spec.needs() == DataUnit::ByteStream,
            in_flight: Vec::new(),
            order: 0,
            stream_floor: [start; 2],
        }
    }

    /// Sends `msg` from A at the current time.
    ///
    /// # Errors
    ///
    /// Whatever [`Stack::handle_send`] refuses.
    pub fn send_a(&mut self, msg: Bytes) -> Result<(), StackSendError> {
        let r = self.a.stack.handle_send(self.now, msg);
        self.pump();
        r
    }

    /// Sends `msg` from B at the current time.
    ///
    /// # Errors
    ///
    /// Whatever [`Stack::handle_send`] refuses.
    pub fn send_b(&mut self, msg: Bytes) -> Result<(), StackSendError> {
        let r = self.b.stack.handle_send(self.now, msg);
        self.pump();
        r
    }

    /// Datagrams (or stream chunks) on the wire.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The next instant something happens, if anything will.
    pub fn next_event(&self) -> Option<Instant> {
        let wire = self.in_flight.iter().map(|d| d.at).min();
        [
            wire,
            self.a.stack.poll_timeout(),
            self.b.stack.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Jumps to the next event and processes everything due then. Returns
    /// `false` when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        let Some(at) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(at);
        let now = self.now;
        let mut due: Vec<Datagram> = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].at <= now {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|d| (d.at, d.order));
        for d in due {
            let ep = if d.to_b { &mut self.b } else { &mut self.a };
            if let Err(e) = ep.stack.handle_receive(now, d.data) {
                ep.closed.get_or_insert(e);
            }
        }
        for ep in [&mut self.a, &mut self.b] {
            if ep.stack.poll_timeout().is_some_and(|t| t <= now) {
                if let Err(e) = ep.stack.handle_timeout(now) {
                    ep.closed.get_or_insert(e);
                }
            }
        }
        self.pump();
        true
    }

    /// Steps until `deadline` or until nothing is left to happen.
    pub fn run_until(&mut self, deadline: Instant) {
        while self.next_event().is_some_and(|t| t <= deadline) {
            self.step();
        }
        self.now = self.now.max(deadline);
    }

    /// Steps for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Steps until nothing is on the wire and no stack has a deadline within
    /// `horizon`, or `limit` of virtual time passed. Returns whether it
    /// became quiet. A `horizon` shorter than the longest retransmission
    /// timeout (`delivery`'s `max_rto`, 5 s by default) can stop a run
    /// while a backed-off retransmission is still due.
    pub fn run_until_quiet(&mut self, horizon: Duration, limit: Duration) -> bool {
        let end = self.now + limit;
        loop {
            match self.next_event() {
                None => return true,
                Some(t) if self.in_flight.is_empty() && t > self.now + horizon => return true,
                Some(t) if t > end => return false,
                Some(_) => {
                    self.step();
                }
            }
        }
    }

    /// Moves everything both stacks produced onto the wire or into the
    /// endpoints' records.
    pub fn pump(&mut self) {
        for to_b in [true, false] {
            let ep = if to_b { &mut self.a } else { &mut self.b };
            while let Some(m) = ep.stack.poll_receive() {
                ep.received.push(m);
            }
            while let Some(e) = ep.stack.poll_event() {
                ep.events.push(e);
            }
            let mut frames = Vec::new();
            while let Some(f) = ep.stack.poll_transmit() {
                ep.transmitted += 1;
                frames.push(f);
            }
            if self.stream {
                let mut buf = BytesMut::new();
                for f in &frames {
                    f.extend_into(&mut buf);
                }
                self.put_stream(to_b, buf.freeze());
            } else {
                for f in frames {
                    self.put_datagram(to_b, f.to_bytes());
                }
            }
        }
    }

    fn delay(&mut self) -> Duration {
        let jitter = self.link.jitter.as_nanos() as u64;
        let extra = if jitter == 0 {
            0
        } else {
            self.rng.gen_range(0..=jitter)
        };
        self.link.latency + Duration::from_nanos(extra)
    }

    fn put_datagram(&mut self, to_b: bool, data: Bytes) {
        if self.rng.gen_bool(self.link.loss) {
            return;
        }
        let copies = if self.rng.gen_bool(self.link.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut d = self.delay();
            if self.rng.gen_bool(self.link.reorder) {
                d += self.link.latency * 2 + self.link.jitter;
            }
            self.order += 1;
            self.in_flight.push(Datagram {
                at: self.now + d,
                order: self.order,
                to_b,
                data: data.clone(),
            });
        }
    }

    fn put_stream(&mut self, to_b: bool, mut data: Bytes) {
        while !data.is_empty() {
            let n = self.rng.gen_range(1..=data.len().min(4096));
            let chunk = data.split_to(n);
            let dir = usize::from(to_b);
            let at = (self.now + self.delay()).max(self.stream_floor[dir]);
            self.stream_floor[dir] = at;
            self.order += 1;
            self.in_flight.push(Datagram {
                at,
                order: self.order,
                to_b,
                data: chunk,
            });
        }
    }
}
