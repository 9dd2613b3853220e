//! The live view: a page at `GET /` (HTML, script and style compiled into
//! the binary from `assets/`, no external URL) and the snapshots it shows,
//! pushed over a WebSocket at [`SOCKET_PATH`] and answered at
//! `GET /view/snapshot`.
//!
//! A snapshot is one JSON object: the members (address, state,
//! incarnation, life, up-number, weight), each member's share of the ring,
//! this member's counters, and this node's own figures: its links and
//! lanes (an adaptive lane's split and the learner's goodput and delay
//! estimates), live actors and the deepest mailboxes, dead letters, the
//! replicator's counters. `scope` says which is which: the members and the
//! ring are the whole cluster as this member sees it; the rest is this
//! node's (another member's figures are on its own endpoint).
//!
//! What it guarantees: a socket gets the latest snapshot when it opens,
//! then a new one at least every [`EVERY`] and at once (within one
//! snapshot's making) after every cluster event; a slow reader skips
//! snapshots rather than queueing them. Snapshots are made only while a
//! socket is open. The socket is read-only: what the page sends is
//! ignored. It carries what the `GET` calls of the endpoint answer, so it
//! is exposed as they are (the endpoint binds to loopback by default).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use plexus_cluster::{Cluster, ClusterUpdate, Ring};
use plexus_core::{ActorSystem, SystemRef};
use plexus_http::server::HttpRequest;
use plexus_http::Response;
use plexus_transport::{Link, Listener};
use serde::Serialize;
use tokio::sync::{watch, Notify};

use super::{json, Parts};

/// Where the page opens its WebSocket.
pub const SOCKET_PATH: &str = "/view/ws";

/// How often a snapshot is pushed when nothing happens.
pub const EVERY: Duration = Duration::from_secs(1);

/// Keys looked up to estimate each member's share of the ring (the ring
/// does not expose its arcs, and with multi-probe lookups an arc is not a
/// share anyway): the estimate is within about 1.5 % of the truth.
const SAMPLE_KEYS: u32 = 4096;

/// Mailboxes listed.
const DEEPEST: usize = 5;

/// The replicator answers its counters from its own task; a busy one
/// leaves them out of a snapshot rather than holding it back.
const REPLICATOR_WAIT: Duration = Duration::from_millis(500);

const PAGE: &str = include_str!("assets/view.html");
const SCRIPT: &str = include_str!("assets/view.js");
const STYLE: &str = include_str!("assets/view.css");

fn asset(body: &'static str, content_type: &'static str) -> Response {
    Response::new(200, body)
        .header("content-type", content_type)
        // The assets change with the binary only; a page from a member
        // of another version must not run a cached script.
        .header("cache-control", "no-cache")
}

pub(super) fn page(_: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    req.reply.send(asset(PAGE, "text/html; charset=utf-8"));
}

pub(super) fn script(_: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    req.reply
        .send(asset(SCRIPT, "text/javascript; charset=utf-8"));
}

pub(super) fn style(_: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    req.reply.send(asset(STYLE, "text/css; charset=utf-8"));
}

/// `GET /view/snapshot`: one snapshot, made now.
pub(super) fn snapshot(parts: Arc<Parts>, req: HttpRequest, system: SystemRef) {
    tokio::spawn(async move {
        let made = make(&parts, &system, &mut Shares::default()).await;
        req.reply.send(json(200, &made));
    });
}

/// Starts pushing snapshots to the sockets `listener` accepts (upgrades
/// on [`SOCKET_PATH`]; the listener hands every other request to the web
/// server).
pub(super) fn start_feed(parts: Arc<Parts>, system: &ActorSystem, listener: Box<dyn Listener>) {
    let (latest, _) = watch::channel(Bytes::new());
    let wake = Arc::new(Notify::new());
    if let Some(cluster) = &parts.cluster {
        let wake = Arc::clone(&wake);
        cluster.subscribe(system.spawn_fn(move |_: ClusterUpdate, _ctx| wake.notify_one()));
    }
    let system = SystemRef::clone(system);
    tokio::spawn(publish(parts, system, latest.clone(), Arc::clone(&wake)));
    tokio::spawn(accept(listener, latest, wake));
}

