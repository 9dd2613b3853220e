//! Where a joining member finds its seeds: a [`Discovery`] yields member
//! addresses (node URIs such as `tcp://10.0.0.7:4000`).
//!
//! ```text
//!   Discovery (async, this module)          StaticSeeds · DnsDiscovery (A/AAAA,
//!     │ every join_retry while joining      SRV) · your own (Consul, etcd, a
//!     ▼                                     cloud API)
//!   driver (crate::Cluster)  ──set_seeds──▶  Membership (sans-IO): join the
//!                                            seeds; the lowest forms the cluster
//! ```
//!
//! The driver ([`crate::Cluster::start_with_discovery`]) runs the discovery
//! every `join_retry` while the member joins and hands each answer to
//! [`crate::Membership::set_seeds`]; a failed discovery is logged and
//! retried, never fatal. Who forms the cluster when every member discovers
//! every other (a Kubernetes StatefulSet) is the bootstrap rule of
//! `docs/CLUSTER.md`, section "Discovery".
//!
//! Every answer goes through [`seed_list`]: sorted, deduplicated and cut to
//! at most `max_seeds` addresses, so every member that got the same answer
//! holds the same list, and memory is bounded whatever a source returns.

#[cfg(feature = "dns")]
mod dns;
#[cfg(feature = "node")]
pub(crate) mod rerun;

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

#[cfg(feature = "dns")]
pub use dns::{DnsBuilder, DnsDiscovery};

/// Most seeds kept from one answer by default.
pub const DEFAULT_MAX_SEEDS: usize = 64;

/// Longest member address (as [`crate::Membership`] accepts them).
const MAX_ADDRESS_LEN: usize = 255;

/// What [`Discovery::discover`] returns: a boxed future, so the trait is
/// object-safe (`Box<dyn Discovery>`).
pub type Discovered<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<String>, DiscoveryError>> + Send + 'a>>;

/// A source of seed addresses: static, DNS, or one of your own (Consul,
/// etcd, a cloud provider's API).
///
/// ```
/// use plexus_cluster::discovery::{seed_list, Discovered, Discovery, DiscoveryError};
///
/// /// Seeds from an environment variable, comma-separated.
/// struct FromEnv(&'static str);
///
/// impl Discovery for FromEnv {
///     fn discover(&self) -> Discovered<'_> {
///         Box::pin(async move {
///             let value = std::env::var(self.0).unwrap_or_default();
///             let seeds = value.split(',').map(str::trim).map(String::from);
///             seed_list(&self.describe(), seeds, 64)
///         })
///     }
///
///     fn describe(&self) -> String {
///         format!("env {}", self.0)
///     }
/// }
/// ```
pub trait Discovery: Send + Sync {
    /// The addresses of members to join through, as node URIs
    /// (`tcp://10.0.0.7:4000`). Implementations should return them through
    /// [`seed_list`] (sorted, deduplicated, bounded) and should answer
    /// within a few seconds: the driver runs one discovery at a time and
    /// gives up on one after 30 s.
    ///
    /// # Errors
    ///
    /// [`DiscoveryError`]: no records ([`DiscoveryError::Empty`]), or the
    /// source failed. The driver logs it and asks again after
    /// `join_retry`.
    ///
    /// # Cancel safety
    ///
    /// The driver may drop the future (when the member stops); nothing is
    /// expected of an answer that was never awaited.
    fn discover(&self) -> Discovered<'_>;

    /// What this discovery asks, for logs and errors
    /// (`dns srv _plexus._tcp.plexus.default.svc.cluster.local`).
    fn describe(&self) -> String {
        String::from("discovery")
    }
}

/// Why a discovery found no seeds. The member keeps the seeds it had and
/// the driver asks again after `join_retry`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The source answered with no usable address (no records, a name that
    /// does not exist, or only records that are no address).
    #[error("discover seeds: {name}: no records")]
    Empty {
        /// What was asked (`dns srv _plexus._tcp.x`).
        name: String,
    },
    /// The source could not be asked or failed to answer (for DNS,
    /// hickory's `ResolveError`: a server failure, no nameserver reached).
    #[error("discover seeds: {name}: {source}")]
    Failed {
        /// What was asked.
        name: String,
        /// The source's own error.
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
    /// The source did not answer in time.
    #[error("discover seeds: {name}: no answer within {after:?}")]
    TimedOut {
        /// What was asked.
        name: String,
        /// How long the driver waited.
        after: Duration,
    },
}

