//! Link emulator (work in progress).
#![deny(missing_docs)]
