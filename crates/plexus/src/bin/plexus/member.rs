//! `plexus member`: one cluster member as its own OS process, for
//! running a cluster from a shell, across machines, in a pod, and for the
//! multi-process tests and benchmarks (`crates/plexus/tests/cluster_*.rs`,
//! `plexus-bench cluster-procs`).
//!
//! ```text
//! plexus member [--config FILE ...] [--listen URI ...] [--seed URI ...]
//!               [--cluster-name NAME] [--management-bind ADDR]
//!               [--discover-dns-srv NAME | --discover-dns NAME --discover-port PORT]
//!               [--probe-interval-ms MS] [--gossip-interval-ms MS] ...
//!               [--split-brain keep-majority|keep-oldest|down-all|static-quorum=N]
//!               [--tls-cert n1.pem --tls-key n1.key --tls-ca ca.pem]
//!               [--stats-every-ms MS]
//! ```
//!
//! Its settings come from `plexus::config` (defaults < `--config` files <
//! `PLEXUS_*` variables < flags; the cookie from `PLEXUS_NODE__COOKIE` or a
//! file, never a flag); a configuration that is refused exits 2 before
//! anything starts. It starts a node listening on `node.listen`, the
//! cluster member on it (its address is the first bound URI) and the
//! management endpoint (`MANAGEMENT http://...`; its live view at `/`,
//! `plexus top` in a terminal), and prints one line per
//! happening to stdout, flushed at once, so a parent process can follow
//! it:
//!
//! ```text
//! LISTENING tcp://127.0.0.1:4000
//! EVENT subscribed tcp://127.0.0.1:4000 1795000000000
//! EVENT member-up tcp://127.0.0.1:4001 1795000000123
//! MEMBERS up=2
//! EVENT member-downed tcp://127.0.0.1:4001 1795000000123 split-brain:keep-majority:1/2
//! EVENT self-downed tcp://127.0.0.1:4000 1795000000000 split-brain:keep-majority:1/2
//! STATS t_ms=5000 bytes_sent=18230 packets_sent=160 members_up=2 suspicions_raised=0 ...
//! ```
//!
//! `EVENT <kind> <address> <incarnation> [<reason>]`: the kinds are the
//! [`ClusterEvent`] variants in kebab case; for events about this member
//! (`subscribed`, `formed`, `admitted`, `refuted`, `self-downed`,
//! `rejoining`, `left`) the address and incarnation are its own (after the
//! event). A reason is `split-brain:<strategy>:<reachable>/<members>`,
//! `reported-by:<address>` or `restarted:<incarnation>` (a member's old
//! life, replaced by its restarted process at the same address, whose
//! incarnation it names). `MEMBERS up=<n>` follows an event that changed
//! the number of members up. `STATS` comes every `--stats-every-ms` with the
//! member's counters ([`MembershipStats`]) and `t_ms`, the milliseconds
//! since the process started.
//!
//! Timings default to [`ClusterConfig`]'s; the `--*-ms` flags are for tests
//! that want a quick cluster. SIGTERM or Ctrl-C makes the member leave
//! gracefully (`EVENT left ...`), then the process exits 0. If stdout is
//! closed (the parent died), the process exits. Warnings (a join attempt
//! that failed, with the seed and the cause; a member that cannot be
//! reached) go to stderr; `RUST_LOG` sets what else is logged there (the
//! events as readable lines at `plexus::cluster=info`).

use plexus_remote::process::{self, tick, Lines};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::config::Config;
use plexus::management::Management;
use plexus_cluster::{ClusterEvent, ClusterUpdate, DownReason, MemberState, MembershipStats};
use plexus_data::node::Replication;

use crate::settings::{self, ClusterFlags, ConfigFlags};

/// The flags of `plexus member`: configuration files and the flags that
/// override them.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    config: ConfigFlags,
    #[command(flatten)]
    cluster: ClusterFlags,
    /// Print a STATS line this often.
    #[arg(long, value_name = "MS")]
    stats_every_ms: Option<u64>,
}

/// Why the member could not start.
#[derive(Debug, thiserror::Error)]
enum Fail {
    #[error("{0}")]
    Start(#[from] settings::StartError),
    #[error("{0}")]
    Management(#[from] plexus::management::ManagementError),
    #[error("{0}")]
    Replication(#[from] plexus_data::node::StartError),
}

pub fn main(args: Args) -> ExitCode {
    // Refused before anything starts.
    let config = match args.config.load(|c| args.cluster.apply(c)) {
        Ok(config) => config,
        Err(e) => return settings::refused("member", &e),
    };
    process::block_on("plexus member", 2, run(args, config))
}

async fn run(args: Args, config: Config) -> Result<(), Fail> {
    let started = Instant::now();
    let node_started = settings::start_node(&config).await?;
    let mut out = Out::default();
    // SIGTERM or Ctrl-C: listened for before the line a parent waits for,
    // so that one sent as soon as it is read is not missed.
    let stop = process::stop_signal();
    for b in &node_started.bound {
        out.line(format_args!("LISTENING {b}"));
    }
    let (cluster, mut updates) = settings::start_cluster(&node_started, &config)?;
    let settings::Started { system, node, .. } = node_started;
    // Replicated data on every member, so `plexus data get|incr` works
    // against any of them; durable keys need `plexus data` and its store.
    let data = Replication::start(&node, &system, &cluster, config.data.clone(), None)?;
    if config.management.enabled {
        let at = Management::new(&config.management)
            .node(&node)
            .cluster(Arc::clone(&cluster))
            .data(&data)
            .metrics(crate::metrics::render())
            .start(&system)
            .await?;
        out.line(format_args!("MANAGEMENT http://{at}"));
    }
    let mut stats = process::ticker(args.stats_every_ms);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(u) = updates.recv() => out.update(&u),
            _ = tick(stats.as_mut()) => out.stats(started, cluster.stats(), out.up),
        }
        if out.lines.closed() {
            // Nobody reads our lines any more: stop like a crash.
            return Ok(());
        }
    }
    let leave = cluster.leave();
    tokio::pin!(leave);
    loop {
        tokio::select! {
            () = &mut leave => break,
            Some(u) = updates.recv() => out.update(&u),
        }
    }
    // The subscriber may still be handing on the last updates (`Left`
    // among them); give it a moment, not forever.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(u) = updates.recv().await {
            out.update(&u);
            if u.event == ClusterEvent::Left {
                return;
            }
        }
    })
    .await;
    node.shutdown().await;
    Ok(())
}

