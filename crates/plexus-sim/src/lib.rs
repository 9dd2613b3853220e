//! The Plexus test kit's network simulator: many sans-IO processes on
//! virtual time over a seeded, faulty network.
//!
//! ```text
//!   Process 0        Process 1   ...   Process N-1     (sans-IO state machines:
//!   handle_packet    handle_timeout    poll_transmit    packets and time in,
//!        ▲                ▲                 │          packets, events, deadlines out)
//!  ──────┼────────────────┼─────────────────▼──────────────────────────────────
//!   Sim: one event queue on virtual time; per-link loss, duplication, delay,
//!   jitter and reordering (a LinkModel); partitions (symmetric or one-way),
//!   crashes, restarts and stalls; all randomness from one seed
//! ```
//!
//! A process is any sans-IO protocol endpoint ([`Protocol`], from
//! `plexus-net`, with [`Address`] as its address): a cluster member, a CRDT
//! replicator, a user's own protocol. The same trait runs on a node under
//! `plexus_remote::driver`. The simulator moves the packets it
//! transmits to their addressees after the link's delay (or drops them),
//! wakes it at its deadlines, and records the events it raises with the
//! virtual time they happened at. Time jumps from event to event, so an
//! hour of protocol time for tens of processes runs in seconds.
//!
//! **Determinism.** Everything random (loss, duplication, delay, reordering,
//! and whatever a test draws from [`Sim::rng`]) comes from one seeded RNG,
//! and events at the same instant run in the order they were scheduled, so a
//! seed replays a run exactly: [`Sim::trace`] is byte-identical between two
//! runs of one seed. [`check_seeds`] runs a test over many seeds and prints
//! the seed of a failure with the environment variable that reruns it alone.
//!
//! **Faults.**
//! * [`Sim::crash`]: the process is gone; packets to it are dropped.
//! * [`Sim::restart`]: a new process takes the address.
//! * [`Sim::stall`]: the process does nothing for a while (a GC pause, a
//!   starved CPU); packets queue for it and its timers wait; when it wakes
//!   it first handles its expired deadline, then the packets in arrival
//!   order (the worst case for a failure detector: timers before acks).
//! * [`Sim::partition`] and [`Sim::partition_one_way`], healed by
//!   [`Sim::heal`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use bytes::Bytes;
//! use plexus_sim::{Address, LinkModel, Protocol, Sim};
//!
//! /// Answers every packet with the same bytes.
//! struct Echo { out: Vec<(Address, Bytes)>, heard: u32 }
//!
//! impl Protocol for Echo {
//!     type Address = Address;
//!     type Event = u32;
//!     fn handle_packet(&mut self, _now: Instant, from: Address, packet: Bytes) {
//!         self.heard += 1;
//!         if packet.as_ref() == b"ping" {
//!             self.out.push((from, Bytes::from_static(b"pong")));
//!         }
//!     }
//!     fn handle_timeout(&mut self, _now: Instant) {}
//!     fn poll_transmit(&mut self) -> Option<(Address, Bytes)> { self.out.pop() }
//!     fn poll_timeout(&self) -> Option<Instant> { None }
//!     fn poll_event(&mut self) -> Option<u32> { None }
//! }
//!
//! let mut sim = Sim::new(7, LinkModel::default());
//! let a = sim.add(Echo { out: Vec::new(), heard: 0 });
//! let b = sim.add(Echo { out: vec![(0, Bytes::from_static(b"ping"))], heard: 0 });
//! sim.wake(b);
//! sim.run_for(Duration::from_secs(1));
//! assert_eq!(sim.process(a).unwrap().heard, 1);
//! assert_eq!(sim.process(b).unwrap().heard, 1);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod seeds;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub use plexus_net::protocol::Protocol;
pub use plexus_net::sim::LinkModel;
pub use seeds::{check_seeds, SEED_VARIABLE};

/// A process's address in a [`Sim`]: the index it was added at. A
/// simulated process is a [`Protocol`] with this address; the simulator
/// calls `handle_packet` / `handle_timeout`, then drains `poll_transmit`
/// and `poll_event`, then reads `poll_timeout` (the order a real driver
/// uses).
pub type Address = usize;

