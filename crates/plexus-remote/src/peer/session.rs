//! A peer's session, sans I/O (issue 32 moves the whole peer protocol
//! here, step by step: `crates/plexus-remote/SESSION.md`): its phase (idle,
//! connecting, up, down), what waits on it (frames held while connecting,
//! waiters, resolves, receipts, watchers, links, remote monitors), the
//! reconnect backoff, the control protocol ([`control`]), and the rules
//! between them, with time as an input.
//!
//! It is a [`Protocol`](plexus_net::protocol::Protocol) (`session/protocol.rs`):
//! [`Peer`](super::Peer), the I/O shell, steps it under the one driver's
//! locked form ([`Locked`](crate::driver::Locked): each caller's input
//! handled at once, in its own order) and carries out what a step produced
//! (`peer/carry.rs`: replies sent, events carried out, the superseded
//! wait's timer) after the lock is let go. The transitions decide
//! everything and do no I/O, so `session/tests.rs` and
//! `session/control/tests.rs` drive them on a fake clock:
//!
//! ```text
//!  Idle ──begin_connect──▶ Connecting ──attach──▶ Up(epoch) ──link_lost──▶ Down
//!   ▲ ▲                        │   ▲                 │                      │
//!   │ └──────────────────────────────────link_idle───┘                      │
//!   │                          │   └───superseded────┘ (peer kept its other │
//!   │                  connect_failed / handle_timeout  link: wait for it)  │
//!   │                          ▼                                            │
//!   └──(forwarded)──────────  Down ◀─────────────────────────────────────────┘
//!                              └──begin_connect (after retry_at)──▶ Connecting
//! ```
//!
//! Every link that comes up gets a new epoch; a transition naming an older
//! epoch (a reader of a replaced link ending late) changes nothing. Of two
//! links to one node (both sides dialled at once) both sides keep the one
//! dialled by the lower node id.
//!
//! The control protocol's bookkeeping goes through it too: requests this
//! node made (`expect_*`) and the frames that answer them (`RESOLVED`,
//! `RECEIPT`, `DOWN`), each answered once and ignored (counted) once a
//! lost link has failed it; watches, refused while down or when another
//! node answers; the peer's monitors of local actors and actor links, ended
//! by their frames or with the link.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use plexus_core::{ActorId, NodeId};
use rustc_hash::FxHashMap;

use crate::close::CloseCause;
use crate::error::LinkError;

mod control;
pub(crate) mod incoming;
mod protocol;
use control::ControlQueues;
pub(crate) use control::SessionEvent;
pub(crate) use protocol::Route;

/// What a peer's state holds without looking into: the link's sender, the
/// channels that answer requests, watchers, local actors. The node uses
/// the real ones ([`super::Live`]); tests use plain values.
pub(crate) trait Handles {
    /// Sends on an established link.
    type Sender;
    /// A frame held until a link is up.
    type Held;
    /// Waits for the link to come up.
    type Waiter;
    /// Waits for a resolve's answer.
    type Resolve;
    /// Waits for a message's receipt.
    type Receipt;
    /// A local watcher of a remote actor.
    type Watcher;
    /// A local actor (linked to a remote one, or watched by one).
    type Local;
}

/// Where the peer's link is.
pub(crate) enum Phase<S> {
    /// Never connected, or handed over to another peer for the same node.
    Idle,
    /// Connecting. With `stuck_at`: the peer closed our link as the
    /// duplicate of one it dialled, which should come up here by then.
    Connecting { stuck_at: Option<Instant> },
    /// A link is up.
    Up {
        sender: S,
        epoch: u64,
        /// Who dialled it: of two links to one node, the one dialled by
        /// the lower node id stays.
        dialed_by: NodeId,
    },
    /// The last attempt failed or the link went down; the next attempt
    /// waits until `retry_at`.
    Down,
}

/// The reconnect backoff: doubles from `min` to `max` with each failure in
/// a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) min: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    fn after(self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(16);
        self.min.saturating_mul(1 << exp).min(self.max)
    }
}

