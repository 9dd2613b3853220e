//! The node: a process-level handle that listens on URIs, publishes local
//! actors by name, and resolves or forges refs to actors on other nodes.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use plexus_core::remote::{self, Control, Inbound, PendingReply, RemoteMessage, Watcher};
use plexus_core::{ActorId, ActorRef, Lane, LinkCause, NodeId, SystemRef};
use plexus_net::StackSpec;
use plexus_transport::{AcceptError, Dialer, LinkStats, Strand, Transport};
use rustc_hash::FxHashMap;
use tokio::task::AbortHandle;
use tracing::Instrument as _;

use crate::config::NodeConfig;
use crate::error::{LinkError, NodeError, PublishError, ResolveError};
use crate::lanes::LanePlan;
use crate::peer::{self, LaneCandidate, Peer};
use crate::proxy::RemoteActor;
use crate::uri::Uri;
use crate::wire::{GoodbyeCode, Resolution, MAX_NAME};

/// A node: the actor system of this process as seen by other nodes.
///
/// ```no_run
/// # use plexus_core::ActorSystem;
/// # use plexus_remote::{Node, NodeConfig};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping(u64);
/// # plexus_core::remote_message!(Ping = "doc.Ping");
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let system = ActorSystem::new();
/// let node = Node::start(&system, NodeConfig::default().cookie("s3cret"))?;
/// node.listen("tcp://127.0.0.1:4000").await?;
/// let pong = node.resolve::<Ping>("tcp://127.0.0.1:4001/pong").await?;
/// pong.tell(Ping(1));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
}

/// The counters of one link of a node; see [`Node::link_stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerLinkStats {
    /// The node at the other end.
    pub node: NodeId,
    /// The scheme of the link.
    pub scheme: String,
    /// The link's peer address, with its transport (`udp://127.0.0.1:4000`).
    pub peer: String,
    /// The link's counters.
    pub stats: LinkStats,
    /// Messages to the node refused because the link's send buffer (or,
    /// while it was connecting, the frames held for it) was full: each a
    /// dead letter ([`DeadLetterReason::SendBufferFull`](plexus_core::DeadLetterReason::SendBufferFull))
    /// or a failed receipt. Counted over the peer's life, across reconnects.
    pub send_buffer_full: u64,
    /// Answers (`RECEIPT`, `RESOLVED`, `DOWN`) from the node for nothing
    /// that waited: answered already, failed when a link was lost, or
    /// never asked (a buggy or hostile peer). Dropped and counted here.
    pub stray_answers: u64,
}

/// What one lane of one peer link carries; see [`Node::lane_stats`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LaneStats {
    /// The node at the other end.
    pub node: NodeId,
    /// The scheme of the session's primary link (the URI's).
    pub scheme: String,
    /// The lane.
    pub lane: Lane,
    /// Frames sent on the lane in this session.
    pub frames: u64,
    /// The links that carry it: the primary link for a lane without links
    /// of its own, its link, or an adaptive lane's candidates.
    pub carriers: Vec<LaneCandidate>,
}

pub(crate) struct NodeInner {
    pub(crate) system: SystemRef,
    pub(crate) id: NodeId,
    pub(crate) config: NodeConfig,
    /// Every scheme's spec, fit to its transport.
    schemes: HashMap<String, Scheme>,
    /// Which schemes carry which lane.
    pub(crate) lanes: LanePlan,
    /// Sessions whose lane connections are being bound (accepted primary
    /// links waiting for `LANES`), by session.
    pub(crate) binding: Mutex<HashMap<u64, Binding>>,
    /// Woken when a session starts binding.
    pub(crate) binding_started: tokio::sync::Notify,
    listeners: Mutex<Vec<AbortHandle>>,
    listen_uris: RwLock<Vec<String>>,
    /// Dialers by scheme: a listener's (UDP and QUIC share one socket
    /// between listening and dialling), or one made on first use.
    dialers: Mutex<HashMap<String, Arc<dyn Dialer>>>,
    pub(crate) peers: Mutex<Peers>,
    exports: Mutex<Exports>,
    published: Mutex<HashMap<String, Published>>,
    /// What layers above keep on the node, by type ([`Node::set_extension`]).
    pub(crate) extensions: Mutex<HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>>,
    replies: Mutex<FxHashMap<u64, PendingAsk>>,
    proxies: Mutex<FxHashMap<ActorId, std::sync::Weak<RemoteActor>>>,
    next_id: AtomicU64,
    pub(crate) shutting_down: AtomicBool,
    /// The runtime the node was started on: tasks it spawns (connects,
    /// forged resolves) run there, whichever thread asks.
    runtime: tokio::runtime::Handle,
}