/// Writes the lines, each flushed at once.
#[derive(Default)]
struct Out {
    /// Members up after the last update printed.
    up: usize,
    lines: Lines,
}

impl Out {
    fn line(&self, text: std::fmt::Arguments<'_>) {
        self.lines.line(text);
    }

    fn update(&mut self, u: &ClusterUpdate) {
        let me = (&u.local.address, u.local.incarnation);
        let (kind, (address, incarnation), reason) = match &u.event {
            ClusterEvent::Subscribed { .. } => ("subscribed", me, None),
            ClusterEvent::Formed { .. } => ("formed", me, None),
            ClusterEvent::Admitted { by, .. } => ("admitted", me, Some(format!("by:{by}"))),
            ClusterEvent::MemberJoined(m) => ("member-joined", (&m.address, m.incarnation), None),
            ClusterEvent::MemberUp(m) => ("member-up", (&m.address, m.incarnation), None),
            ClusterEvent::MemberSuspected(m) => {
                ("member-suspected", (&m.address, m.incarnation), None)
            }
            ClusterEvent::MemberReachable(m) => {
                ("member-reachable", (&m.address, m.incarnation), None)
            }
            ClusterEvent::MemberUnreachable(m) => {
                ("member-unreachable", (&m.address, m.incarnation), None)
            }
            ClusterEvent::MemberDowned { member, reason } => (
                "member-downed",
                (&member.address, member.incarnation),
                Some(reason_token(reason)),
            ),
            ClusterEvent::MemberLeaving(m) => ("member-leaving", (&m.address, m.incarnation), None),
            ClusterEvent::MemberRemoved(m) => ("member-removed", (&m.address, m.incarnation), None),
            ClusterEvent::Refuted { .. } => ("refuted", me, None),
            ClusterEvent::SelfDowned { reason } => ("self-downed", me, Some(reason_token(reason))),
            ClusterEvent::Rejoining { .. } => ("rejoining", me, None),
            ClusterEvent::Left => ("left", me, None),
            _ => ("other", me, None),
        };
        match reason {
            Some(r) => self.line(format_args!("EVENT {kind} {address} {incarnation} {r}")),
            None => self.line(format_args!("EVENT {kind} {address} {incarnation}")),
        }
        let up = u
            .members
            .iter()
            .filter(|m| m.state == MemberState::Up)
            .count();
        if up != self.up {
            self.up = up;
            self.line(format_args!("MEMBERS up={up}"));
        }
    }

    fn stats(&mut self, started: Instant, s: MembershipStats, up: usize) {
        self.line(format_args!(
            "STATS t_ms={} bytes_sent={} packets_sent={} members_up={up} suspicions_raised={} \
             refutations={} stalls_noticed={} packets_refused={} claims_refused={} \
             join_attempts_failed={} unreachable_reports={}",
            started.elapsed().as_millis(),
            s.bytes_sent,
            s.packets_sent,
            s.suspicions_raised,
            s.refutations,
            s.stalls_noticed,
            s.packets_refused,
            s.claims_refused,
            s.join_attempts_failed,
            s.unreachable_reports,
        ));
    }
}

/// A reason as one token: `split-brain:<strategy>:<reachable>/<members>`,
/// `reported-by:<address>` or `restarted:<new incarnation>`.
fn reason_token(reason: &DownReason) -> String {
    match reason {
        DownReason::SplitBrain {
            strategy,
            reachable,
            members,
        } => format!("split-brain:{strategy}:{reachable}/{members}"),
        DownReason::ReportedBy(by) => format!("reported-by:{by}"),
        DownReason::Restarted { incarnation } => format!("restarted:{incarnation}"),
        DownReason::Operator => "operator".to_owned(),
        _ => "other".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_defaults_and_leave_the_rest() {
        let args: Args = settings::parse(&[
            "plexus member",
            "--seed",
            "tcp://a:1",
            "--probe-interval-ms",
            "200",
            "--split-brain",
            "static-quorum=2",
        ]);
        let c = args
            .config
            .load(|c| args.cluster.apply(c))
            .expect("valid flags");
        let d = plexus_cluster::ClusterConfig::default();
        assert_eq!(c.cluster.seeds, vec!["tcp://a:1".to_owned()]);
        assert_eq!(c.cluster.probe_interval, Duration::from_millis(200));
        assert_eq!(
            c.cluster.split_brain,
            plexus_cluster::SplitBrainStrategy::StaticQuorum { size: 2 }
        );
        assert_eq!(c.cluster.stable_after, d.stable_after);
    }
}
