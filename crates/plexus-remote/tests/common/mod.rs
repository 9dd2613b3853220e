//! Shared by the multi-process tests.
pub mod service;
