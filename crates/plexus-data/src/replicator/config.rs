//! The replicator's settings.

use std::time::Duration;

/// Settings of a [`Replicator`](super::Replicator). The defaults suit a
/// LAN cluster of a few to a few hundred members.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicatorConfig {
    /// The cluster's name: packets from a replicator of another cluster are
    /// refused. On a cluster member leave it at its default: the
    /// replicator takes the cluster's (`ClusterConfig::name`), and
    /// `Replication::start` refuses another name. Default `"plexus"`.
    /// Not a key of configuration files: there, `cluster.name` is the one
    /// name.
    #[serde(skip)]
    pub cluster: String,
    /// How often deltas go out to peers that have not acknowledged them
    /// (and how long a write or a read waits before it is sent again to
    /// the peers that have not answered it). Default 100 ms.
    #[serde(with = "plexus_net::units::duration")]
    pub delta_interval: Duration,
    /// How often a round of anti-entropy starts with a random peer, and
    /// pruning is looked at. Default 1 s.
    #[serde(with = "plexus_net::units::duration")]
    pub gossip_interval: Duration,
    /// How many ranges (buckets) keys are hashed into for anti-entropy
    /// digests. Every member of a cluster must use the same count. Default
    /// 1,024 (1,000,000 keys make buckets of about 1,000).
    pub buckets: u32,
    /// Differing buckets one anti-entropy round carries. Default 64.
    pub max_buckets_per_round: usize,
    /// Bytes of states one anti-entropy message carries before the rest is
    /// left to the next round (which starts at once). Default 4 MiB.
    #[serde(with = "plexus_net::units::bytes")]
    pub max_round_bytes: usize,
    /// Bytes of deltas one delta message carries. Default 1 MiB.
    #[serde(with = "plexus_net::units::bytes")]
    pub max_delta_bytes: usize,
    /// Deltas kept for peers that have not acknowledged them; a peer that
    /// falls further behind is brought up to date by anti-entropy instead.
    /// Default 100,000.
    pub max_delta_log: usize,
    /// The largest packet handed to the network; bigger ones are chunked.
    /// Default 60 KiB (under the 64 KiB of a UDP datagram and every
    /// framing layer's default limit).
    #[serde(with = "plexus_net::units::bytes")]
    pub max_packet: usize,
    /// The largest packet reassembled from chunks (so the largest state of
    /// one key that can travel, and what one peer may make this node
    /// buffer). Default 64 MiB.
    #[serde(with = "plexus_net::units::bytes")]
    pub max_transfer: usize,
    /// How long a chunked transfer may take to complete. Default 10 s.
    #[serde(with = "plexus_net::units::duration")]
    pub reassembly_timeout: Duration,
    /// The most keys this replicator holds; a delta or an update that would
    /// create more is refused. Default 4,000,000.
    pub max_keys: usize,
    /// States of types not registered yet that are held until they are
    /// (received from peers or recovered from the store), at most; their
    /// bytes count against `max_transfer`. Default 100,000.
    pub max_unregistered: usize,
    /// Requests (updates and gets with a consistency level above local)
    /// waiting for answers at once; more are refused. Default 100,000.
    pub max_requests: usize,
    /// Keys whose state is kept in the durable store: exact names, or
    /// prefixes ending in `*` (`"devices/*"`). Default none.
    pub durable: Vec<String>,
    /// Seed of the replicator's random choices (anti-entropy peers).
    pub rng_seed: u64,
}

impl Default for ReplicatorConfig {
    fn default() -> Self {
        Self {
            cluster: "plexus".into(),
            delta_interval: Duration::from_millis(100),
            gossip_interval: Duration::from_secs(1),
            buckets: 1024,
            max_buckets_per_round: 64,
            max_round_bytes: 4 << 20,
            max_delta_bytes: 1 << 20,
            max_delta_log: 100_000,
            max_packet: 60 * 1024,
            max_transfer: 64 << 20,
            reassembly_timeout: Duration::from_secs(10),
            max_keys: 4_000_000,
            max_unregistered: 100_000,
            max_requests: 100_000,
            durable: Vec::new(),
            rng_seed: 1,
        }
    }
}

impl ReplicatorConfig {
    /// Whether `key` is durable under [`ReplicatorConfig::durable`].
    pub fn is_durable(&self, key: &str) -> bool {
        self.durable.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => p == key,
        })
    }
}

impl ReplicatorConfig {
    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] names the setting and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting: &'static str, why: &'static str| Err(ConfigError { setting, why });
        if self.delta_interval.is_zero() {
            return bad("delta_interval", "must be longer than 0s");
        }
        if self.gossip_interval.is_zero() {
            return bad("gossip_interval", "must be longer than 0s");
        }
        if self.buckets == 0 || self.buckets > 1 << 20 {
            return bad("buckets", "must be 1 to 1,048,576");
        }
        if self.max_packet < 1024 || self.max_packet > 65_000 {
            return bad("max_packet", "must be 1KiB to 65000 bytes (a UDP datagram)");
        }
        if self.max_transfer < self.max_packet {
            return bad("max_transfer", "must be at least max_packet");
        }
        if self.max_buckets_per_round == 0 {
            return bad("max_buckets_per_round", "must be at least 1");
        }
        if self.durable.iter().any(|p| p.is_empty()) {
            return bad("durable", "a pattern is empty");
        }
        Ok(())
    }
}

/// A replicator setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replicator setting `{setting}` {why}")]
pub struct ConfigError {
    /// The setting.
    pub setting: &'static str,
    /// What is wrong with it.
    pub why: &'static str,
}