/// An accepted session waiting for its lane connections.
pub(crate) struct Binding {
    /// The node the session is with.
    pub(crate) node: NodeId,
    /// The lane connections bound so far.
    pub(crate) links: Vec<crate::peer::BoundLink>,
}

/// A scheme: its stack spec and the transport that carries it.
pub(crate) struct Scheme {
    pub(crate) spec: StackSpec,
    pub(crate) transport: Arc<dyn Transport>,
}

#[derive(Default)]
pub(crate) struct Peers {
    /// Peers we dial, by scheme and address.
    pub(crate) by_dial: HashMap<(String, String), Arc<Peer>>,
    /// Connected (or once connected) peers, by node and scheme.
    pub(crate) by_node: HashMap<(NodeId, String), Arc<Peer>>,
}

#[derive(Default)]
struct Exports {
    inbound: FxHashMap<(u64, u64), Arc<dyn Inbound>>,
    controls: FxHashMap<u64, Arc<dyn Control>>,
}

/// An ask waiting for a reply from the node it names.
type PendingAsk = (NodeId, Box<dyn PendingReply>);

struct Published {
    serial: u64,
    types: Vec<(u64, &'static str)>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No user code runs under these locks; a poisoned lock's data is
    // consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Above this many pending replies, abandoned ones are pruned on insert.
const REPLY_PRUNE: usize = 1024;

impl Node {
    /// Starts a node for `system` (not yet listening: see
    /// [`listen`](Self::listen); a node that only dials out needs none).
    ///
    /// # Errors
    ///
    /// [`NodeError::Spec`] if a configured scheme's stack is invalid,
    /// [`NodeError::IdentityMismatch`] if the node has a TLS certificate
    /// and the system's id does not have the part it certifies (see
    /// [`NodeConfig::certified_node_id`]), [`NodeError::NoRuntime`]
    /// outside a tokio runtime.
    pub fn start(system: &SystemRef, config: NodeConfig) -> Result<Node, NodeError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NodeError::NoRuntime)?;
        if let Some(certified) = config.certified_node_id() {
            let certifies =
                crate::identity::certifies(certified.as_u64(), system.node_id().as_u64());
            if !certifies && !config.danger_unchecked_identity {
                return Err(NodeError::IdentityMismatch {
                    system: system.node_id(),
                    certified,
                });
            }
        }
        let transports = config.transport_registry();
        let names: BTreeSet<&str> = config
            .schemes
            .keys()
            .map(String::as_str)
            .chain(transports.iter().map(|t| t.name()))
            .collect();
        let mut schemes = HashMap::new();
        for scheme in names {
            let spec_error = |source| NodeError::Spec {
                scheme: scheme.to_owned(),
                source,
            };
            let text = config
                .spec_text(scheme, &transports)
                .expect("a configured scheme or a transport's name");
            let spec = config.parse_spec(text).map_err(spec_error)?;
            let (transport, spec) = transports.fit(&spec).map_err(spec_error)?;
            schemes.insert(scheme.to_owned(), Scheme { spec, transport });
        }
        let lanes = LanePlan::new(&config.lanes, &schemes)?;
        Ok(Node {
            inner: Arc::new(NodeInner {
                id: system.node_id(),
                system: system.clone(),
                config,
                schemes,
                lanes,
                binding: Mutex::default(),
                binding_started: tokio::sync::Notify::new(),
                listeners: Mutex::default(),
                listen_uris: RwLock::default(),
                dialers: Mutex::default(),
                peers: Mutex::default(),
                exports: Mutex::default(),
                published: Mutex::default(),
                extensions: Mutex::default(),
                replies: Mutex::default(),
                proxies: Mutex::default(),
                next_id: AtomicU64::new(1),
                shutting_down: AtomicBool::new(false),
                runtime,
            }),
        })
    }

