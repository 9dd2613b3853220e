//! The `plexus` command the multi-process benchmarks run (`plexus member`,
//! `plexus data`, `plexus device-server`, `plexus device`): the one given
//! with `--plexus`, else the one beside this binary (`cargo build
//! --release -p plexus-bench -p plexus` puts both in `target/release`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `plexus` binary: `given`, else the one beside this binary. Exits
/// with a message saying how to build it if it is not there.
pub fn binary(bench: &str, given: Option<&Path>) -> PathBuf {
    let bin = match given {
        Some(b) => b.to_owned(),
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name("plexus"),
            Err(e) => {
                eprintln!("{bench}: path of this binary: {e}");
                std::process::exit(1);
            }
        },
    };
    if !bin.exists() {
        eprintln!(
            "{bench}: {} not found; build it with `cargo build --release -p plexus` or pass --plexus",
            bin.display()
        );
        std::process::exit(1);
    }
    bin
}

/// `plexus <role>` (its arguments follow), with `cookie` and its
/// management endpoint on a free port (a benchmark runs many members on
/// one machine).
pub fn role(bin: &Path, role: &str, cookie: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg(role)
        .env("PLEXUS_NODE__COOKIE", cookie)
        .env("PLEXUS_MANAGEMENT__BIND", "127.0.0.1:0");
    cmd
}
