#![doc = include_str!("../../../README.md")]
//!
//! # Crate map
//!
//! ```text
//!  plexus (this facade)   re-exports the public API
//!  ├── plexus-core        local actor runtime            (re-exported at the root)
//!  └── plexus-net         sans-IO protocol layers, stacks (as `plexus::net`)
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub use plexus_core::*;

/// The composable network stack: sans-IO protocol layers, stack specs and
/// the layer registry. See the [`plexus_net`] crate docs.
pub mod net {
    pub use plexus_net::*;
}

/// The names most programs need: `use plexus::prelude::*;`.
pub mod prelude {
    pub use plexus_core::{
        Actor, ActorRef, ActorSystem, AskError, Backoff, Context, Down, Exit, ExitReason, ReplyTo,
        Supervision, SystemRef,
    };
}