/// An answer as seeds: addresses that cannot be member addresses (empty,
/// longer than 255 bytes) dropped, the rest sorted, deduplicated and cut to
/// the `max_seeds` lowest (with a warning), so members that got the same
/// answer, in any order, hold the same list. `name` says what was asked.
///
/// # Errors
///
/// [`DiscoveryError::Empty`] when no address is left.
pub fn seed_list(
    name: &str,
    addresses: impl IntoIterator<Item = String>,
    max_seeds: usize,
) -> Result<Vec<String>, DiscoveryError> {
    let mut seeds = Vec::new();
    let mut unusable = 0usize;
    for a in addresses {
        if a.is_empty() || a.len() > MAX_ADDRESS_LEN {
            unusable += 1;
            continue;
        }
        seeds.push(a);
        // Keep memory bounded by the limit, not by the answer: cut back to
        // the lowest `max_seeds` whenever the buffer doubles.
        if seeds.len() >= max_seeds.saturating_mul(2).max(64) {
            seeds.sort_unstable();
            seeds.dedup();
            seeds.truncate(max_seeds);
        }
    }
    if unusable > 0 {
        tracing::warn!(target: "plexus::cluster", %name, unusable, "discovery: ignored addresses that are empty or longer than 255 bytes");
    }
    seeds.sort_unstable();
    seeds.dedup();
    if seeds.len() > max_seeds {
        tracing::warn!(
            target: "plexus::cluster",
            %name,
            found = seeds.len(),
            kept = max_seeds,
            "discovery: more seeds than max_seeds; kept the lowest"
        );
        seeds.truncate(max_seeds);
    }
    if seeds.is_empty() {
        return Err(DiscoveryError::Empty {
            name: name.to_owned(),
        });
    }
    Ok(seeds)
}

/// A fixed list of seeds. Given the same list on every member (this
/// member included), the bootstrap rule lets the lowest form the cluster,
/// unlike [`crate::ClusterConfig::seeds`], through which a member only
/// joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticSeeds {
    seeds: Vec<String>,
}

impl StaticSeeds {
    /// The seeds `addresses` (node URIs).
    pub fn new<S: Into<String>>(addresses: impl IntoIterator<Item = S>) -> Self {
        Self {
            seeds: addresses.into_iter().map(Into::into).collect(),
        }
    }
}

impl Discovery for StaticSeeds {
    fn discover(&self) -> Discovered<'_> {
        let found = seed_list("static seeds", self.seeds.iter().cloned(), usize::MAX);
        Box::pin(std::future::ready(found))
    }

    fn describe(&self) -> String {
        String::from("static seeds")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_answer_is_sorted_and_deduplicated_whatever_its_order() {
        let a = seed_list(
            "test",
            strings(&[
                "tcp://10.0.0.9:4000",
                "tcp://10.0.0.1:4000",
                "tcp://10.0.0.9:4000",
            ]),
            64,
        )
        .expect("two seeds");
        let b = seed_list(
            "test",
            strings(&["tcp://10.0.0.1:4000", "tcp://10.0.0.9:4000"]),
            64,
        )
        .expect("two seeds");
        assert_eq!(a, b);
        assert_eq!(a, strings(&["tcp://10.0.0.1:4000", "tcp://10.0.0.9:4000"]));
    }

    #[test]
    fn a_huge_answer_is_cut_to_the_lowest_max_seeds() {
        // 100,000 addresses in descending order (the worst case for a
        // buffer that kept the first ones): the 64 lowest remain.
        let all: Vec<String> = (0..100_000u32)
            .rev()
            .map(|i| format!("tcp://10.{}.{}.{}:4000", i >> 16, (i >> 8) & 255, i & 255))
            .collect();
        let mut expected = all.clone();
        expected.sort();
        expected.truncate(64);
        let seeds = seed_list("test", all, 64).expect("seeds");
        assert_eq!(seeds, expected);
    }

    #[test]
    fn an_empty_answer_is_a_typed_error_naming_what_was_asked() {
        let e = seed_list("dns srv _plexus._tcp.x", Vec::new(), 64).expect_err("empty");
        assert!(matches!(&e, DiscoveryError::Empty { name } if name == "dns srv _plexus._tcp.x"));
        assert_eq!(
            e.to_string(),
            "discover seeds: dns srv _plexus._tcp.x: no records"
        );
    }

    #[test]
    fn unusable_addresses_are_dropped_and_only_they_make_an_empty_answer() {
        let long = format!("tcp://{}:4000", "a".repeat(300));
        let e = seed_list("test", vec![String::new(), long.clone()], 64).expect_err("none usable");
        assert!(matches!(e, DiscoveryError::Empty { .. }));
        let seeds = seed_list("test", vec![long, "tcp://h:1".into()], 64).expect("one usable");
        assert_eq!(seeds, strings(&["tcp://h:1"]));
    }

    #[test]
    fn static_seeds_answer_their_list_sorted() {
        let d = StaticSeeds::new(["tcp://b:1", "tcp://a:1", "tcp://b:1"]);
        let found = tokio_free_block_on(d.discover()).expect("seeds");
        assert_eq!(found, strings(&["tcp://a:1", "tcp://b:1"]));
        let none = StaticSeeds::new(Vec::<String>::new());
        let e = tokio_free_block_on(none.discover()).expect_err("empty");
        assert_eq!(e.to_string(), "discover seeds: static seeds: no records");
    }

    /// Polls a future that is ready at once (the static discovery's).
    fn tokio_free_block_on<T>(f: Pin<Box<dyn Future<Output = T> + Send + '_>>) -> T {
        let mut f = f;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("a static discovery answers at once"),
        }
    }

    #[test]
    fn discovery_is_object_safe_and_send() {
        fn assert_send_sync<T: Send + Sync + ?Sized>() {}
        assert_send_sync::<dyn Discovery>();
        assert_send_sync::<DiscoveryError>();
        let boxed: Box<dyn Discovery> = Box::new(StaticSeeds::new(["tcp://a:1"]));
        assert_eq!(boxed.describe(), "static seeds");
    }
}