/// One peer's state.
pub(crate) struct Session<H: Handles> {
    /// This node.
    here: NodeId,
    backoff: Backoff,
    pub(crate) phase: Phase<H::Sender>,
    /// The phase changed since [`take_moved`](Self::take_moved) last said.
    moved: bool,
    /// The node behind the peer, once a handshake told.
    pub(crate) remote: Option<NodeId>,
    /// Frames held while no link is up.
    pub(crate) pending: VecDeque<H::Held>,
    pub(crate) waiters: Vec<H::Waiter>,
    pub(crate) resolves: FxHashMap<u64, H::Resolve>,
    pub(crate) receipts: FxHashMap<u64, H::Receipt>,
    /// Local watchers of remote actors, by token.
    pub(crate) watchers: FxHashMap<u64, (ActorId, H::Watcher)>,
    /// Remote watchers of local actors: token -> (actor, local watch token).
    pub(crate) remote_monitors: FxHashMap<u64, (H::Local, Option<u64>)>,
    /// Local actors linked to remote ones: (local id, local, remote id).
    links: Vec<(ActorId, H::Local, ActorId)>,
    /// Connect attempts failed in a row.
    failures: u32,
    pub(crate) last_error: Option<LinkError>,
    /// Not before this may the next attempt start.
    pub(crate) retry_at: Option<Instant>,
    /// The epoch of the last link attached (up or draining).
    epoch: u64,
    /// The control protocol's events and frames to send.
    control: ControlQueues<H>,
}

impl<H: Handles> Session<H> {
    /// The session of node `here` with a peer, idle; failed connects wait
    /// `backoff`.
    pub(crate) fn new(here: NodeId, backoff: Backoff) -> Self {
        Self {
            here,
            backoff,
            phase: Phase::Idle,
            moved: false,
            remote: None,
            pending: VecDeque::new(),
            waiters: Vec::new(),
            resolves: FxHashMap::default(),
            receipts: FxHashMap::default(),
            watchers: FxHashMap::default(),
            remote_monitors: FxHashMap::default(),
            links: Vec::new(),
            failures: 0,
            last_error: None,
            retry_at: None,
            epoch: 0,
            control: ControlQueues::default(),
        }
    }
}

/// What a failed connect gives up on: to be failed with its error.
pub(crate) struct Abandoned<H: Handles> {
    pub(crate) error: LinkError,
    pub(crate) pending: VecDeque<H::Held>,
    pub(crate) waiters: Vec<H::Waiter>,
    pub(crate) resolves: FxHashMap<u64, H::Resolve>,
    pub(crate) receipts: FxHashMap<u64, H::Receipt>,
}

/// What a lost link leaves behind: to be told, with its cause.
pub(crate) struct Lost<H: Handles> {
    pub(crate) node: Option<NodeId>,
    pub(crate) watchers: FxHashMap<u64, (ActorId, H::Watcher)>,
    pub(crate) links: Vec<(H::Local, ActorId)>,
    pub(crate) receipts: FxHashMap<u64, H::Receipt>,
    pub(crate) resolves: FxHashMap<u64, H::Resolve>,
    pub(crate) remote_monitors: FxHashMap<u64, (H::Local, Option<u64>)>,
}

/// What attaching a new link decided.
pub(crate) enum Attached<H: Handles> {
    /// The new link is the peer's link now, under `epoch`. Send `pending`
    /// on it before anything else (under the lock), answer `waiters`, and
    /// retire `replaced` with `GOODBYE(duplicate)` if there is one.
    Up {
        epoch: u64,
        pending: VecDeque<H::Held>,
        waiters: Vec<H::Waiter>,
        replaced: Option<H::Sender>,
        /// Another node than before answers at the peer's address.
        node_changed: bool,
    },
    /// The link already up was dialled by a lower node id and stays: send
    /// `GOODBYE(duplicate)` on the new one (`refused`) and read it (under
    /// `draining_epoch`) until the peer closes it. `pending` goes out on
    /// the kept link; `waiters` are answered.
    Duplicate {
        refused: H::Sender,
        draining_epoch: u64,
        pending: VecDeque<H::Held>,
        waiters: Vec<H::Waiter>,
    },
}

impl<H: Handles> Session<H> {
    /// Whether the phase is [`Phase::Down`].
    pub(crate) fn is_down(&self) -> bool {
        matches!(self.phase, Phase::Down)
    }

    /// Whether a link is up.
    pub(crate) fn is_up(&self) -> bool {
        matches!(self.phase, Phase::Up { .. })
    }

    /// The sender of the link that is up.
    pub(crate) fn sender(&self) -> Option<&H::Sender> {
        match &self.phase {
            Phase::Up { sender, .. } => Some(sender),
            _ => None,
        }
    }

