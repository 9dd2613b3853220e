//! One entry point for the Plexus benchmark workloads
//! (`shared/bench/WORKLOADS.md`):
//!
//! ```text
//! cargo run --release -p plexus-bench -- w7 spawn|pingpong|fanin [--baseline]
//! ```
//!
//! Each run prints its `RESULT` line last. Without `--baseline`, workloads
//! that have a plain-tokio baseline run it in the same invocation,
//! alternating with the Plexus runs, and add `vs_baseline=<ratio>`.

/// Both Plexus and the baselines run on mimalloc: glibc's allocator
/// serialises threads on arena locks when one thread frees what another
/// allocated (every message and task here), which would measure the
/// allocator rather than the runtimes.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod report;
mod w7;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "plexus-bench",
    about = "Plexus benchmark workloads (see shared/bench/WORKLOADS.md)"
)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// W7 local: spawn, pingpong, fanin on one machine, no network.
    W7(w7::Args),
}

fn main() {
    let cli = Cli::parse();
    match cli.workload {
        Workload::W7(args) => w7::run(&args),
    }
}
