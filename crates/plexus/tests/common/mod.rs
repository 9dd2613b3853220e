//! Shared by the multi-process tests of the `plexus` command: each test
//! file uses a part of it.
#![allow(dead_code)]

#[path = "../../../plexus-remote/tests/common/certified.rs"]
pub mod certified;
pub mod node_process;
pub mod procs;
#[path = "../../src/bin/plexus/counter.rs"]
pub mod service;
