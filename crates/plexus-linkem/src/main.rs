//! `plexus-linkem` command line.
fn main() {}