    /// Starts connecting if idle or down and there is an address to dial:
    /// `Some(not_before)` (the backoff's `retry_at`) when a connect is to
    /// start, `None` when one is under way, a link is up, or nothing can
    /// be dialled.
    pub(crate) fn begin_connect(&mut self, can_dial: bool) -> Option<Option<Instant>> {
        if !matches!(self.phase, Phase::Idle | Phase::Down) || !can_dial {
            return None;
        }
        self.set_phase(Phase::Connecting { stuck_at: None });
        Some(self.retry_at)
    }

    /// The connect attempt failed at `now`: down, the next attempt after
    /// the backoff; everything that waited for the link gives up with
    /// `error`.
    pub(crate) fn connect_failed(&mut self, now: Instant, error: LinkError) -> Abandoned<H> {
        self.set_phase(Phase::Down);
        self.failures += 1;
        self.retry_at = Some(now + self.backoff.after(self.failures));
        self.last_error = Some(error.clone());
        Abandoned {
            error,
            pending: std::mem::take(&mut self.pending),
            waiters: std::mem::take(&mut self.waiters),
            resolves: std::mem::take(&mut self.resolves),
            receipts: std::mem::take(&mut self.receipts),
        }
    }

    /// A handshake completed on a new link (`sender`) to `node`, dialled by
    /// `dialed_by`.
    pub(crate) fn attach(
        &mut self,
        sender: H::Sender,
        node: NodeId,
        dialed_by: NodeId,
    ) -> Attached<H> {
        if let Phase::Up {
            dialed_by: existing,
            ..
        } = &self.phase
        {
            if *existing < dialed_by {
                self.epoch += 1;
                return Attached::Duplicate {
                    refused: sender,
                    draining_epoch: self.epoch,
                    pending: std::mem::take(&mut self.pending),
                    waiters: std::mem::take(&mut self.waiters),
                };
            }
        }
        let node_changed = self.remote.is_some_and(|r| r != node);
        self.epoch += 1;
        self.moved = true;
        let old = std::mem::replace(
            &mut self.phase,
            Phase::Up {
                sender,
                epoch: self.epoch,
                dialed_by,
            },
        );
        self.remote = Some(node);
        self.failures = 0;
        self.retry_at = None;
        self.last_error = None;
        let replaced = match old {
            Phase::Up { sender, .. } => Some(sender),
            _ => None,
        };
        Attached::Up {
            epoch: self.epoch,
            pending: std::mem::take(&mut self.pending),
            waiters: std::mem::take(&mut self.waiters),
            replaced,
            node_changed,
        }
    }

    /// The link of `epoch` went down with `cause`: down (the next attempt
    /// without waiting), and what depended on the link is handed back to
    /// be told. `None` if `epoch` is not the link that is up (a replaced
    /// or draining link ended).
    pub(crate) fn link_lost(&mut self, epoch: u64, cause: &CloseCause) -> Option<Lost<H>> {
        self.link_ended(epoch, cause, Phase::Down)
    }

    /// The link of `epoch` was closed because no traffic crossed it for a
    /// while (a UDP peer's idle timeout): idle, not down. The node is not
    /// known to be gone, so refs through the peer stay alive and the next
    /// send dials again; what depended on the link itself (watchers,
    /// links, requests in flight) is handed back as for a lost link, since
    /// the peer dropped its side of it too.
    pub(crate) fn link_idle(&mut self, epoch: u64, cause: &CloseCause) -> Option<Lost<H>> {
        self.link_ended(epoch, cause, Phase::Idle)
    }

    fn link_ended(
        &mut self,
        epoch: u64,
        cause: &CloseCause,
        next: Phase<H::Sender>,
    ) -> Option<Lost<H>> {
        match &self.phase {
            Phase::Up { epoch: e, .. } if *e == epoch => {}
            _ => return None,
        }
        self.set_phase(next);
        self.failures = 0;
        self.retry_at = None;
        self.last_error = Some(LinkError::Closed(cause.clone()));
        Some(Lost {
            node: self.remote,
            watchers: std::mem::take(&mut self.watchers),
            links: std::mem::take(&mut self.links)
                .into_iter()
                .map(|(_, local, remote)| (local, remote))
                .collect(),
            receipts: std::mem::take(&mut self.receipts),
            resolves: std::mem::take(&mut self.resolves),
            remote_monitors: std::mem::take(&mut self.remote_monitors),
        })
    }

