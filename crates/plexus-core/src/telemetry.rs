//! Metrics of the actor runtime, recorded through the `metrics` facade (no
//! exporter here: the application installs a recorder, or none).
//!
//! Two kinds, by cost:
//! - Levels and counts the system keeps anyway (actors alive, dead letters
//!   by reason, mailbox depths) are published on demand by
//!   [`SystemRef::record_metrics`], which an exporter calls right before it
//!   renders: a scrape is current and a message costs nothing for them.
//! - Message handling time has no counter to read, so it is measured where
//!   it happens, on one message in [`HANDLE_TIME_SAMPLE`] of each actor
//!   (the first timed is the `HANDLE_TIME_SAMPLE`-th; an actor that
//!   handles fewer is never timed): two clock reads and a histogram record
//!   amortised over that many messages keep it cheap enough to leave on.
//!   The histogram handle is looked up once per actor (on its first timed
//!   message) and cached in the actor's cell, so an actor started before a
//!   recorder was installed goes on recording nowhere. The time is the
//!   handler's wall time, awaits included.
//!
//! The names, types and labels are listed in `docs/METRICS.md`.

use std::time::Instant;

use metrics::{describe_counter, describe_gauge, describe_histogram, Histogram, Unit};

use crate::run::CellExtra;
use crate::{DeadLetterReason, SystemRef};

/// Time one message in this many per actor: the runtime's scheduling
/// budget (an actor yields after this many messages in a row), whose
/// counter picks the message.
pub const HANDLE_TIME_SAMPLE: u32 = crate::run::MESSAGES_PER_YIELD;

/// How many of the deepest mailboxes [`SystemRef::record_metrics`] reports
/// (`plexus_actor_mailbox_depth{rank="1"}` ... `{rank="5"}`).
pub const DEEPEST_MAILBOXES: usize = 5;

/// `plexus_actors_alive`: actors that have not finished stopping.
pub const ACTORS_ALIVE: &str = "plexus_actors_alive";
/// `plexus_actor_mailbox_depth{rank}`: messages waiting in the `rank`-th
/// deepest mailbox.
pub const MAILBOX_DEPTH: &str = "plexus_actor_mailbox_depth";
/// `plexus_actor_mailbox_messages`: messages waiting in all mailboxes.
pub const MAILBOX_MESSAGES: &str = "plexus_actor_mailbox_messages";
/// `plexus_actor_dead_letters_total{reason}`.
pub const DEAD_LETTERS: &str = "plexus_actor_dead_letters_total";
/// `plexus_actor_registered_names`.
pub const REGISTERED_NAMES: &str = "plexus_actor_registered_names";
/// `plexus_actor_handle_seconds{actor}`: sampled handling time.
pub const HANDLE_SECONDS: &str = "plexus_actor_handle_seconds";

const RANKS: [&str; DEEPEST_MAILBOXES] = ["1", "2", "3", "4", "5"];

/// Registers the HELP text of this crate's metrics with the current
/// recorder. [`SystemRef::record_metrics`] calls it, so an exporter that
/// renders after it has them.
pub fn describe_metrics() {
    describe_gauge!(
        ACTORS_ALIVE,
        Unit::Count,
        "Actors that have not finished stopping."
    );
    describe_gauge!(
        MAILBOX_DEPTH,
        Unit::Count,
        "Messages waiting in the rank-th deepest mailbox (rank 1 is the deepest)."
    );
    describe_gauge!(
        MAILBOX_MESSAGES,
        Unit::Count,
        "Messages waiting in all mailboxes of the system."
    );
    describe_counter!(
        DEAD_LETTERS,
        Unit::Count,
        "Messages that could not be delivered, by reason."
    );
    describe_gauge!(
        REGISTERED_NAMES,
        Unit::Count,
        "Names in the local registry."
    );
    describe_histogram!(
        HANDLE_SECONDS,
        Unit::Seconds,
        "Time an actor took to handle a message (one message in 128 per actor is timed), by actor type."
    );
}

impl SystemRef {
    /// Publishes the system's levels and counts through the `metrics`
    /// facade: actors alive, the depth of the
    /// [`DEEPEST_MAILBOXES`] deepest mailboxes and of all of them, dead
    /// letters by reason, registered names. Call it right before rendering
    /// metrics; it reads every live actor's queue length (one short lock
    /// each), so it costs time in proportion to the actors alive, and
    /// nothing between calls.
    pub fn record_metrics(&self) {
        describe_metrics();
        metrics::gauge!(ACTORS_ALIVE).set(self.live_actors() as f64);
        metrics::gauge!(REGISTERED_NAMES).set(self.registered() as f64);
        let (top, total) = self.deepest_mailboxes_and_total(DEEPEST_MAILBOXES);
        for (i, rank) in RANKS.iter().enumerate() {
            let depth = top.get(i).map_or(0, |&(_, d)| d);
            metrics::gauge!(MAILBOX_DEPTH, "rank" => *rank).set(depth as f64);
        }
        metrics::gauge!(MAILBOX_MESSAGES).set(total as f64);
        let letters = self.dead_letters();
        for reason in DeadLetterReason::ALL {
            metrics::counter!(DEAD_LETTERS, "reason" => reason.label())
                .absolute(letters.count_for(reason));
        }
    }
}

/// What an actor's cell keeps for timing its messages (in its
/// [`CellExtra`], boxed on the first timed message): the actor type's
/// histogram, and the start of the message being timed.
pub(crate) struct HandleTimer {
    histogram: Histogram,
    started: Instant,
}

impl HandleTimer {
    /// Whether the message counted `since_yield` (0-based, see `run`) is
    /// timed: the scheduling budget's counter doubles as the sampler, so
    /// sampling costs no state of its own.
    #[inline]
    pub(crate) fn is_timed(since_yield: u32) -> bool {
        since_yield == HANDLE_TIME_SAMPLE - 1
    }

    /// Starts timing a message of an actor of type `actor`.
    #[cold]
    pub(crate) fn start(extra: &mut Option<Box<CellExtra>>, actor: &'static str) {
        let now = Instant::now();
        let extra = extra.get_or_insert_with(Box::default);
        match &mut extra.timer {
            Some(t) => t.started = now,
            None => {
                extra.timer = Some(Self {
                    histogram: metrics::histogram!(HANDLE_SECONDS, "actor" => actor),
                    started: now,
                })
            }
        }
    }

    /// Records the timed message's handling time.
    #[cold]
    pub(crate) fn finish(extra: &mut Option<Box<CellExtra>>) {
        if let Some(t) = extra.as_ref().and_then(|e| e.timer.as_ref()) {
            t.histogram.record(t.started.elapsed().as_secs_f64());
        }
    }
}