/// An event a process raised, with the virtual time since the start.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded<E> {
    /// Virtual time since [`Sim::new`].
    pub at: Duration,
    /// The process that raised it.
    pub process: Address,
    /// The event.
    pub event: E,
}

/// Packets and bytes a process put on the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Packets transmitted (before loss).
    pub packets: u64,
    /// Bytes transmitted (before loss).
    pub bytes: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Deliver {
        to: Address,
        from: Address,
        packet: usize,
    },
    Timer {
        to: Address,
    },
    Wake {
        to: Address,
    },
}

struct Slot<P> {
    process: Option<P>,
    /// The deadline the queue holds a timer entry for.
    timer: Option<Instant>,
    stalled_until: Option<Instant>,
    inbox: Vec<(Address, Bytes)>,
    traffic: Traffic,
}

/// The simulator. See the [crate docs](crate).
pub struct Sim<P: Protocol<Address = Address>>
where
    P::Event: fmt::Debug,
{
    seed: u64,
    start: Instant,
    now: Instant,
    rng: SmallRng,
    model: LinkModel,
    links: HashMap<(Address, Address), LinkModel>,
    blocked: HashSet<(Address, Address)>,
    slots: Vec<Slot<P>>,
    queue: BinaryHeap<Reverse<(Instant, u64, Kind)>>,
    /// Packets in flight, indexed from the queue (Bytes is not `Ord`).
    packets: HashMap<usize, Bytes>,
    next_packet: usize,
    next_seq: u64,
    events: Vec<Recorded<P::Event>>,
    trace: String,
    record_trace: bool,
}

impl<P: Protocol<Address = Address>> fmt::Debug for Sim<P>
where
    P::Event: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.seed)
            .field("elapsed", &self.elapsed())
            .field("processes", &self.slots.len())
            .field("in_flight", &self.packets.len())
            .finish()
    }
}