    /// This node's id (that of its actor system).
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// The URIs this node listens on (with ports resolved).
    pub fn listen_uris(&self) -> Vec<String> {
        self.inner
            .listen_uris
            .read()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Listens on `uri` (`tcp://127.0.0.1:4000`, `udp://0.0.0.0:0`,
    /// `uds:///tmp/n1.sock`, `mem://n1`, or a configured scheme). Returns
    /// the URI actually bound (port 0 replaced by the port chosen).
    ///
    /// # Errors
    ///
    /// [`NodeError`] naming the URI and the cause.
    pub async fn listen(&self, uri: &str) -> Result<String, NodeError> {
        let parsed = Uri::parse(uri)?;
        let scheme =
            self.inner
                .schemes
                .get(&parsed.scheme)
                .ok_or_else(|| NodeError::UnknownScheme {
                    uri: uri.to_owned(),
                    scheme: parsed.scheme.clone(),
                })?;
        let listener = scheme
            .transport
            .listen(&scheme.spec, &parsed.addr, self.inner.config.link)
            .await
            .map_err(|source| NodeError::Bind {
                uri: uri.to_owned(),
                source,
            })?;
        let bound_uri = format!("{}://{}", parsed.scheme, listener.local_addr());
        lock(&self.inner.dialers).insert(parsed.scheme.clone(), listener.dialer());
        if let Ok(mut v) = self.inner.listen_uris.write() {
            v.push(bound_uri.clone());
        }
        let inner = self.inner.clone();
        let scheme = parsed.scheme.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok(link) => {
                        let inner = inner.clone();
                        let scheme = scheme.clone();
                        // The handshake and the session's setup, not the
                        // session's traffic (its tasks are spawned outside
                        // this span).
                        let span = tracing::info_span!(
                            target: "plexus::remote",
                            "accept",
                            node = %inner.id,
                            %scheme,
                            peer = %link.peer(),
                        );
                        tokio::spawn(
                            async move { peer::accept(inner, scheme, link).await }.instrument(span),
                        );
                    }
                    // A peer refused during its security handshake or its
                    // protocol upgrade (logged by the transport) costs only
                    // its own connection.
                    Err(AcceptError::Handshake { .. } | AcceptError::Upgrade { .. }) => {}
                    Err(e) => {
                        tracing::warn!(target: "plexus::remote", "listener stopped: {e}");
                        break;
                    }
                }
            }
        });
        lock(&self.inner.listeners).push(task.abort_handle());
        tracing::info!(target: "plexus::remote", node = %self.inner.id, uri = %bound_uri, "listening");
        Ok(bound_uri)
    }

    /// The names published on this node, sorted, each with the message
    /// types its actor takes (what a management endpoint lists).
    pub fn published(&self) -> Vec<(String, Vec<&'static str>)> {
        let published = lock(&self.inner.published);
        let mut names: Vec<(String, Vec<&'static str>)> = published
            .iter()
            .map(|(name, p)| (name.clone(), p.types.iter().map(|(_, t)| *t).collect()))
            .collect();
        names.sort();
        names
    }

    /// Publishes `actor` under `name`, so other nodes can resolve
    /// `scheme://this-node/name` as `ActorRef<M>`. Publishing the same
    /// actor again under the same name with another message type (e.g. a
    /// narrowed ref) adds that type.
    ///
    /// # Errors
    ///
    /// [`PublishError`] if the name is taken by another actor, malformed,
    /// or the actor has stopped.
    pub fn publish<M: RemoteMessage>(
        &self,
        actor: &ActorRef<M>,
        name: &str,
    ) -> Result<(), PublishError> {
        if name.is_empty() || name.contains('/') || name.len() > MAX_NAME {
            return Err(PublishError::BadName { name: name.into() });
        }
        if !actor.is_alive() {
            return Err(PublishError::Stopped { name: name.into() });
        }
        let mut published = lock(&self.inner.published);
        match published.get_mut(name) {
            Some(p) if p.serial != actor.id().serial() => {
                return Err(PublishError::NameTaken { name: name.into() })
            }
            Some(p) => {
                if !p.types.iter().any(|(t, _)| *t == M::TYPE_ID) {
                    p.types.push((M::TYPE_ID, M::TYPE_NAME));
                }
            }
            None => {
                published.insert(
                    name.to_owned(),
                    Published {
                        serial: actor.id().serial(),
                        types: vec![(M::TYPE_ID, M::TYPE_NAME)],
                    },
                );
            }
        }
        drop(published);
        let r = actor.clone();
        self.inner
            .export(actor.id(), M::TYPE_ID, &|| remote::inbound(r.clone()));
        // Unpublish when the actor stops.
        let weak = Arc::downgrade(&self.inner);
        let name = name.to_owned();
        let serial = actor.id().serial();
        remote::control_of(actor).watch(Watcher::Callback(Box::new(move |_| {
            if let Some(inner) = weak.upgrade() {
                let mut p = lock(&inner.published);
                if p.get(&name).is_some_and(|p| p.serial == serial) {
                    p.remove(&name);
                }
            }
        })));
        Ok(())
    }

    /// Keeps `value` on the node under its type, replacing one kept
    /// before: a layer above finds it while messages are encoded or decoded
    /// (`plexus_core::remote::context_extension`), to turn its handles
    /// inside messages back into live ones. Keep no handle to the node in
    /// it (the node would keep itself).
    pub fn set_extension<T: std::any::Any + Send + Sync>(&self, value: Arc<T>) {
        lock(&self.inner.extensions).insert(std::any::TypeId::of::<T>(), value);
    }

    /// Removes the extension of type `T`.
    pub fn remove_extension<T: std::any::Any + Send + Sync>(&self) {
        lock(&self.inner.extensions).remove(&std::any::TypeId::of::<T>());
    }

    /// Removes a published name.
    pub fn unpublish(&self, name: &str) -> bool {
        lock(&self.inner.published).remove(name).is_some()
    }

    /// Resolves an actor URI (`tcp://host:4000/pong`) to a ref, after the
    /// remote node confirmed that the name exists and accepts `M`.
    ///
    /// # Errors
    ///
    /// [`ResolveError`]: bad URI, unknown scheme, cannot connect (with the
    /// OS error), handshake failed (why), no such name, wrong message type
    /// (expected vs actual), timed out.
    pub async fn resolve<M: RemoteMessage>(&self, uri: &str) -> Result<ActorRef<M>, ResolveError> {
        let span =
            tracing::info_span!(target: "plexus::remote", "resolve", node = %self.inner.id, %uri);
        self.resolve_in_span(uri).instrument(span).await
    }

    /// [`resolve`](Self::resolve), in its span.
    async fn resolve_in_span<M: RemoteMessage>(
        &self,
        uri: &str,
    ) -> Result<ActorRef<M>, ResolveError> {
        let (parsed, name) = self.actor_uri(uri)?;
        let peer = self.inner.dial_peer(&parsed.scheme, &parsed.addr, None);
        let link_err = |source| ResolveError::Link {
            uri: uri.to_owned(),
            source,
        };
        let remote_node = peer.wait_up().await.map_err(link_err)?;
        let timeout = self.inner.config.request_timeout;
        let answer = peer
            .resolve(
                peer::Carrier::Lane(Lane::Control),
                Strand::ZERO,
                M::TYPE_ID,
                M::TYPE_NAME,
                &name,
            )
            .map_err(link_err)?;
        let resolution = match tokio::time::timeout(timeout, answer).await {
            Err(_) => {
                return Err(ResolveError::Timeout {
                    uri: uri.to_owned(),
                    timeout,
                })
            }
            Ok(Err(_)) => return Err(link_err(crate::error::LinkError::ShuttingDown)),
            Ok(Ok(Err(e))) => return Err(link_err(e)),
            Ok(Ok(Ok(r))) => r,
        };
        match resolution {
            Resolution::Found(serial) => {
                let id = ActorId::new(remote_node, serial);
                Ok(remote::remote_ref(self.inner.proxy(id, &peer, None)))
            }
            Resolution::NoSuchName => Err(ResolveError::NoSuchName {
                uri: uri.to_owned(),
                name,
            }),
            Resolution::WrongType { actual } => Err(ResolveError::WrongType {
                uri: uri.to_owned(),
                expected: M::TYPE_NAME,
                actual,
            }),
        }
    }

    /// A ref to the actor named by `uri`, without a round trip. Its first
    /// use connects and resolves in the background; messages sent meanwhile
    /// are addressed by name. If the name turns out not to exist (or not to
    /// accept `M`), the ref stops: monitors see a `Down` saying why, and
    /// later messages are dead letters.
    ///
    /// A forged ref's id is derived from its URI (node id 0), so it does not
    /// compare equal to a resolved ref of the same actor.
    ///
    /// # Errors
    ///
    /// [`ResolveError::BadUri`] or [`ResolveError::UnknownScheme`].
    pub fn forge<M: RemoteMessage>(&self, uri: &str) -> Result<ActorRef<M>, ResolveError> {
        let (parsed, name) = self.actor_uri(uri)?;
        let peer = self.inner.dial_peer(&parsed.scheme, &parsed.addr, None);
        let id = ActorId::new(NodeId::from_u64(0), remote::type_id_of(uri));
        let proxy = RemoteActor::forged::<M>(&self.inner, id, peer, name, uri.to_owned());
        Ok(remote::remote_ref(proxy))
    }

    fn actor_uri(&self, uri: &str) -> Result<(Uri, String), ResolveError> {
        let parsed = Uri::parse(uri).map_err(|e| ResolveError::BadUri {
            uri: uri.to_owned(),
            why: e.why.to_owned(),
        })?;
        let Some(name) = parsed.name.clone() else {
            return Err(ResolveError::BadUri {
                uri: uri.to_owned(),
                why: "the URI names no actor (expected scheme://address/name)".into(),
            });
        };
        if !self.inner.schemes.contains_key(&parsed.scheme) {
            return Err(ResolveError::UnknownScheme {
                uri: uri.to_owned(),
                scheme: parsed.scheme,
            });
        }
        Ok((parsed, name))
    }

    /// Ids of the nodes this node has a working link to.
    pub fn connected_nodes(&self) -> Vec<NodeId> {
        let peers = lock(&self.inner.peers);
        let mut v: Vec<NodeId> = peers
            .by_node
            .iter()
            .filter(|(_, p)| p.is_up())
            .map(|((n, _), _)| *n)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Working links to other nodes (one per node and scheme).
    pub fn link_count(&self) -> usize {
        let peers = lock(&self.inner.peers);
        peers.by_node.values().filter(|p| p.is_up()).count()
    }

    /// Counters of every working link (one per node and scheme): e.g. how
    /// many datagrams an encrypted UDP link dropped as tampered
    /// (`encryption.bad_tag`) or replayed (`encryption.replayed`). See
    /// [`LinkStats`] for when they are refreshed.
    pub fn link_stats(&self) -> Vec<PeerLinkStats> {
        let peers = lock(&self.inner.peers);
        let mut v: Vec<PeerLinkStats> = peers
            .by_node
            .iter()
            .filter_map(|((node, scheme), p)| {
                let (peer, stats, send_buffer_full, stray_answers) = p.link_stats()?;
                Some(PeerLinkStats {
                    node: *node,
                    scheme: scheme.clone(),
                    peer,
                    stats,
                    send_buffer_full,
                    stray_answers,
                })
            })
            .collect();
        v.sort_by(|a, b| (a.node, &a.scheme).cmp(&(b.node, &b.scheme)));
        v
    }

    /// What every lane of every working session carries: its links, their
    /// queues, and on an adaptive lane the current split with each
    /// candidate's goodput and delay as the learner estimates them.
    pub fn lane_stats(&self) -> Vec<LaneStats> {
        let peers = lock(&self.inner.peers);
        let mut v: Vec<LaneStats> = peers
            .by_node
            .iter()
            .filter_map(|((node, scheme), p)| Some((*node, scheme.clone(), p.lane_stats()?)))
            .flat_map(|(node, scheme, lanes)| {
                lanes
                    .into_iter()
                    .map(move |(lane, frames, carriers)| LaneStats {
                        node,
                        scheme: scheme.clone(),
                        lane,
                        frames,
                        carriers,
                    })
            })
            .collect();
        v.sort_by(|a, b| (a.node, &a.scheme, a.lane).cmp(&(b.node, &b.scheme, b.lane)));
        v
    }

    /// Says goodbye to every peer, closes every link and listener. Remote
    /// monitors of this node's actors see `NodeDown`.
    pub async fn shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        for l in lock(&self.inner.listeners).drain(..) {
            l.abort();
        }
        let peers: Vec<Arc<Peer>> = {
            let p = lock(&self.inner.peers);
            p.by_node
                .values()
                .chain(p.by_dial.values())
                .cloned()
                .collect()
        };
        for p in peers {
            p.goodbye(GoodbyeCode::Shutdown).await;
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.inner.id)
            .field("listen", &self.listen_uris())
            .finish()
    }
}

