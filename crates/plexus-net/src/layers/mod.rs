//! The built-in protocol layers. Every module has the same shape: the layer,
//! its `Config` (with documented defaults and spec options), its error, and
//! its tests.

pub mod batching;
pub mod compression;
pub mod delivery;
pub mod encryption;
pub mod faults;
pub mod framing;
pub mod heartbeat;
pub mod ordering;
pub mod slicing;
