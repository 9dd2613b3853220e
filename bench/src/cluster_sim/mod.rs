//! `cluster-sim`: the cluster's figures at full size in the simulator (no
//! network, virtual time; `docs/CLUSTER.md`). Each scenario prints one
//! `RESULT` line per point:
//!
//! - `size` (default): per cluster size, rounds until everyone sees
//!   everyone up when all join at once, rounds until a single new member
//!   is seen up by all in a formed cluster, the time until every live
//!   member sees a crash (p50 / p99 / max over many crashes), membership
//!   traffic per member; `--plot` draws rounds and detection against N.
//! - `stalls`: 10 % of members stalling for 2 s at random with 5 % loss,
//!   Lifeguard on and off: false suspicions and false downings.
//! - `partitions`: seeded 60/40 partitions, symmetric and one-way, under a
//!   split-brain strategy: how often exactly the documented side stays up,
//!   how long it took, and whether the losers rejoin after the heal.
//! - `hour`: one simulated hour of a steady cluster, for the wall time.

mod partitions;
mod plot;
mod size;
mod stalls;

use std::path::PathBuf;
use std::time::Duration;

use plexus::cluster::ClusterEvent;
use plexus::sim::{LinkModel, Recorded};

/// Arguments of `cluster-sim`.
#[derive(clap::Args)]
pub struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value = "size")]
    scenario: Scenario,
    /// Cluster sizes, comma-separated.
    #[arg(long, default_value = "8,32,128", value_delimiter = ',')]
    members: Vec<usize>,
    /// Seed of the first run; run k uses seed + k.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per size (`size`: clusters formed; `partitions`: partitions
    /// per kind).
    #[arg(long, default_value_t = 2)]
    runs: u64,
    /// `size`: crashes per run, one after the other.
    #[arg(long, default_value_t = 5)]
    crashes: usize,
    /// `stalls`: how members stall.
    #[arg(long, value_enum, default_value = "slow")]
    stall: stalls::StallKind,
    /// `stalls`: only with Lifeguard on (`true`) or off (`false`); both by
    /// default.
    #[arg(long)]
    lifeguard: Option<bool>,
    /// `stalls` and `hour`: simulated minutes.
    #[arg(long, default_value_t = 10)]
    minutes: u64,
    /// `partitions`: the strategy (keep-majority, static-quorum,
    /// keep-oldest, down-all).
    #[arg(long, default_value = "keep-majority")]
    strategy: String,
    /// `size`: write a plot of rounds and detection time against N here
    /// (PNG).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// TrueType font for the plot (default: DejaVu Sans or similar).
    #[arg(long)]
    font: Option<PathBuf>,
}

/// The scenarios.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Scenario {
    Size,
    Stalls,
    Partitions,
    Hour,
}

/// A LAN link: 0.5 ms ± 0.2 ms, `loss` per packet.
fn lan(loss: f64) -> LinkModel {
    LinkModel {
        loss,
        latency: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..LinkModel::default()
    }
}

/// Runs `cluster-sim`.
pub fn run(args: &Args) {
    match args.scenario {
        Scenario::Size => size::run(args),
        Scenario::Stalls => {
            for &n in &args.members {
                for lifeguard in [true, false] {
                    if args.lifeguard.is_some_and(|only| only != lifeguard) {
                        continue;
                    }
                    stalls::run(n, args.minutes, lifeguard, args.seed, args.stall);
                }
            }
        }
        Scenario::Partitions => partitions::run(args),
        Scenario::Hour => {
            for &n in &args.members {
                size::hour(n, args.minutes, args.seed);
            }
        }
    }
}

/// For each process in `observers`, the time (since `since`) of its first
/// event matching `pred`; `None` if one of them never raised one.
fn first_by_each(
    events: &[Recorded<ClusterEvent>],
    observers: &[usize],
    since: Duration,
    pred: impl Fn(&ClusterEvent) -> bool,
) -> Option<f64> {
    let mut first: std::collections::HashMap<usize, Duration> = Default::default();
    for r in events {
        if r.at >= since && pred(&r.event) {
            first.entry(r.process).or_insert(r.at);
        }
    }
    observers
        .iter()
        .map(|o| first.get(o).map(|t| (*t - since).as_secs_f64()))
        .try_fold(0.0f64, |acc, t| t.map(|t| acc.max(t)))
}

/// The `q` quantile (0..=1) of `v` (sorted here), nearest rank.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}
