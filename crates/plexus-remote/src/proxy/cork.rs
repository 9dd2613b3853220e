//! Messages an actor sends to a remote actor during its turn
//! ([`plexus_core::turn`]), held on the sending thread and handed to the
//! link together: per run, not per message, the send loads the peer's
//! links, counts the lane, takes the send buffer's permits and the out
//! queue's lock. On this VM each of those is an atomic read-modify-write
//! of 20-50 cycles: five of them made up a third of a W2 source's time.
//!
//! Guarantees:
//! * Held messages go out when the turn ends (the actor's poll returns,
//!   at an `await` or at its end), when [`HOLD_MAX`] messages or
//!   [`HOLD_BYTES`] bytes are held, before a message to another ref, lane
//!   or strand is held, and before anything else this thread sends to a
//!   peer ([`flush`] at the top of [`Peer`]'s sends): a sender's messages
//!   keep their order on every path, and none waits past its turn.
//! * Outside a turn (a task, the main thread) nothing is held, and a
//!   turn's first message to a ref goes at once: a turn that sends one
//!   message (a pong's reply) pays nothing for the holding of others.
//! * A held message meets the link as a message sent alone would: the run
//!   is queued whole if the send buffer has room for all of it, otherwise
//!   its messages are sent one by one, each queued, held for a reconnect
//!   or dead-lettered as it would have been (a full buffer dead-letters
//!   the messages that do not fit, now as before).

use std::cell::RefCell;
use std::sync::Arc;

use plexus_core::turn;
use plexus_transport::Strand;

use super::RemoteActor;
use crate::peer::Carrier;

/// The most messages held in one run (as many as a link's stack takes in
/// one run).
pub(super) const HOLD_MAX: usize = 64;
/// The most bytes held in one run.
pub(super) const HOLD_BYTES: usize = 16 << 10;

thread_local! {
    static CORK: RefCell<Cork> = RefCell::new(Cork::default());
}

/// This thread's held run, and its buffers between runs.
#[derive(Default)]
struct Cork {
    to: Option<Route>,
    run: Run,
    /// The turn and route of the last message sent at once: a turn's first
    /// message to a route goes at once (a turn that sends one, as a pong's
    /// reply, pays nothing for holding), its next ones are held. The
    /// address only identifies; a stale one at most holds a message that
    /// could have gone at once.
    first: Option<(u64, usize, Carrier, Strand)>,
}

/// Where a held run goes.
struct Route {
    actor: Arc<RemoteActor>,
    carrier: Carrier,
    strand: Strand,
}

/// Frames end to end, with each one's end and message type.
#[derive(Default)]
struct Run {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    names: Vec<&'static str>,
}

impl Run {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.names.clear();
    }
}

/// Holds `frame` (a message of type `type_name` from `actor`, for
/// `carrier` and `strand`) until the turn ends or the run is full. Returns
/// `false`, holding nothing, outside a turn and for the turn's first
/// message to this route: the caller sends it now.
pub(super) fn hold(
    actor: &RemoteActor,
    carrier: Carrier,
    strand: Strand,
    frame: &[u8],
    type_name: &'static str,
) -> bool {
    if !turn::in_turn() {
        return false;
    }
    let same = |to: &Route| {
        std::ptr::eq(Arc::as_ptr(&to.actor), actor) && to.carrier == carrier && to.strand == strand
    };
    let turn = turn::number();
    let first = (turn, actor as *const RemoteActor as usize, carrier, strand);
    let (other, at_once) = CORK.with(|c| {
        let mut c = c.borrow_mut();
        match &c.to {
            Some(to) => (!same(to), false),
            None if c.first != Some(first) => {
                c.first = Some(first);
                (false, true)
            }
            None => (false, false),
        }
    });
    if at_once {
        return false;
    }
    if other {
        flush();
    }
    let full = CORK.with(|c| {
        let mut c = c.borrow_mut();
        if c.to.is_none() {
            // Gone (its last ref dropped during the call): sent at once.
            let actor = actor.arc()?;
            c.to = Some(Route {
                actor,
                carrier,
                strand,
            });
            turn::set_turn_end(flush);
            turn::held();
        }
        let run = &mut c.run;
        run.bytes.extend_from_slice(frame);
        run.ends.push(run.bytes.len() as u32);
        run.names.push(type_name);
        Some(run.ends.len() >= HOLD_MAX || run.bytes.len() >= HOLD_BYTES)
    });
    match full {
        None => false,
        Some(full) => {
            if full {
                flush();
            }
            true
        }
    }
}

/// Sends what this thread holds, if anything.
pub(crate) fn flush() {
    let Some((to, mut run)) = CORK.with(|c| {
        let mut c = c.borrow_mut();
        let to = c.to.take()?;
        Some((to, std::mem::take(&mut c.run)))
    }) else {
        return;
    };
    send(&to, &run);
    run.clear();
    // The buffers back for the next run, unless one started meanwhile.
    CORK.with(|c| {
        let mut c = c.borrow_mut();
        if c.to.is_none() && c.run.bytes.capacity() < run.bytes.capacity() {
            c.run = run;
        }
    });
}

/// Hands a run to the link: whole if it has room, else one by one.
fn send(to: &Route, run: &Run) {
    let sent = to
        .actor
        .peer
        .send_run(to.carrier, to.strand, &run.bytes, &run.ends);
    let mut start = run.ends[..sent].last().map_or(0, |&e| e as usize);
    for (&end, &name) in run.ends[sent..].iter().zip(&run.names[sent..]) {
        let frame = &run.bytes[start..end as usize];
        if let Err(why) = to.actor.peer.send_slice(to.carrier, to.strand, frame) {
            to.actor.refused(name, why);
        }
        start = end as usize;
    }
}
