//! Link emulator for Plexus experiments.
//!
//! ```text
//!   netns <prefix>-a                      netns <prefix>-b
//!  ┌──────────────────┐                  ┌──────────────────┐
//!  │ node / peer prog │                  │ node / peer prog │
//!  │ 198.51.100.1/24  │                  │ 198.51.100.2/24  │
//!  │   TUN <prefix>-a │                  │   TUN <prefix>-b │
//!  └────────┬─────────┘                  └────────┬─────────┘
//!           │ fd (opened in the root namespace)   │ fd
//!  ┌────────┴─────────────────────────────────────┴─────────┐
//!  │ plexus-linkem forwarder (root namespace, user space)   │
//!  │   a→b: LinkModel  loss · rate+queue · delay±jitter ·   │
//!  │   b→a: LinkModel  reorder · duplicate (seeded RNG)     │
//!  └────────────────────────────────────────────────────────┘
//! ```
//!
//! - [`config`]: validated settings per direction ([`LinkConfig`]).
//! - [`model`]: [`LinkModel`], the sans-IO scheduler: which packet leaves when.
//! - [`netns`]: [`Link`], the namespaces and TUN devices, removed on drop.
//! - [`forward`]: the thin driver moving packets between TUNs and models.
//! - [`probe`]: the UDP probe behind `plexus-linkem selftest`.
#![deny(missing_docs)]

pub mod config;

pub mod forward;
pub mod model;
pub mod netns;
pub mod probe;

pub use config::{ConfigError, DirectionConfig, LinkConfig};
pub use forward::ForwarderStopped;
pub use model::{LinkModel, LinkStats, Verdict};
pub use netns::{Link, SetupError, Side};