/// Makes a snapshot every [`EVERY`] and whenever woken (a cluster event, a
/// new socket), while anyone watches. While nobody does it holds no timer:
/// a pending timer makes the runtime park with a timeout, an hrtimer set
/// and cancelled in the kernel on every park (seen in W1's profile with a
/// 1 s timer per process; what it costs is within W1's noise, see
/// docs/benchmarks.md, issue 31's row).
async fn publish(
    parts: Arc<Parts>,
    system: SystemRef,
    latest: watch::Sender<Bytes>,
    wake: Arc<Notify>,
) {
    let mut shares = Shares::default();
    loop {
        if latest.receiver_count() == 0 {
            // A viewer's socket wakes it when it opens.
            wake.notified().await;
        } else {
            tokio::select! {
                () = tokio::time::sleep(EVERY) => {}
                () = wake.notified() => {}
            }
        }
        if latest.receiver_count() == 0 {
            continue;
        }
        let made = make(&parts, &system, &mut shares).await;
        match serde_json::to_vec(&made) {
            Ok(bytes) => {
                latest.send_replace(Bytes::from(bytes));
            }
            Err(e) => {
                tracing::warn!(target: "plexus::management", "live view: encoding a snapshot: {e}");
            }
        }
    }
}

async fn accept(listener: Box<dyn Listener>, latest: watch::Sender<Bytes>, wake: Arc<Notify>) {
    loop {
        match listener.accept().await {
            Ok(link) => {
                tracing::debug!(target: "plexus::management", peer = link.peer(), "live view socket opened");
                tokio::spawn(viewer(link, latest.subscribe(), Arc::clone(&wake)));
            }
            Err(plexus_transport::AcceptError::Closed { .. }) => return,
            // A refused upgrade (a bad request, a silent client): that
            // connection's business, answered with its status already.
            Err(e) => tracing::debug!(target: "plexus::management", "live view socket: {e}"),
        }
    }
}

/// One socket: the latest snapshot now, then each new one.
async fn viewer(link: Link, mut latest: watch::Receiver<Bytes>, wake: Arc<Notify>) {
    let (tx, mut rx) = link.split();
    // A fresh snapshot at once, rather than at the next tick.
    wake.notify_one();
    let current = latest.borrow_and_update().clone();
    if !current.is_empty() && tx.send(current).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            changed = latest.changed() => {
                if changed.is_err() {
                    return;
                }
                let next = latest.borrow_and_update().clone();
                if tx.send(next).await.is_err() {
                    return;
                }
            }
            // The page sends nothing; this ends when the socket closes.
            received = rx.recv_message() => {
                if received.is_err() {
                    return;
                }
            }
        }
    }
}

/// The members' ring shares, kept while the ring is the same.
#[derive(Default)]
struct Shares {
    ring: Option<Arc<Ring>>,
    shares: Vec<RingShare>,
}

impl Shares {
    fn of(&mut self, ring: &Arc<Ring>) -> &[RingShare] {
        let same = self.ring.as_ref().is_some_and(|r| Arc::ptr_eq(r, ring));
        if !same {
            self.shares = estimate_shares(ring);
            self.ring = Some(Arc::clone(ring));
        }
        &self.shares
    }
}

