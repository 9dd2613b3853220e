//! Shared by the multi-process tests.
pub mod certified;
pub mod process;
pub mod service;
