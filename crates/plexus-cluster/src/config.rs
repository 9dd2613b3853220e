//! Settings of a cluster member.

use std::time::Duration;

use crate::split_brain::SplitBrainStrategy;

/// Settings of a cluster member. Every member of a cluster should use the
/// same timings; the defaults suit a LAN of up to a few thousand members.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ClusterConfig {
    /// The cluster's name; packets from another cluster are refused.
    /// Default `plexus`. At most 255 bytes.
    pub name: String,
    /// Addresses of members to join through, tried in turn every
    /// `join_retry` until one admits this member. Empty: form a new cluster
    /// at once.
    pub seeds: Vec<String>,
    /// Form a new cluster if no seed answered for this long (only on first
    /// start, never after being downed). Default `None`: keep trying, so
    /// two halves never form two clusters by accident.
    #[serde(
        with = "plexus_net::units::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub form_after: Option<Duration>,
    /// Between join attempts. Default 1 s.
    #[serde(with = "plexus_net::units::duration")]
    pub join_retry: Duration,
    /// With seeds from a discovery ([`crate::Membership::set_seeds`]), how
    /// many addresses (this member's included) the discovery must have
    /// found before the lowest of them may form a new cluster (the
    /// bootstrap rule, `docs/CLUSTER.md` "Discovery"; Akka Cluster
    /// Bootstrap's `required-contact-point-nr`). Set it to the number of
    /// members started together (a StatefulSet's replicas): then every
    /// member agrees on the lowest, and exactly one cluster forms. Default
    /// 2; 1 lets a member that discovers only itself form alone.
    pub bootstrap_min_seeds: usize,
    /// This member's share of the ring. Default 1.
    pub weight: u16,
    /// Virtual nodes per unit of weight. Default 128 (about 2 KiB of ring
    /// per member).
    pub vnodes_per_weight: u32,
    /// Probes per key lookup (multi-probe consistent hashing). Default 5.
    pub lookup_probes: u32,
    /// How many ring successors watch each member (and how many owners
    /// [`crate::Membership::owners`] returns by default). Default 3.
    pub replication_factor: usize,
    /// Between probes of a watched member. Default 1 s.
    #[serde(with = "plexus_net::units::duration")]
    pub probe_interval: Duration,
    /// How long an indirect probe waits for an answer. Default 500 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub probe_timeout: Duration,
    /// Members asked to probe a silent member (SWIM's k). Default 3.
    pub indirect_probes: usize,
    /// Phi at which a silent watched member is probed indirectly. Default 8.
    pub suspect_phi: f64,
    /// Lower bound of the detector's deviation. Default 200 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub phi_min_std_dev: Duration,
    /// Pause of a watched member that is not suspicious. Default 0.
    #[serde(with = "plexus_net::units::duration")]
    pub phi_acceptable_pause: Duration,
    /// Inter-arrival samples the detector keeps per watched member.
    /// Default 100 (800 bytes).
    pub phi_window: usize,
    /// Between gossip rounds (only sent when there is news). Default 200 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub gossip_interval: Duration,
    /// Members gossiped to per round: one ring neighbour, the rest at
    /// random. Default 3.
    pub gossip_fanout: usize,
    /// Between push-pull exchanges with one random member (digests first).
    /// Default 10 s.
    #[serde(with = "plexus_net::units::duration")]
    pub push_pull_interval: Duration,
    /// A claim is gossiped `retransmit_mult × ⌈log10(members + 1)⌉` times.
    /// Default 4.
    pub retransmit_mult: u32,
    /// Largest packet sent. Default 1,400 bytes.
    #[serde(with = "plexus_net::units::bytes")]
    pub max_packet: usize,
    /// Minimum suspicion before a suspect is unreachable:
    /// `suspicion_mult × max(1, log10(members)) × probe_interval`.
    /// Default 2.
    pub suspicion_mult: f64,
    /// Lifeguard: a suspicion starts at `suspicion_max_mult` × the minimum
    /// and shrinks towards it as independent watchers confirm it.
    /// Default 4.
    pub suspicion_max_mult: f64,
    /// The Lifeguard extensions (Dadgar et al., 2018): local health
    /// (a member that finds itself slow stretches its timeouts rather than
    /// accuse), nacks from indirect probes, suspicion that shrinks with
    /// confirmations, and telling a suspect directly so it can refute.
    /// Default on; off is plain SWIM (for comparison).
    pub lifeguard: bool,
    /// How partitions are resolved. Default keep-majority.
    pub split_brain: SplitBrainStrategy,
    /// The unreachable set must be unchanged this long before the
    /// split-brain resolver acts. Default 4 s.
    #[serde(with = "plexus_net::units::duration")]
    pub stable_after: Duration,
    /// A down member is removed after this long. Default 10 s.
    #[serde(with = "plexus_net::units::duration")]
    pub remove_after: Duration,
    /// A removed member's tombstone is forgotten after this long. Default
    /// 60 s.
    #[serde(with = "plexus_net::units::duration")]
    pub tombstone_ttl: Duration,
    /// Rejoin under a new incarnation after being downed. Default on.
    pub rejoin_when_downed: bool,
    /// Wait before rejoining. Default 1 s.
    #[serde(with = "plexus_net::units::duration")]
    pub rejoin_delay: Duration,
    /// How long a leaving member keeps gossiping its departure. Default 2 s.
    #[serde(with = "plexus_net::units::duration")]
    pub leave_timeout: Duration,
    /// Most members (tombstones included) kept; claims about more are
    /// refused, so memory is bounded. Default 10,000.
    pub max_members: usize,
    /// Seeds the member's random choices (probe helpers, gossip targets).
    pub rng_seed: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            name: "plexus".into(),
            seeds: Vec::new(),
            form_after: None,
            join_retry: Duration::from_secs(1),
            bootstrap_min_seeds: 2,
            weight: 1,
            vnodes_per_weight: 128,
            lookup_probes: 5,
            replication_factor: 3,
            probe_interval: Duration::from_secs(1),
            probe_timeout: Duration::from_millis(500),
            indirect_probes: 3,
            suspect_phi: 8.0,
            phi_min_std_dev: Duration::from_millis(200),
            phi_acceptable_pause: Duration::ZERO,
            phi_window: 100,
            gossip_interval: Duration::from_millis(200),
            gossip_fanout: 3,
            push_pull_interval: Duration::from_secs(10),
            retransmit_mult: 4,
            max_packet: 1400,
            suspicion_mult: 2.0,
            suspicion_max_mult: 4.0,
            lifeguard: true,
            split_brain: SplitBrainStrategy::KeepMajority,
            stable_after: Duration::from_secs(4),
            remove_after: Duration::from_secs(10),
            tombstone_ttl: Duration::from_secs(60),
            rejoin_when_downed: true,
            rejoin_delay: Duration::from_secs(1),
            leave_timeout: Duration::from_secs(2),
            max_members: 10_000,
            rng_seed: 0,
        }
    }
}

