//! Shared by the multi-process tests.
#[cfg(feature = "tls")]
pub mod certified;
pub mod process;
pub mod service;
