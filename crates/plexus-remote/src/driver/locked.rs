//! The driver's second form: a protocol that many tasks step in place,
//! behind a lock (quinn's shape: `quinn-proto`'s `Connection` inside
//! `quinn`'s `Mutex<State>`, stepped by whichever stream or task has an
//! input, its timers kept by a driver).
//!
//! [`run`](super::run) owns its protocol on one task and takes its inputs
//! from a channel: right for a role whose inputs may wait a moment (a
//! gossip round, a CRDT delta). A peer's session cannot: a `tell` that finds
//! its link closed must be held *before* the same thread's next `tell`
//! goes out, a receipt's waiter must be registered before its message
//! leaves, and a reader that hits a protocol error must stop reading that
//! very frame. So its callers step it themselves, in their own order:
//!
//! ```text
//!   caller A ─┐  step(carry, input):                        ┌─► Carry::transmit(to, bytes)
//!   caller B ─┤   lock, input(&mut p, now), Carry::stepped, ├─► Carry::event(e)
//!   timer ────┘   drain transmits and events, unlock ──────┴─► Carry::wake_at(deadline)
//! ```
//!
//! Guarantees:
//! * Inputs are handled one at a time, each to completion with everything
//!   it produced drained, in the order the callers took the lock.
//! * No [`Carry`] method but [`Carry::stepped`] runs under the lock: an
//!   event may step the protocol again (answer a request it raised), and a
//!   transmit may wait on a queue's own lock, without a deadlock and
//!   without holding other callers back.
//! * Timers: after every step the protocol's [`Protocol::poll_timeout`]
//!   is read; a deadline earlier than the one already armed (or the first)
//!   goes to [`Carry::wake_at`], whose owner calls [`Locked::timeout`] then.
//!   Every wake-up asked for must end in a call of [`Locked::timeout`]:
//!   it takes the wake-up, handles the timeout if still due (a step may
//!   have moved it) and arms the next one.
//! * Time is `tokio::time::Instant` (a paused clock drives it), handed to
//!   the protocol as a `std::time::Instant`, as in [`run`](super::run).

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;

use super::Protocol;

/// What a protocol's owner does with what a step of it produced. Every
/// method but [`stepped`](Carry::stepped) runs with the lock let go.
pub trait Carry<P: Protocol> {
    /// Sends `packet` to `to`.
    fn transmit(&self, to: P::Address, packet: Bytes);

    /// Carries out `event` (it may step the protocol again).
    fn event(&self, event: P::Event);

    /// Runs under the lock after every input, before anything is drained:
    /// to publish what other tasks read without the lock (a phase, a
    /// snapshot). Does nothing by default.
    fn stepped(&self, protocol: &mut P) {
        let _ = protocol;
    }

    /// The protocol wants [`Protocol::handle_timeout`] at `deadline`,
    /// earlier than any wake-up asked for before: call
    /// [`Locked::timeout`] then.
    fn wake_at(&self, deadline: Instant);
}

/// A protocol behind a lock, stepped by its callers. See the
/// [module docs](self).
pub struct Locked<P> {
    state: Mutex<State<P>>,
}

struct State<P> {
    protocol: P,
    /// The wake-up asked for last and not yet taken.
    armed: Option<Instant>,
}

impl<P: Default> Default for Locked<P> {
    fn default() -> Self {
        Self::new(P::default())
    }
}

impl<P> Locked<P> {
    /// `protocol`, not yet stepped.
    pub fn new(protocol: P) -> Self {
        Self {
            state: Mutex::new(State {
                protocol,
                armed: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<P>> {
        // Nothing of a caller's runs under the lock but its input and
        // `stepped`; a poisoned lock's protocol is as the panic left it,
        // which the protocol's own invariants must survive anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a step holds the lock now.
    #[cfg(test)]
    pub(super) fn is_locked(&self) -> bool {
        self.state.try_lock().is_err()
    }

    /// Reads the protocol under the lock (nothing is produced by a read).
    pub fn read<R>(&self, f: impl FnOnce(&P) -> R) -> R {
        f(&self.lock().protocol)
    }
}

impl<P: Protocol> Locked<P> {
    /// Hands `input` the protocol and the current time under the lock,
    /// then carries out what it produced with the lock let go; returns
    /// what `input` returned.
    pub fn step<R>(&self, carry: &impl Carry<P>, input: impl FnOnce(&mut P, Instant) -> R) -> R {
        let now = super::clock();
        let mut transmits = Vec::new();
        let mut events = Vec::new();
        let (r, wake) = {
            let mut st = self.lock();
            let r = input(&mut st.protocol, now);
            carry.stepped(&mut st.protocol);
            transmits.extend(std::iter::from_fn(|| st.protocol.poll_transmit()));
            events.extend(std::iter::from_fn(|| st.protocol.poll_event()));
            (r, st.arm())
        };
        for (to, packet) in transmits {
            carry.transmit(to, packet);
        }
        for event in events {
            carry.event(event);
        }
        if let Some(deadline) = wake {
            carry.wake_at(deadline);
        }
        r
    }

    /// A wake-up asked for by [`Carry::wake_at`] is due: handles the
    /// protocol's timeout if it still is (a step may have moved it).
    pub fn timeout(&self, carry: &impl Carry<P>) {
        // This wake-up is taken: the step below arms the next one.
        self.lock().armed = None;
        self.step(carry, |protocol, now| {
            if protocol.poll_timeout().is_some_and(|d| d <= now) {
                protocol.handle_timeout(now);
            }
        });
    }
}

impl<P: Protocol> State<P> {
    /// The wake-up to ask for after a step: the protocol's deadline if no
    /// wake-up at or before it is armed (an armed one re-arms when taken).
    fn arm(&mut self) -> Option<Instant> {
        let next = self.protocol.poll_timeout()?;
        match self.armed {
            Some(armed) if armed <= next => None,
            _ => {
                self.armed = Some(next);
                Some(next)
            }
        }
    }
}
