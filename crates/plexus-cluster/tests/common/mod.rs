//! Helpers shared by the integration tests.

#[cfg(feature = "cli")]
pub mod procs;
pub mod updates;