impl<P: Protocol<Address = Address>> Sim<P>
where
    P::Event: fmt::Debug,
{
    /// An empty simulation whose randomness comes from `seed`, with `model`
    /// on every link (change one with [`Sim::set_link`]).
    pub fn new(seed: u64, model: LinkModel) -> Self {
        let start = Instant::now();
        Self {
            seed,
            start,
            now: start,
            rng: SmallRng::seed_from_u64(seed),
            model,
            links: HashMap::new(),
            blocked: HashSet::new(),
            slots: Vec::new(),
            queue: BinaryHeap::new(),
            packets: HashMap::new(),
            next_packet: 0,
            next_seq: 0,
            events: Vec::new(),
            trace: String::new(),
            record_trace: true,
        }
    }

    /// The seed this simulation was made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The virtual instant the simulation started at: processes are made
    /// with it (or [`Sim::now`]) as their clock's origin.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The simulation's RNG, for a test's own random choices (which node to
    /// crash, when), so they replay with the seed too.
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }

    /// Whether events are also written to the text [`Sim::trace`] (on by
    /// default; off saves time and memory in long runs).
    pub fn record_trace(&mut self, on: bool) {
        self.record_trace = on;
    }

    /// Adds a process and returns its address. Call [`Sim::wake`] if it has
    /// something to send before any packet reaches it.
    pub fn add(&mut self, process: P) -> Address {
        self.slots.push(Slot {
            process: Some(process),
            timer: None,
            stalled_until: None,
            inbox: Vec::new(),
            traffic: Traffic::default(),
        });
        let address = self.slots.len() - 1;
        self.flush(address);
        address
    }

    /// Drains what the process at `address` has to send and reschedules its
    /// timer (after a test changed it through [`Sim::process_mut`]).
    pub fn wake(&mut self, address: Address) {
        self.flush(address);
    }

    /// Number of addresses (crashed ones included).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no process was added.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The process at `address`, unless it crashed.
    pub fn process(&self, address: Address) -> Option<&P> {
        self.slots.get(address)?.process.as_ref()
    }

    /// The process at `address`, unless it crashed. Call [`Sim::wake`]
    /// after changing it.
    pub fn process_mut(&mut self, address: Address) -> Option<&mut P> {
        self.slots.get_mut(address)?.process.as_mut()
    }

    /// Addresses of the processes that are running (not crashed).
    pub fn live(&self) -> impl Iterator<Item = Address> + '_ {
        (0..self.slots.len()).filter(|&a| self.slots[a].process.is_some())
    }

    /// Whether the process at `address` is stalled.
    pub fn is_stalled(&self, address: Address) -> bool {
        self.slots[address]
            .stalled_until
            .is_some_and(|t| t > self.now)
    }

    /// Crashes the process at `address` and returns it; packets to the
    /// address are dropped until [`Sim::restart`].
    pub fn crash(&mut self, address: Address) -> Option<P> {
        let slot = &mut self.slots[address];
        slot.timer = None;
        slot.stalled_until = None;
        slot.inbox.clear();
        slot.process.take()
    }

    /// Puts a new process at `address` (after a crash).
    pub fn restart(&mut self, address: Address, process: P) {
        self.slots[address].process = Some(process);
        self.flush(address);
    }

    /// Stalls the process at `address` for `duration`: nothing runs there
    /// until it wakes; packets queue.
    pub fn stall(&mut self, address: Address, duration: Duration) {
        let until = self.now + duration;
        let slot = &mut self.slots[address];
        if slot.process.is_none() {
            return;
        }
        let until = slot.stalled_until.map_or(until, |u| u.max(until));
        slot.stalled_until = Some(until);
        self.schedule(until, Kind::Wake { to: address });
    }

    /// Cuts both directions between every process of `a` and every one of
    /// `b`.
    pub fn partition(&mut self, a: &[Address], b: &[Address]) {
        self.partition_one_way(a, b);
        self.partition_one_way(b, a);
    }

    /// Cuts packets from every process of `from` to every one of `to`; the
    /// other direction still works (an asymmetric partition).
    pub fn partition_one_way(&mut self, from: &[Address], to: &[Address]) {
        for &f in from {
            for &t in to {
                self.blocked.insert((f, t));
            }
        }
    }

    /// Removes every partition.
    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Replaces the model of every link without its own (see
    /// [`Sim::set_link`]).
    pub fn set_default_link(&mut self, model: LinkModel) {
        self.model = model;
    }

    /// The model of the link from `from` to `to` (one direction).
    pub fn set_link(&mut self, from: Address, to: Address, model: LinkModel) {
        self.links.insert((from, to), model);
    }

    /// What the process at `address` transmitted so far.
    pub fn traffic(&self, address: Address) -> Traffic {
        self.slots[address].traffic
    }

    /// Events raised so far, in order.
    pub fn events(&self) -> &[Recorded<P::Event>] {
        &self.events
    }

    /// Takes the events raised so far.
    pub fn take_events(&mut self) -> Vec<Recorded<P::Event>> {
        std::mem::take(&mut self.events)
    }

    /// Every event raised so far, one per line: `<micros> <address> <event:?>`.
    /// Two runs of one seed give the same text.
    pub fn trace(&self) -> &str {
        &self.trace
    }

    /// Runs every event up to `now + duration`, then sets the clock there.
    pub fn run_for(&mut self, duration: Duration) {
        let until = self.now + duration;
        while self.step_before(until) {}
        self.now = until;
    }

    /// Runs events until `done` holds (checked after each one) or `limit`
    /// of virtual time passed; returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let until = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if !self.step_before(until) {
                self.now = until;
                return done(self);
            }
        }
    }

    /// Runs the next event due at or before `until`; false if there is none.
    fn step_before(&mut self, until: Instant) -> bool {
        let Some(Reverse((at, _, _))) = self.queue.peek() else {
            return false;
        };
        if *at > until {
            return false;
        }
        let Some(Reverse((at, _, kind))) = self.queue.pop() else {
            return false;
        };
        self.now = self.now.max(at);
        match kind {
            Kind::Deliver { to, from, packet } => {
                let Some(bytes) = self.packets.remove(&packet) else {
                    return true;
                };
                let now = self.now;
                let slot = &mut self.slots[to];
                if slot.process.is_none() {
                    return true;
                }
                if slot.stalled_until.is_some_and(|t| t > now) {
                    slot.inbox.push((from, bytes));
                    return true;
                }
                if let Some(p) = slot.process.as_mut() {
                    p.handle_packet(now, from, bytes);
                }
                self.flush(to);
            }
            Kind::Timer { to } => {
                let now = self.now;
                let slot = &mut self.slots[to];
                if slot.timer != Some(at) || slot.stalled_until.is_some_and(|t| t > now) {
                    return true;
                }
                slot.timer = None;
                if let Some(p) = slot.process.as_mut() {
                    p.handle_timeout(now);
                }
                self.flush(to);
            }
            Kind::Wake { to } => {
                let now = self.now;
                let slot = &mut self.slots[to];
                if slot.stalled_until.is_none_or(|t| t > now) {
                    return true;
                }
                slot.stalled_until = None;
                let inbox = std::mem::take(&mut slot.inbox);
                slot.timer = None;
                if let Some(p) = slot.process.as_mut() {
                    if p.poll_timeout().is_some_and(|d| d <= now) {
                        p.handle_timeout(now);
                    }
                    for (from, bytes) in inbox {
                        p.handle_packet(now, from, bytes);
                    }
                }
                self.flush(to);
            }
        }
        true
    }

    fn schedule(&mut self, at: Instant, kind: Kind) {
        self.next_seq += 1;
        self.queue.push(Reverse((at, self.next_seq, kind)));
    }

    /// Moves what the process at `address` transmitted onto the network,
    /// records its events and schedules its next deadline.
    fn flush(&mut self, address: Address) {
        let Some(mut process) = self.slots[address].process.take() else {
            return;
        };
        while let Some((to, bytes)) = process.poll_transmit() {
            self.transmit(address, to, bytes);
        }
        while let Some(event) = process.poll_event() {
            let at = self.elapsed();
            if self.record_trace {
                // Writing to a String cannot fail.
                let _ = writeln!(self.trace, "{} {} {:?}", at.as_micros(), address, event);
            }
            self.events.push(Recorded {
                at,
                process: address,
                event,
            });
        }
        // A deadline already past fires now; the slot remembers the instant
        // its queue entry carries, so an unchanged deadline is not queued
        // twice.
        let deadline = process.poll_timeout().map(|at| at.max(self.now));
        let slot = &mut self.slots[address];
        slot.process = Some(process);
        if deadline != slot.timer {
            slot.timer = deadline;
            if let Some(at) = deadline {
                self.schedule(at, Kind::Timer { to: address });
            }
        }
    }

    fn transmit(&mut self, from: Address, to: Address, bytes: Bytes) {
        let traffic = &mut self.slots[from].traffic;
        traffic.packets += 1;
        traffic.bytes += bytes.len() as u64;
        if to >= self.slots.len() || self.blocked.contains(&(from, to)) {
            return;
        }
        let model = self.links.get(&(from, to)).unwrap_or(&self.model).clone();
        if self.rng.gen_bool(model.loss.clamp(0.0, 1.0)) {
            return;
        }
        let copies = if self.rng.gen_bool(model.duplicate.clamp(0.0, 1.0)) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = model.latency + jitter(&mut self.rng, model.jitter);
            if self.rng.gen_bool(model.reorder.clamp(0.0, 1.0)) {
                delay += 2 * model.latency + jitter(&mut self.rng, model.jitter);
            }
            let id = self.next_packet;
            self.next_packet += 1;
            self.packets.insert(id, bytes.clone());
            self.schedule(
                self.now + delay,
                Kind::Deliver {
                    to,
                    from,
                    packet: id,
                },
            );
        }
    }
}

fn jitter(rng: &mut SmallRng, max: Duration) -> Duration {
    if max.is_zero() {
        Duration::ZERO
    } else {
        Duration::from_nanos(rng.gen_range(0..=max.as_nanos() as u64))
    }
}

#[cfg(test)]
mod tests;
