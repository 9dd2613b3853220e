//! The Plexus actor runtime: actors, typed refs, mailboxes, supervision,
//! timers, a registry and dead letters, on tokio's work-stealing scheduler.
//!
//! ```text
//!  application actors          ActorRef<M>: tell / try_tell / send / ask
//!  ─────────────────────────────────────────────────────────────────────
//!  plexus-core (this crate)    spawn, mailboxes, signals, supervision,
//!                              monitors, links, timers, registry,
//!                              dead letters
//!  plexus-remote (later)       the same ActorRef<M> for remote actors
//!  plexus-net                  composable network stack
//!  ─────────────────────────────────────────────────────────────────────
//!  tokio                       multi-threaded scheduler, timers
//! ```
//!
//! Guarantees:
//! - Messages from one sender to one actor arrive in the order sent.
//! - System signals (stop, kill, `Down`, link exits) overtake queued
//!   messages.
//! - A message that cannot be delivered is never dropped silently: it is a
//!   dead letter (counted, logged, published) or an error to its sender.
//! - A panic in a handler stops that actor with
//!   [`ExitReason::Panicked`] and nothing else.
//! - `Down` is delivered exactly once per monitor.
//!
//! Start with [`ActorSystem`], [`Actor`] and [`ActorRef`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod actor;
mod actor_ref;
mod context;
mod dead_letters;
mod error;
mod id;
pub mod lane;
mod mailbox;
mod reason;
mod registry;
pub mod remote;
mod run;
mod supervision;
mod system;
pub mod telemetry;
pub mod trace;
pub mod turn;

pub use actor::{Actor, FnActor};
pub use actor_ref::{
    ActorRef, Monitor, Receipt, ReceiptFuture, ReplyError, ReplyFuture, ReplyTo, Via,
};
pub use context::{Context, MonitorRef, TimerRef};
pub use dead_letters::{DeadLetter, DeadLetterOffice, DeadLetterReason};
pub use error::{
    AskError, LinkCause, LookupError, RegistryError, SendError, SpawnError, SystemError,
    TrySendError,
};
pub use id::{ActorId, NodeId};
pub use lane::{CapacityProfile, Lane, MessageProperties, Requirements, RouteError, UnknownLane};
pub use reason::{Down, Exit, ExitReason};
pub use supervision::{Backoff, RestartPolicy, Supervision};
pub use system::{ActorSystem, DeadLetters, SpawnBuilder, SystemBuilder, SystemRef};
