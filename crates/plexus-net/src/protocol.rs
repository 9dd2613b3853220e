//! The shape of a sans-IO protocol endpoint: packets and time in; packets,
//! events and the next deadline out.
//!
//! A [`Protocol`] is what Plexus's own roles are (a cluster member, a CRDT
//! replicator, a device tracker, a host of device sessions) and what a
//! user's protocol can be. Two things run one: `plexus_sim::Sim`, many of
//! them on virtual time over a faulty network, and the tokio driver in
//! `plexus_remote::driver`, one of them on a node. Writing a protocol
//! against this trait is what lets the same code be simulated and run.
//!
//! It lives here, in the crate of sans-IO pieces, because every user must
//! reach it without pulling in a runtime: the simulator has no tokio, and a
//! protocol crate depends on this trait without depending on a driver.
//!
//! # The order a runner calls it in
//!
//! 1. `handle_packet` for each packet that arrived, `handle_timeout` once
//!    `now` reached [`Protocol::poll_timeout`] (several inputs may come
//!    before step 2: a busy driver handles a batch);
//! 2. drain [`Protocol::poll_transmit`] and [`Protocol::poll_event`] until
//!    both are empty (handling an event may queue packets);
//! 3. read [`Protocol::poll_timeout`] and sleep until then or the next
//!    packet.
//!
//! A protocol never reads a clock: `now` is an input, so a run on virtual
//! time replays. It never fails a runner either: a packet it refuses is
//! dropped and counted (the runner cannot do anything better with it).

use std::time::Instant;

use bytes::Bytes;

/// A sans-IO protocol endpoint. See the [module docs](self) for the order
/// its methods are called in.
pub trait Protocol {
    /// Where packets go and come from: an index in a simulation, a peer's
    /// URI on a node.
    type Address;
    /// What the endpoint reports to whoever runs it.
    type Event;

    /// A packet from `from` arrived at `now`.
    fn handle_packet(&mut self, now: Instant, from: Self::Address, packet: Bytes);
    /// `now` reached (or passed) the deadline of [`Protocol::poll_timeout`].
    fn handle_timeout(&mut self, now: Instant);
    /// The next packet to send, with its addressee.
    fn poll_transmit(&mut self) -> Option<(Self::Address, Bytes)>;
    /// The next instant the endpoint wants to be woken at (`None`: only a
    /// packet or its runner's own input wakes it).
    fn poll_timeout(&self) -> Option<Instant>;
    /// The next event to report.
    fn poll_event(&mut self) -> Option<Self::Event>;
}
