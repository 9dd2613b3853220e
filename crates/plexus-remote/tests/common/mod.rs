//! Shared by the multi-process tests.
#[cfg(feature = "tls")]
pub mod certified;
/// The counter `plexus node` serves (one definition for both).
#[path = "../../../plexus/src/bin/plexus/counter.rs"]
pub mod service;
