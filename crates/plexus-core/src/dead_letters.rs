//! Dead letters: messages that could not be delivered.
//!
//! A message told to an actor that has stopped, one still queued when its
//! actor stops, one told to a full bounded mailbox and one that did not fit
//! a remote link's send buffer is never dropped silently: it is counted,
//! logged under the target `plexus::dead_letters` (target actor, message
//! type, reason), and published to subscribers.
//!
//! Letters to a stopped actor are part of normal life (a reply that comes
//! after its asker stopped, messages queued at shutdown) and are logged at
//! `debug`. Every other reason means the system refused work (overload, a
//! message that cannot travel) and is logged at `warn`, at most one line per
//! [`WARN_INTERVAL`], each line giving how many such letters it stands for
//! (`since_last`), so an overloaded node neither floods its log nor hides
//! the loss.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    /// The send buffer of the link to the actor's node was full and the
    /// message was sent with [`ActorRef::tell`](crate::ActorRef::tell),
    /// which does not wait ([`ActorRef::send`](crate::ActorRef::send)
    /// waits for room instead).
    SendBufferFull,
}

impl DeadLetterReason {
    /// Whether a letter for this reason is logged at `warn` (the system
    /// refused work) rather than `debug` (the target had stopped).
    pub fn is_refusal(self) -> bool {
        !matches!(self, Self::Stopped)
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stopped => "the actor has stopped",
            Self::MailboxFull => "the actor's bounded mailbox is full",
            Self::Undeliverable => "the message could not be carried to its node",
            Self::SendBufferFull => "the send buffer of the link to its node is full",
        })
    }
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

/// At most one `warn` line about refused messages per this interval.
pub const WARN_INTERVAL: Duration = Duration::from_secs(1);

/// The dead-letter office of one actor system (see
/// [`SystemRef::dead_letters`](crate::SystemRef::dead_letters)).
pub struct DeadLetterOffice {
    count: AtomicU64,
    tx: broadcast::Sender<DeadLetter>,
    /// Refusals since the last `warn` line, and when that line was written.
    unlogged: AtomicU64,
    last_warn: Mutex<Option<Instant>>,
}

impl DeadLetterOffice {
    pub(crate) fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            tx: broadcast::Sender::new(SUBSCRIBER_BUFFER),
            unlogged: AtomicU64::new(0),
            last_warn: Mutex::new(None),
        }
    }

    /// Records one dead letter: count, log, publish.
    pub fn record(&self, target: ActorId, message_type: &'static str, reason: DeadLetterReason) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if reason.is_refusal() {
            self.warn(target, message_type, reason);
        } else {
            tracing::debug!(target: "plexus::dead_letters", %target, message_type, %reason, "dead letter");
        }
        if self.tx.receiver_count() > 0 {
            // No receiver left between the check and the send is harmless.
            let _ = self.tx.send(DeadLetter {
                target,
                message_type,
                reason,
            });
        }
    }

    /// Logs a refusal at `warn`, unless a line went out less than
    /// [`WARN_INTERVAL`] ago: then it is counted into the next line.
    fn warn(&self, target: ActorId, message_type: &'static str, reason: DeadLetterReason) {
        let since_last = self.unlogged.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        {
            // A poisoned lock only means a logging thread panicked: the
            // timestamp is still usable.
            let mut last = self.last_warn.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < WARN_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        let since_last = self
            .unlogged
            .swap(0, Ordering::Relaxed)
            .max(since_last.min(1));
        tracing::warn!(
            target: "plexus::dead_letters",
            %target,
            message_type,
            %reason,
            since_last,
            total = self.count(),
            "dead letter: {reason} ({since_last} refused since the last such line)"
        );
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<DeadLetter> {
        self.tx.subscribe()
    }
}
