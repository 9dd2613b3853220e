//! Shared by the multi-process tests.
pub mod process;
pub mod service;
