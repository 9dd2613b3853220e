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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Every reason, in the order of [`index`](Self::index).
    pub const ALL: [Self; 4] = [
        Self::Stopped,
        Self::MailboxFull,
        Self::Undeliverable,
        Self::SendBufferFull,
    ];

    /// A short name for metric labels (`stopped`, `mailbox_full`,
    /// `undeliverable`, `send_buffer_full`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::MailboxFull => "mailbox_full",
            Self::Undeliverable => "undeliverable",
            Self::SendBufferFull => "send_buffer_full",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Stopped => 0,
            Self::MailboxFull => 1,
            Self::Undeliverable => 2,
            Self::SendBufferFull => 3,
        }
    }

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
    /// The same letters by [`DeadLetterReason::index`], for metrics.
    by_reason: [AtomicU64; 4],
    tx: broadcast::Sender<DeadLetter>,
    /// Refusals since the last `warn` line, and when that line was written.
    unlogged: AtomicU64,
    last_warn: Mutex<Option<Instant>>,
    /// A timer will write the refusals counted since the last line.
    flush_scheduled: AtomicBool,
}

impl DeadLetterOffice {
    pub(crate) fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            by_reason: Default::default(),
            tx: broadcast::Sender::new(SUBSCRIBER_BUFFER),
            unlogged: AtomicU64::new(0),
            last_warn: Mutex::new(None),
            flush_scheduled: AtomicBool::new(false),
        }
    }

    /// Records one dead letter: count, log, publish.
    pub fn record(
        self: &Arc<Self>,
        target: ActorId,
        message_type: &'static str,
        reason: DeadLetterReason,
    ) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.by_reason[reason.index()].fetch_add(1, Ordering::Relaxed);
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
    /// [`WARN_INTERVAL`] ago: then it is counted into the next line, which
    /// a timer writes at the end of the interval if no refusal comes to
    /// write it (a burst that ends is reported whole, not only its first
    /// letter).
    fn warn(
        self: &Arc<Self>,
        target: ActorId,
        message_type: &'static str,
        reason: DeadLetterReason,
    ) {
        self.unlogged.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let due = {
            // A poisoned lock only means a logging thread panicked: the
            // timestamp is still usable.
            let mut last = self.last_warn.lock().unwrap_or_else(|e| e.into_inner());
            match *last {
                Some(at) if now.duration_since(at) < WARN_INTERVAL => Some(at + WARN_INTERVAL),
                _ => {
                    *last = Some(now);
                    None
                }
            }
        };
        match due {
            None => self.write_warning(Some((target, message_type, reason))),
            Some(at) => self.flush_at(at),
        }
    }

    /// Writes the refusals not logged yet in one line (none: nothing).
    fn write_warning(&self, last: Option<(ActorId, &'static str, DeadLetterReason)>) {
        let since_last = self.unlogged.swap(0, Ordering::Relaxed);
        if since_last == 0 {
            return;
        }
        let total = self.count();
        match last {
            Some((target, message_type, reason)) => tracing::warn!(
                target: "plexus::dead_letters",
                %target,
                message_type,
                %reason,
                since_last,
                total,
                "dead letter: {reason} ({since_last} refused since the last such line)"
            ),
            None => tracing::warn!(
                target: "plexus::dead_letters",
                since_last,
                total,
                "dead letters: {since_last} more refused (see the line before for the reason)"
            ),
        }
    }

    /// Makes sure the refusals counted now are written by `at`: a timer on
    /// the current runtime, one at a time (without a runtime they wait for
    /// the next refusal after the interval).
    fn flush_at(self: &Arc<Self>, at: Instant) {
        if self.flush_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.flush_scheduled.store(false, Ordering::Release);
            return;
        };
        let office = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            if let Some(office) = office.upgrade() {
                office.flush_scheduled.store(false, Ordering::Release);
                *office.last_warn.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                office.write_warning(None);
            }
        });
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Letters so far for `reason`.
    pub(crate) fn count_for(&self, reason: DeadLetterReason) -> u64 {
        self.by_reason[reason.index()].load(Ordering::Relaxed)
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<DeadLetter> {
        self.tx.subscribe()
    }
}
