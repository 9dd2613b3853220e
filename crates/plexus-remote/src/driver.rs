//! The tokio driver of a sans-IO [`Protocol`] on a node: one loop, the
//! same for every protocol (the cluster's membership, the replicator, the
//! device tracker, the device sessions, a user's own).
//!
//! ```text
//!   Input::Packet(from, bytes) ─┐                      ┌─► Host::transmit(to, bytes)
//!   Input::Command(c)  ─────────┤  run: batch, flush,  ├─► Host::event(e)
//!   (one channel, any senders)  │  sleep until the     └─► Host::flushed
//!   deadline ─► sleep ──────────┘  protocol's deadline       Host::is_done ─► return
//! ```
//!
//! [`run`] owns the loop, for a role whose inputs can wait their turn on a
//! channel; [`Locked`] is the same protocol shape stepped in place by many
//! tasks behind a lock, for one whose callers need their input handled
//! before they go on (a peer's session). A [`Host`] supplies what differs between roles:
//! where packets go (usually a ref forged to the addressee's published
//! actor, [`ForgedRefs`](crate::ForgedRefs)), what events mean, and what its
//! commands do. Everything that should wake the protocol comes in on one
//! channel of [`Input`]s: packets from the actor that receives them over
//! the node, commands from the role's handle, and whatever else the role
//! listens to (a cluster update, a store write's completion, a discovery's
//! answer), sent by the small task or thread that waits for it. A
//! transport that names a packet's sender sends [`Input::Packet`]; one that
//! does not (a node's actor is not told who sent a message, and Plexus's
//! own packets name their sender inside) hands the bytes over as a command
//! of the host's, which gives them to the state machine.
//!
//! Guarantees:
//! * Inputs are handled in the order they were sent. Up to [`BATCH`] that
//!   wait are handled before a flush, all at one `now`, so a busy endpoint
//!   sends what a batch produced in one go and a flood costs one wakeup per
//!   batch, not per packet; a deadline that passed during the batch is
//!   handled right after it, so a flood does not hold back the timers.
//! * After every batch or timeout, transmits and events are drained until
//!   both are empty (handling an event may queue packets), then
//!   [`Host::flushed`] runs and [`Host::is_done`] is asked.
//! * Time is `tokio::time::Instant` (a paused test clock drives it),
//!   handed to the protocol as a `std::time::Instant`.
//! * [`run`] returns the protocol and the host when the host is done or
//!   every sender of the channel is gone; dropping (aborting) it stops
//!   the protocol where it is.
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use plexus_remote::driver::{self, Host, Input, Protocol};
//! use tokio::sync::mpsc;
//!
//! /// Counts the packets it hears and reports each count.
//! #[derive(Default)]
//! struct Counter { heard: u64, events: Vec<u64> }
//!
//! impl Protocol for Counter {
//!     type Address = String;
//!     type Event = u64;
//!     fn handle_packet(&mut self, _now: Instant, _from: String, _packet: Bytes) {
//!         self.heard += 1;
//!         self.events.push(self.heard);
//!     }
//!     fn handle_timeout(&mut self, _now: Instant) {}
//!     fn poll_transmit(&mut self) -> Option<(String, Bytes)> { None }
//!     fn poll_timeout(&self) -> Option<Instant> { None }
//!     fn poll_event(&mut self) -> Option<u64> { self.events.pop() }
//! }
//!
//! /// Tells a listener each count (a real host would also send the
//! /// protocol's packets through refs forged to its peers).
//! struct Tell(mpsc::UnboundedSender<u64>);
//!
//! impl Host<Counter> for Tell {
//!     type Command = ();
//!     fn command(&mut self, _: &mut Counter, _now: Instant, _: ()) {}
//!     fn transmit(&mut self, _: &mut Counter, _now: Instant, _to: String, _: Bytes) {}
//!     fn event(&mut self, _: &mut Counter, _now: Instant, count: u64) {
//!         let _ = self.0.send(count);
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (inputs, received) = mpsc::unbounded_channel();
//! let (tell, mut counts) = mpsc::unbounded_channel();
//! tokio::spawn(driver::run(Counter::default(), Tell(tell), received));
//! let hello = Bytes::from_static(b"hello");
//! inputs.send(Input::Packet("tcp://10.0.0.7:4000".into(), hello)).unwrap();
//! assert_eq!(counts.recv().await, Some(1));
//! # }
//! ```

