//! Remote actors.
pub mod handshake;
pub mod wire;