impl ClusterConfig {
    /// Sets the cluster name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the seeds.
    pub fn seeds<S: Into<String>>(mut self, seeds: impl IntoIterator<Item = S>) -> Self {
        self.seeds = seeds.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the split-brain strategy.
    pub fn split_brain(mut self, strategy: SplitBrainStrategy) -> Self {
        self.split_brain = strategy;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] names the setting and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting: &'static str, why: &'static str| Err(ConfigError { setting, why });
        if self.name.len() > 255 {
            return bad("name", "is longer than 255 bytes");
        }
        if self.seeds.iter().any(|s| s.is_empty() || s.len() > 255) {
            return bad("seeds", "an address is empty or longer than 255 bytes");
        }
        if self.max_packet < 256 {
            return bad("max_packet", "must be at least 256 bytes");
        }
        for (setting, d) in [
            ("probe_interval", self.probe_interval),
            ("probe_timeout", self.probe_timeout),
            ("gossip_interval", self.gossip_interval),
            ("push_pull_interval", self.push_pull_interval),
            ("join_retry", self.join_retry),
        ] {
            if d.is_zero() {
                return bad(setting, "must be longer than 0s");
            }
        }
        if !(self.suspicion_mult > 0.0 && self.suspicion_mult.is_finite()) {
            return bad("suspicion_mult", "must be a number above 0");
        }
        if !(self.suspicion_max_mult >= self.suspicion_mult && self.suspicion_max_mult.is_finite())
        {
            return bad("suspicion_max_mult", "must be at least suspicion_mult");
        }
        if !(self.suspect_phi > 0.0 && self.suspect_phi.is_finite()) {
            return bad("suspect_phi", "must be a number above 0");
        }
        if self.bootstrap_min_seeds == 0 {
            return bad("bootstrap_min_seeds", "must be at least 1");
        }
        if self.replication_factor == 0 {
            return bad("replication_factor", "must be at least 1");
        }
        if self.weight == 0 {
            return bad("weight", "must be at least 1");
        }
        if let SplitBrainStrategy::StaticQuorum { size: 0 } = self.split_brain {
            return bad("split_brain", "static quorum of 0");
        }
        Ok(())
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster setting `{setting}` {why}")]
pub struct ConfigError {
    /// The setting.
    pub setting: &'static str,
    /// What is wrong with it.
    pub why: &'static str,
}
