//! Plexus network stack: sans-IO protocol layers assembled at run time.
//!
//! ```text
//!  remote (node, wire protocol, lanes)            whole messages (Bytes)
//!  ───────────────────────────────────────────────────────▲──────────│────
//!  Stack (this crate)         ┌──────────────┐ poll_receive  handle_send
//!   one instance per link     │ ordering     │            │          ▼
//!   built from a StackSpec    │ delivery     │   frames, events, timers
//!   "udp / slicing /          │ slicing      │            │          │
//!    delivery / ordering"     └──────────────┘ handle_receive  poll_transmit
//!  ───────────────────────────────────────────────────────│──────────▼────
//!  transport drivers (tcp, udp, uds, quic, tls, mem)      bytes / datagrams
//! ```
//!
//! Every layer is a sans-IO state machine ([`Layer`]): frames and the current
//! time in, frames, events and the next deadline out. No socket, no clock, no
//! task. A [`StackSpec`] such as `tcp / framing` or
//! `udp / slicing(mtu=1200) / delivery / ordering` is parsed and validated
//! once against a [`LayerRegistry`] and builds one [`Stack`] per peer link.
//! Frames ([`Frame`]) are short buffer chains: headers are prepended into an
//! inline headroom and payloads are shared [`bytes::Bytes`], so no layer
//! copies a payload and steady state does not allocate on the framing,
//! delivery and ordering paths.
//!
//! Built-in layers ([`layers`]), each documenting its guarantee:
//! `framing`, `slicing`, `delivery`, `ordering`, `compression`, `heartbeat`,
//! `faults`, `encryption`, `batching`. Their invariants are collected in
//! `ALGORITHM.md`. The [`sim`]
//! module moves frames between stacks on virtual time over a seeded lossy
//! link, for deterministic tests.
//!
//! [`Protocol`] is the shape of a whole sans-IO endpoint above the stack (a
//! cluster member, a replicator, a user's protocol): one trait that both
//! the simulator (`plexus-sim`) and the node's driver
//! (`plexus_remote::driver`) run.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// A refused send hands its frame back by value (no allocation under
// back-pressure); the frame is 128 bytes, so the Err is large.
#![allow(clippy::result_large_err)]

pub mod error;
pub mod file_region;
pub mod frame;
pub mod guarantees;
pub mod layer;
pub mod layers;
pub mod options;
pub mod packed;
pub mod phi;
pub mod protocol;
pub mod registry;
pub mod sim;
pub mod spec;
pub mod stack;
#[cfg(feature = "config")]
pub mod units;
mod wire;

pub use error::{LayerError, LinkError, ReceiveError, StackSendError};
pub use file_region::FileRegion;
pub use frame::Frame;
pub use guarantees::{GuaranteeEffect, Guarantees};
pub use layer::{DataUnit, Interface, Layer, LinkContext, LinkEvent, Output};
pub use options::{LayerOption, LayerOptions, OptionError};
pub use packed::Packed;
pub use protocol::Protocol;
pub use registry::{ConfigConstructor, LayerConfig, LayerConstructor, LayerFactory, LayerRegistry};
pub use spec::{SpecError, StackSpec, TransportProfile};
pub use stack::{Stack, StackStats};