impl NodeInner {
    /// What the stack of `scheme` guarantees.
    pub(crate) fn scheme_guarantees(&self, scheme: &str) -> plexus_net::Guarantees {
        self.schemes
            .get(scheme)
            .and_then(|s| s.spec.guarantees())
            .unwrap_or(plexus_net::Guarantees::NONE)
    }

    /// What the stack of `lane` guarantees towards a peer whose primary
    /// link is of `primary` scheme.
    pub(crate) fn lane_guarantees(&self, lane: Lane, primary: &str) -> plexus_net::Guarantees {
        self.lanes.guarantees(lane, primary, &self.schemes)
    }

    /// The lane `properties` pick for `actor`, reached over a `primary`
    /// link, if its stack honours them.
    pub(crate) fn route(
        &self,
        actor: ActorId,
        properties: &plexus_core::MessageProperties,
        primary: &str,
    ) -> Result<Lane, plexus_core::RouteError> {
        self.lanes.route(actor, properties, primary, &self.schemes)
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn listen_uris(&self) -> Vec<String> {
        self.listen_uris
            .read()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// The URI peers reach us on for `scheme` (empty if we do not listen on
    /// it: then only existing links lead here).
    pub(crate) fn listen_uri_for(&self, scheme: &str) -> String {
        // Called for every ref sent inside a message: one copy, of the
        // match, and no other allocation.
        let Ok(uris) = self.listen_uris.read() else {
            return String::new();
        };
        uris.iter()
            .find(|u| {
                u.strip_prefix(scheme)
                    .is_some_and(|rest| rest.starts_with("://"))
            })
            .cloned()
            .unwrap_or_default()
    }

    /// The dialer links of `scheme` go out through: the listener's, or
    /// one made on first use.
    pub(crate) async fn dialer(&self, scheme: &str) -> Result<Arc<dyn Dialer>, LinkError> {
        if let Some(dialer) = lock(&self.dialers).get(scheme) {
            return Ok(dialer.clone());
        }
        let scheme_of = self
            .schemes
            .get(scheme)
            .ok_or_else(|| LinkError::UnknownScheme(scheme.to_owned()))?;
        let dialer = scheme_of
            .transport
            .dialer(&scheme_of.spec, self.config.link)
            .await
            .map_err(|e| LinkError::Dialer(Arc::new(e)))?;
        Ok(lock(&self.dialers)
            .entry(scheme.to_owned())
            .or_insert(dialer)
            .clone())
    }

    /// The peer to dial at `scheme://addr` (created idle if new), and
    /// connecting.
    pub(crate) fn dial_peer(
        self: &Arc<Self>,
        scheme: &str,
        addr: &str,
        node: Option<NodeId>,
    ) -> Arc<Peer> {
        let mut peers = lock(&self.peers);
        if let Some(n) = node {
            if let Some(p) = peers.by_node.get(&(n, scheme.to_owned())) {
                return p.clone();
            }
        }
        let key = (scheme.to_owned(), addr.to_owned());
        if peers
            .by_dial
            .get(&key)
            .is_none_or(|p| !p.canonical().is_up())
        {
            // A node that dialled us and listens at `addr`: its link serves
            // (a second one to the same address would be refused by a
            // datagram endpoint, and is a waste over a stream). Also when
            // a dial of `addr` is down or under way: over UDP it fails
            // while that link lives (both sides' first packets crossed, or
            // an earlier dial failed), and reusing it would fail every
            // ref forged from then on.
            if let Some(p) = peers
                .by_node
                .iter()
                .find(|((_, s), p)| s == scheme && p.is_up() && p.dials(addr))
                .map(|(_, p)| p.clone())
            {
                return p;
            }
        }
        let peer = peers
            .by_dial
            .entry(key)
            .or_insert_with(|| Peer::new(self, scheme, Some(addr.to_owned())))
            .clone();
        drop(peers);
        peer.ensure_connected();
        peer
    }

    /// The peer that leads to `node`: a connected one (preferring
    /// `scheme`), else one dialled at `addr`.
    pub(crate) fn peer_for(
        self: &Arc<Self>,
        node: NodeId,
        scheme: &str,
        addr: &str,
    ) -> Option<Arc<Peer>> {
        {
            let peers = lock(&self.peers);
            if let Some(p) = peers.by_node.get(&(node, scheme.to_owned())) {
                return Some(p.clone());
            }
            if let Some((_, p)) = peers.by_node.iter().find(|((n, _), _)| *n == node) {
                return Some(p.clone());
            }
        }
        let uri = Uri::parse(addr).ok()?;
        self.schemes
            .contains_key(&uri.scheme)
            .then(|| self.dial_peer(&uri.scheme, &uri.addr, Some(node)))
    }

    /// The proxy of a remote actor (shared while anyone holds it).
    pub(crate) fn proxy(
        self: &Arc<Self>,
        id: ActorId,
        peer: &Arc<Peer>,
        addr: Option<String>,
    ) -> Arc<RemoteActor> {
        let mut proxies = lock(&self.proxies);
        if let Some(p) = proxies.get(&id).and_then(std::sync::Weak::upgrade) {
            return p;
        }
        if proxies.len() > 1024 && proxies.len().is_power_of_two() {
            proxies.retain(|_, w| w.strong_count() > 0);
        }
        let addr = addr.unwrap_or_else(|| peer.dial_uri());
        let p = RemoteActor::resolved(self, id, peer.clone(), addr);
        proxies.insert(id, Arc::downgrade(&p));
        p
    }

    /// Exports a local actor under a message type (idempotent).
    pub(crate) fn export(
        self: &Arc<Self>,
        id: ActorId,
        type_id: u64,
        make: &dyn Fn() -> Arc<dyn Inbound>,
    ) {
        let mut ex = lock(&self.exports);
        if ex.inbound.contains_key(&(id.serial(), type_id)) {
            return;
        }
        let inbound = make();
        let control = inbound.control();
        let first = !ex.controls.contains_key(&id.serial());
        ex.inbound.insert((id.serial(), type_id), inbound);
        ex.controls.insert(id.serial(), control.clone());
        drop(ex);
        if first {
            self.unexport_on_stop(&control);
        }
    }

    /// Makes a local actor addressable by serial for links, monitors and
    /// stops from other nodes.
    pub(crate) fn export_control(self: &Arc<Self>, control: Arc<dyn Control>) {
        let serial = control.id().serial();
        let mut ex = lock(&self.exports);
        if ex.controls.contains_key(&serial) {
            return;
        }
        ex.controls.insert(serial, control.clone());
        drop(ex);
        self.unexport_on_stop(&control);
    }

    /// Forgets every export of the actor behind `control` when it stops.
    fn unexport_on_stop(self: &Arc<Self>, control: &Arc<dyn Control>) {
        let weak = Arc::downgrade(self);
        let serial = control.id().serial();
        control.watch(Watcher::Callback(Box::new(move |_| {
            if let Some(inner) = weak.upgrade() {
                let mut ex = lock(&inner.exports);
                ex.inbound.retain(|(s, _), _| *s != serial);
                ex.controls.remove(&serial);
            }
        })));
    }

    pub(crate) fn inbound(&self, serial: u64, type_id: u64) -> Option<Arc<dyn Inbound>> {
        lock(&self.exports).inbound.get(&(serial, type_id)).cloned()
    }

    pub(crate) fn control(&self, serial: u64) -> Option<Arc<dyn Control>> {
        lock(&self.exports).controls.get(&serial).cloned()
    }

    pub(crate) fn resolve_name(&self, name: &str, type_id: u64) -> Resolution {
        let published = lock(&self.published);
        match published.get(name) {
            None => Resolution::NoSuchName,
            Some(p) if p.types.iter().any(|(t, _)| *t == type_id) => Resolution::Found(p.serial),
            Some(p) => Resolution::WrongType {
                actual: p
                    .types
                    .iter()
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        }
    }

    pub(crate) fn add_reply(&self, peer: NodeId, pending: Box<dyn PendingReply>) -> u64 {
        let id = self.next_id();
        let mut replies = lock(&self.replies);
        if replies.len() >= REPLY_PRUNE && replies.len().is_power_of_two() {
            replies.retain(|_, (_, p)| !p.is_abandoned());
        }
        replies.insert(id, (peer, pending));
        id
    }

    pub(crate) fn take_reply(&self, id: u64) -> Option<Box<dyn PendingReply>> {
        lock(&self.replies).remove(&id).map(|(_, p)| p)
    }

    pub(crate) fn system_runtime(&self) -> tokio::runtime::Handle {
        self.runtime.clone()
    }

    /// Fails every ask waiting on `node` (its reply senders are dropped).
    /// Fails the asks waiting for replies from `node`: its link was lost
    /// (or could not be made) for `cause`.
    pub(crate) fn fail_replies_of(&self, node: NodeId, cause: &LinkCause) {
        let failed: Vec<_> = {
            let mut replies = lock(&self.replies);
            let ids: Vec<u64> = replies
                .iter()
                .filter(|(_, (n, _))| *n == node)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| replies.remove(&id))
                .collect()
        };
        for (_, pending) in failed {
            pending.node_unreachable(node, cause.clone());
        }
    }
}
