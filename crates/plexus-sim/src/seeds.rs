//! Running a simulation test over many seeds, and rerunning the one that
//! failed.

use std::panic::{self, AssertUnwindSafe};

/// The environment variable that makes [`check_seeds`] run one seed only.
pub const SEED_VARIABLE: &str = "PLEXUS_SIM_SEED";

/// Runs `test` once per seed in `seeds`; when one panics, prints the seed
/// and how to rerun it alone (`PLEXUS_SIM_SEED=<seed> cargo test ...`), and
/// panics with the same message. With `PLEXUS_SIM_SEED` set, runs that seed
/// only.
///
/// # Panics
///
/// When `test` panics for a seed.
pub fn check_seeds(seeds: impl IntoIterator<Item = u64>, test: impl Fn(u64)) {
    let only = std::env::var(SEED_VARIABLE)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let run = |seed: u64| {
        if let Err(cause) = panic::catch_unwind(AssertUnwindSafe(|| test(seed))) {
            let message = cause
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| cause.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            eprintln!(
                "simulation failed with seed {seed}; rerun it alone with {SEED_VARIABLE}={seed}"
            );
            panic!("seed {seed}: {message}");
        }
    };
    match only {
        Some(seed) => run(seed),
        None => seeds.into_iter().for_each(run),
    }
}