use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;

pub use plexus_net::protocol::Protocol;

mod locked;
pub use locked::{Carry, Locked};

/// Inputs handled before the driver flushes (bounds how long a batch
/// holds back what its first input produced).
pub const BATCH: usize = 256;

/// What wakes a driven protocol.
#[derive(Debug)]
pub enum Input<A, C> {
    /// A packet and its sender, for [`Protocol::handle_packet`].
    Packet(A, Bytes),
    /// One of the host's commands, for [`Host::command`].
    Command(C),
}

/// The sender of a driver's inputs (clone it for every source).
pub type Inputs<A, C> = mpsc::UnboundedSender<Input<A, C>>;

/// What a role supplies to the driver: where the protocol's packets go,
/// what its events and the role's commands do. Every method gets the
/// protocol (to act on it) and the `now` of the batch being handled.
pub trait Host<P: Protocol> {
    /// The role's own inputs: requests from its handle, and whatever else
    /// it listens to.
    type Command;

    /// Carries out `command`.
    fn command(&mut self, protocol: &mut P, now: Instant, command: Self::Command);

    /// Sends `packet` to `to` (a failure to reach `to` may go back into the
    /// protocol, whose packets then go out in the same flush).
    fn transmit(&mut self, protocol: &mut P, now: Instant, to: P::Address, packet: Bytes);

    /// Carries out `event` (packets it makes the protocol queue go out in
    /// the same flush).
    fn event(&mut self, protocol: &mut P, now: Instant, event: P::Event);

    /// Runs after every flush, with the protocol's output drained (to
    /// publish a snapshot, counters, a batch of events). Packets it makes
    /// the protocol queue wait for the next flush. Does nothing by default.
    fn flushed(&mut self, protocol: &mut P, now: Instant) {
        let _ = (protocol, now);
    }

    /// Whether the driver should return (asked after every flush). Never,
    /// by default.
    fn is_done(&self, protocol: &P) -> bool {
        let _ = protocol;
        false
    }
}

/// Runs `protocol` with `host` on the `inputs` until the host is done or
/// every sender of `inputs` is gone; returns both, for the host's clean-up.
/// See the [module docs](self).
///
/// # Cancel safety
///
/// Dropping the future (aborting its task) stops the protocol between two
/// steps; inputs left in the channel are dropped with it.
pub async fn run<P, H>(
    mut protocol: P,
    mut host: H,
    mut inputs: mpsc::UnboundedReceiver<Input<P::Address, H::Command>>,
) -> (P, H)
where
    P: Protocol,
    H: Host<P>,
{
    let mut now = clock();
    loop {
        flush(&mut protocol, &mut host, now);
        if host.is_done(&protocol) {
            break;
        }
        let deadline = protocol.poll_timeout();
        tokio::select! {
            // Inputs first: a busy endpoint's timers are handled after each
            // batch below, so they do not wait for the flood to end.
            biased;
            input = inputs.recv() => {
                let Some(input) = input else { break };
                now = clock();
                handle(&mut protocol, &mut host, now, input);
                for _ in 1..BATCH {
                    match inputs.try_recv() {
                        Ok(input) => handle(&mut protocol, &mut host, now, input),
                        Err(_) => break,
                    }
                }
                if protocol.poll_timeout().is_some_and(|d| d <= now) {
                    protocol.handle_timeout(now);
                }
            }
            () = sleep_until(deadline) => {
                now = clock();
                protocol.handle_timeout(now);
            }
        }
    }
    (protocol, host)
}

fn clock() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

fn handle<P: Protocol, H: Host<P>>(
    protocol: &mut P,
    host: &mut H,
    now: Instant,
    input: Input<P::Address, H::Command>,
) {
    match input {
        Input::Packet(from, packet) => protocol.handle_packet(now, from, packet),
        Input::Command(command) => host.command(protocol, now, command),
    }
}

/// Drains the protocol's packets and events into the host.
fn flush<P: Protocol, H: Host<P>>(protocol: &mut P, host: &mut H, now: Instant) {
    loop {
        while let Some((to, packet)) = protocol.poll_transmit() {
            host.transmit(protocol, now, to, packet);
        }
        match protocol.poll_event() {
            Some(event) => host.event(protocol, now, event),
            None => break,
        }
    }
    host.flushed(protocol, now);
}

#[cfg(test)]
mod tests;