    /// The peer closed our link of `epoch` as the duplicate of one it
    /// dialled, which is about to come up here: connecting again (frames
    /// are held, requests kept, as the peer answers them on the other
    /// link) until `now + timeout`, when [`handle_timeout`](Self::handle_timeout)
    /// gives up. Whether `epoch` was the link that is up.
    pub(crate) fn superseded(&mut self, epoch: u64, now: Instant, timeout: Duration) -> bool {
        match &self.phase {
            Phase::Up { epoch: e, .. } if *e == epoch => {}
            _ => return false,
        }
        self.set_phase(Phase::Connecting {
            stuck_at: Some(now + timeout),
        });
        true
    }

    fn set_phase(&mut self, phase: Phase<H::Sender>) {
        self.phase = phase;
        self.moved = true;
    }

    /// Whether the phase changed since this was last asked (the shell
    /// mirrors it for the lock-free send path then).
    pub(crate) fn take_moved(&mut self) -> bool {
        std::mem::take(&mut self.moved)
    }

    /// Waits for the `RESOLVED` answering `request`.
    pub(crate) fn expect_resolved(&mut self, request: u64, reply: H::Resolve) {
        self.resolves.insert(request, reply);
    }

    /// A `RESOLVED` arrived: who waits for it. Nobody if the link that
    /// carried the request was lost meanwhile (that failed it already).
    pub(crate) fn handle_resolved(&mut self, request: u64) -> Option<H::Resolve> {
        self.resolves.remove(&request)
    }

    /// Waits for the `RECEIPT` of message `id`.
    pub(crate) fn expect_receipt(&mut self, id: u64, reply: H::Receipt) {
        self.receipts.insert(id, reply);
    }

    /// A `RECEIPT` arrived (or the message could not be sent): who waits
    /// for it, if anyone still does.
    pub(crate) fn handle_receipt(&mut self, id: u64) -> Option<H::Receipt> {
        self.receipts.remove(&id)
    }

    /// A local watcher of `target`, an actor behind this peer, under
    /// `token` (a `MONITOR` goes out). Refused, the watcher handed back to
    /// be told `NodeDown` at once, when the link is down or another node
    /// than `target`'s answers here.
    pub(crate) fn watch(
        &mut self,
        token: u64,
        target: ActorId,
        watcher: H::Watcher,
    ) -> Result<(), H::Watcher> {
        if self.is_down() || self.remote.is_some_and(|r| r != target.node()) {
            return Err(watcher);
        }
        self.watchers.insert(token, (target, watcher));
        Ok(())
    }

    /// Forgets the watcher under `token`; whether there was one (then a
    /// `DEMONITOR` goes out).
    pub(crate) fn unwatch(&mut self, token: u64) -> bool {
        self.watchers.remove(&token).is_some()
    }

    /// A `DOWN` arrived for `token`: the watcher to tell, once.
    pub(crate) fn handle_down(&mut self, token: u64) -> Option<(ActorId, H::Watcher)> {
        self.watchers.remove(&token)
    }

    /// The peer monitors `local` under `token` (`watch` is the local
    /// watch to remove when the peer stops watching or the link is lost).
    pub(crate) fn monitored(&mut self, token: u64, local: H::Local, watch: Option<u64>) {
        self.remote_monitors.insert(token, (local, watch));
    }

    /// The peer's monitor under `token` ends (`DEMONITOR`, or the watched
    /// actor's `Down` is on its way): the local watch to remove.
    pub(crate) fn handle_demonitor(&mut self, token: u64) -> Option<(H::Local, Option<u64>)> {
        self.remote_monitors.remove(&token)
    }

    /// `local` (id `local_id`) is linked to `remote` behind this peer: it
    /// gets `Exit` if the link is lost.
    pub(crate) fn linked(&mut self, local_id: ActorId, local: H::Local, remote: ActorId) {
        self.links.push((local_id, local, remote));
    }

    /// `local` and `remote` are no longer linked (`UNLINK`, `EXIT`, or
    /// the local side unlinked).
    pub(crate) fn unlinked(&mut self, local: ActorId, remote: ActorId) {
        self.links
            .retain(|(l, _, r)| !(*l == local && *r == remote));
    }

    /// Hands everything that waits to another peer for the same node
    /// (this one forwards to it from now on) and goes idle.
    pub(crate) fn forward_into(&mut self, canonical: &mut Session<H>) {
        self.set_phase(Phase::Idle);
        canonical.pending.extend(self.pending.drain(..));
        canonical.waiters.append(&mut self.waiters);
        canonical.resolves.extend(self.resolves.drain());
        canonical.receipts.extend(self.receipts.drain());
    }
}

#[cfg(test)]
mod tests;
