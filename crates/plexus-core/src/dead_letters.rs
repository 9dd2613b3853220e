//! Dead letters: messages that could not be delivered.
//!
//! A message told to an actor that has stopped, one still queued when its
//! actor stops, and one told to a full bounded mailbox is never dropped
//! silently: it is counted, logged at `debug` level under the target
//! `plexus::dead_letters` (target actor and message type), and published to
//! subscribers.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::broadcast;

use crate::ActorId;

/// Why a message became a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// The target had stopped (or stopped with the message still queued).
    Stopped,
    /// The target's bounded mailbox was full and the message was sent with
    /// [`ActorRef::tell`](crate::ActorRef::tell), which does not wait.
    MailboxFull,
    /// The message could not be encoded for, or carried to, another node.
    Undeliverable,
}

/// One undeliverable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The actor it was meant for.
    pub target: ActorId,
    /// The Rust type name of the message.
    pub message_type: &'static str,
    /// Why it was not delivered.
    pub reason: DeadLetterReason,
}

/// Subscribers lagging more than this many dead letters behind lose the
/// oldest ones (and learn so from `broadcast::error::RecvError::Lagged`).
const SUBSCRIBER_BUFFER: usize = 1024;

/// The dead-letter office of one actor system (see
/// [`SystemRef::dead_letters`](crate::SystemRef::dead_letters)).
pub struct DeadLetterOffice {
    count: AtomicU64,
    tx: broadcast::Sender<DeadLetter>,
}

impl DeadLetterOffice {
    pub(crate) fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            tx: broadcast::Sender::new(SUBSCRIBER_BUFFER),
        }
    }

    /// Records one dead letter: count, log, publish.
    pub fn record(&self, target: ActorId, message_type: &'static str, reason: DeadLetterReason) {
        self.count.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "plexus::dead_letters", %target, message_type, ?reason, "dead letter");
        if self.tx.receiver_count() > 0 {
            // No receiver left between the check and the send is harmless.
            let _ = self.tx.send(DeadLetter {
                target,
                message_type,
                reason,
            });
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<DeadLetter> {
        self.tx.subscribe()
    }
}