/// Each ring member's share of [`SAMPLE_KEYS`] keys.
fn estimate_shares(ring: &Ring) -> Vec<RingShare> {
    let mut counts: BTreeMap<&str, u32> = ring.members().iter().map(|m| (&**m, 0)).collect();
    for i in 0..SAMPLE_KEYS {
        let key = format!("plexus-view-{i}");
        if let Some(owner) = ring.owner(key.as_bytes()) {
            *counts.entry(owner).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .map(|(address, n)| RingShare {
            address: address.to_owned(),
            share: f64::from(n) / f64::from(SAMPLE_KEYS),
        })
        .collect()
}

/// What the page shows. See the [module docs](self).
#[derive(Serialize)]
pub(super) struct Snapshot {
    /// When it was made, in milliseconds since the Unix epoch.
    at_ms: u64,
    /// Which figures are whose.
    scope: &'static str,
    /// This node's id.
    node: String,
    cluster: Option<String>,
    /// This member's address.
    this: Option<String>,
    members: Vec<MemberView>,
    ring: Option<RingView>,
    membership: Option<MembershipView>,
    links: Vec<LinkView>,
    lanes: Vec<LaneView>,
    actors: ActorsView,
    dead_letters: u64,
    replicator: Option<ReplicatorView>,
}

#[derive(Serialize)]
struct MemberView {
    address: String,
    state: &'static str,
    incarnation: u64,
    life: u64,
    up_number: u64,
    weight: u16,
}

#[derive(Serialize, Clone)]
struct RingShare {
    address: String,
    share: f64,
}

#[derive(Serialize)]
struct RingView {
    vnodes: usize,
    sampled_keys: u32,
    shares: Vec<RingShare>,
}

#[derive(Serialize)]
struct MembershipView {
    packets_sent: u64,
    bytes_sent: u64,
    suspicions_raised: u64,
    refutations: u64,
    stalls_noticed: u64,
    packets_refused: u64,
    unreachable_reports: u64,
}

#[derive(Serialize)]
struct LinkView {
    node: String,
    scheme: String,
    peer: String,
    dropped: u64,
    encrypted: bool,
    send_buffer_full: u64,
}

#[derive(Serialize)]
struct LaneView {
    node: String,
    scheme: String,
    lane: &'static str,
    frames: u64,
    carriers: Vec<CarrierView>,
}

#[derive(Serialize)]
struct CarrierView {
    scheme: String,
    peer: String,
    queued_bytes: usize,
    share: f64,
    goodput_bytes_per_s: Option<f64>,
    delay_ms: Option<f64>,
    frames: Option<u64>,
}

#[derive(Serialize)]
struct ActorsView {
    live: usize,
    registered: usize,
    published: usize,
    deepest: Vec<MailboxView>,
}

#[derive(Serialize)]
struct MailboxView {
    actor: String,
    queued: usize,
}

#[derive(Serialize)]
struct ReplicatorView {
    keys: usize,
    members: usize,
    packets_sent: u64,
    bytes_sent: u64,
    packets_received: u64,
    bytes_received: u64,
    entries_merged: u64,
    anti_entropy_rounds: u64,
}

const SCOPE: &str = "members and ring: the whole cluster as this member sees it; membership, \
                     links, lanes, actors, dead letters and replicator: this node's";

async fn make(parts: &Parts, system: &SystemRef, shares: &mut Shares) -> Snapshot {
    let at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (cluster, this, members, ring, membership) = match &parts.cluster {
        Some(c) => cluster_part(c, shares),
        None => (None, None, Vec::new(), None, None),
    };
    let (links, lanes, published) = match &parts.node {
        Some(node) => (
            node.link_stats()
                .into_iter()
                .map(|l| LinkView {
                    node: l.node.to_string(),
                    scheme: l.scheme,
                    peer: l.peer,
                    dropped: l.stats.dropped,
                    encrypted: l.stats.encryption.is_some(),
                    send_buffer_full: l.send_buffer_full,
                })
                .collect(),
            node.lane_stats()
                .into_iter()
                .map(|l| LaneView {
                    node: l.node.to_string(),
                    scheme: l.scheme,
                    lane: l.lane.name(),
                    frames: l.frames,
                    carriers: l
                        .carriers
                        .into_iter()
                        .map(|c| CarrierView {
                            scheme: c.scheme,
                            peer: c.peer,
                            queued_bytes: c.queued_bytes,
                            share: c.share,
                            goodput_bytes_per_s: c.goodput_bytes_per_s,
                            delay_ms: c.delay.map(|d| d.as_secs_f64() * 1e3),
                            frames: c.frames,
                        })
                        .collect(),
                })
                .collect(),
            node.published().len(),
        ),
        None => (Vec::new(), Vec::new(), 0),
    };
    let replicator = match &parts.data {
        Some(data) => tokio::time::timeout(REPLICATOR_WAIT, data.stats())
            .await
            .ok()
            .map(|s| ReplicatorView {
                keys: s.keys,
                members: s.members,
                packets_sent: s.packets_sent,
                bytes_sent: s.bytes_sent,
                packets_received: s.packets_received,
                bytes_received: s.bytes_received,
                entries_merged: s.entries_merged,
                anti_entropy_rounds: s.anti_entropy_rounds,
            }),
        None => None,
    };
    Snapshot {
        at_ms,
        scope: SCOPE,
        node: system.node_id().to_string(),
        cluster,
        this,
        members,
        ring,
        membership,
        links,
        lanes,
        actors: ActorsView {
            live: system.live_actors(),
            registered: system.registered(),
            published,
            deepest: system
                .deepest_mailboxes(DEEPEST)
                .into_iter()
                .map(|(id, queued)| MailboxView {
                    actor: id.to_string(),
                    queued,
                })
                .collect(),
        },
        dead_letters: system.dead_letters().count(),
        replicator,
    }
}

type ClusterPart = (
    Option<String>,
    Option<String>,
    Vec<MemberView>,
    Option<RingView>,
    Option<MembershipView>,
);

fn cluster_part(cluster: &Cluster, shares: &mut Shares) -> ClusterPart {
    let (local, list) = super::member_list(cluster);
    let members = list
        .iter()
        .map(|m| MemberView {
            address: m.address.to_string(),
            state: m.state.name(),
            incarnation: m.incarnation,
            life: m.life,
            up_number: m.up_number,
            weight: m.weight,
        })
        .collect();
    let ring = cluster.ring();
    let s = cluster.stats();
    (
        Some(cluster.name().to_owned()),
        Some(local.address.to_string()),
        members,
        Some(RingView {
            vnodes: ring.vnode_count(),
            sampled_keys: SAMPLE_KEYS,
            shares: shares.of(&ring).to_vec(),
        }),
        Some(MembershipView {
            packets_sent: s.packets_sent,
            bytes_sent: s.bytes_sent,
            suspicions_raised: s.suspicions_raised,
            refutations: s.refutations,
            stalls_noticed: s.stalls_noticed,
            packets_refused: s.packets_refused,
            unreachable_reports: s.unreachable_reports,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_equal_members_are_near_a_third_and_sum_to_one() {
        let members: Vec<Arc<str>> = ["tcp://a:1", "tcp://b:1", "tcp://c:1"]
            .into_iter()
            .map(Arc::from)
            .collect();
        let ring = Ring::new(members.iter().map(|m| (m, 1)), 128, 5);
        let shares = estimate_shares(&ring);
        assert_eq!(shares.len(), 3);
        let sum: f64 = shares.iter().map(|s| s.share).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
        for s in &shares {
            assert!(
                (0.25..0.42).contains(&s.share),
                "{}: {}",
                s.address,
                s.share
            );
        }
    }

    /// Holds its first message until told, so the rest queue up.
    struct Stuck(Arc<Notify>);

    impl plexus_core::Actor for Stuck {
        type Msg = ();

        async fn handle(&mut self, (): (), _ctx: &mut plexus_core::Context<()>) {
            self.0.notified().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_of_a_bare_node_counts_actors_and_lists_the_deepest_mailboxes_first() {
        let system = ActorSystem::new();
        let release = Arc::new(Notify::new());
        let (deep, shallow) = (
            system.spawn(Stuck(Arc::clone(&release))),
            system.spawn(Stuck(Arc::clone(&release))),
        );
        for _ in 0..10 {
            deep.tell(());
        }
        for _ in 0..5 {
            shallow.tell(());
        }
        let parts = Parts {
            token: None,
            node: None,
            cluster: None,
            data: None,
            sharding: None,
            metrics: None,
            on_scrape: Vec::new(),
        };
        let made = make(&parts, &system, &mut Shares::default()).await;
        let v = serde_json::to_value(&made).expect("a snapshot encodes");
        assert_eq!(v["actors"]["live"], 2);
        assert!(v["members"].as_array().is_some_and(Vec::is_empty), "{v}");
        assert!(v["ring"].is_null() && v["replicator"].is_null(), "{v}");
        let deepest = v["actors"]["deepest"].as_array().expect("a list");
        // Each has taken its first message, or is about to.
        assert_eq!(deepest.len(), 2, "{v}");
        assert_eq!(deepest[0]["actor"], deep.id().to_string());
        assert!(
            (9..=10).contains(&deepest[0]["queued"].as_u64().unwrap_or(0)),
            "{v}"
        );
        assert_eq!(deepest[1]["actor"], shallow.id().to_string());
        assert!(
            (4..=5).contains(&deepest[1]["queued"].as_u64().unwrap_or(0)),
            "{v}"
        );
        release.notify_waiters();
    }

    #[test]
    fn the_page_loads_only_its_own_assets() {
        for asset in [PAGE, SCRIPT, STYLE] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
        }
        assert!(PAGE.contains("/view/view.js") && PAGE.contains("/view/view.css"));
        assert!(SCRIPT.contains(SOCKET_PATH));
    }
}
