//! Node configuration: cookie, schemes and their stacks, timeouts, bounds.

use std::collections::HashMap;
use std::time::Duration;

use plexus_core::NodeId;
use plexus_net::{LayerRegistry, StackSpec};
#[cfg(feature = "quic")]
use plexus_transport::quic::QuicConfig;
#[cfg(feature = "tls")]
use plexus_transport::tls::TlsConfig;
use plexus_transport::{LinkConfig, TransportRegistry};

/// How a node connects, authenticates and bounds its links.
///
/// Schemes map URI schemes to stack specs; a spec's first word names its
/// transport, found in the node's [`transports`](Self::transports). Every
/// transport is also a scheme of its own name with the transport's default
/// stack, unless [`scheme`](Self::scheme) maps the name otherwise. Built
/// in:
///
/// | scheme | stack |
/// | --- | --- |
/// | `tcp` | `tcp / framing` |
/// | `udp` | `udp / heartbeat / slicing / delivery / ordering / batching` |
/// | `tls` | `tls / framing` (needs [`tls`](Self::tls)) |
/// | `quic` | `quic` (needs [`tls`](Self::tls); one stream per strand) |
/// | `uds` | `uds / framing` |
/// | `mem` | `mem / ordering` |
///
/// Add your own with [`scheme`](Self::scheme), e.g.
/// `config.scheme("rudp-fast", "udp / slicing / delivery")`, and
/// transports of your own with [`transports`](Self::transports).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub(crate) cookie: String,
    /// Schemes configured with [`scheme`](Self::scheme).
    pub(crate) schemes: HashMap<String, String>,
    /// Lanes mapped with [`lane`](Self::lane): (lane name, candidate
    /// schemes separated by `|`), checked when the node starts.
    pub(crate) lanes: Vec<(String, String)>,
    /// The layers scheme specs may name.
    pub(crate) layers: LayerRegistry,
    /// The transports scheme specs may name (besides `tls` and `quic`,
    /// which the node adds with its certificate).
    pub(crate) transports: TransportRegistry,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) pending_messages: usize,
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
    pub(crate) link: LinkConfig,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<TlsConfig>,
    /// The node id [`tls`](Self::tls)'s certificate certifies, with this
    /// start's incarnation.
    #[cfg(feature = "tls")]
    certified: Option<NodeId>,
    pub(crate) danger_unchecked_identity: bool,
    #[cfg(feature = "quic")]
    pub(crate) quic: QuicConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            cookie: "plexus".into(),
            schemes: HashMap::new(),
            lanes: Vec::new(),
            layers: LayerRegistry::default(),
            transports: TransportRegistry::default(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            pending_messages: 10_000,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            link: LinkConfig {
                // Remote tells never block; this much may queue per peer
                // link before further messages become dead letters.
                send_buffer: 64 << 20,
                recv_buffer: 4 << 20,
            },
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "tls")]
            certified: None,
            danger_unchecked_identity: false,
            #[cfg(feature = "quic")]
            quic: QuicConfig::default(),
        }
    }
}

impl NodeConfig {
    /// The cluster cookie: nodes connect only if theirs match. Default
    /// `"plexus"`; set your own for anything but a demo.
    pub fn cookie(mut self, cookie: impl Into<String>) -> Self {
        self.cookie = cookie.into();
        self
    }

    /// Maps `scheme` to a stack spec (validated when the node starts).
    pub fn scheme(mut self, scheme: impl Into<String>, spec: impl Into<String>) -> Self {
        self.schemes.insert(scheme.into(), spec.into());
        self
    }

    /// Maps `lane` to the scheme that carries it, e.g. `lane(Lane::Bulk,
    /// "quic")`, or to several candidate schemes separated by `|`
    /// (`"tcp | bulk-udp"`): an adaptive lane, whose messages are split
    /// between them by a ratio learned from each one's goodput and delay
    /// (and put back in order at the receiver).
    ///
    /// A mapped lane gets a connection of its own to every peer this node
    /// dials (also when its scheme is that of the peer's URI: a control
    /// lane on its own TCP connection is not queued behind bulk data), if
    /// the peer listens on the scheme; an unmapped lane, or one whose
    /// scheme the peer does not listen on, rides the link of the URI's
    /// scheme. Checked when the node starts
    /// ([`NodeError::Lane`](crate::NodeError::Lane)): the schemes must
    /// exist, the control lane's stack must be reliable and ordered, and
    /// an adaptive lane's candidates reliable.
    ///
    /// Messages take their type's lane
    /// ([`RemoteMessage::LANE`](plexus_core::remote::RemoteMessage::LANE))
    /// or the one a send names ([`ActorRef::via`](plexus_core::ActorRef::via)).
    /// Within a lane, messages of one sender to one actor stay in order;
    /// across lanes there is no order.
    pub fn lane(self, lane: plexus_core::Lane, schemes: impl Into<String>) -> Self {
        self.lane_named(lane.name(), schemes)
    }

    /// [`lane`](Self::lane) by the lane's name (`control`, `default`,
    /// `bulk`, `unreliable`), as a configuration file gives it; an unknown
    /// name fails the node's start with
    /// [`LaneConfigError::UnknownLane`](crate::LaneConfigError::UnknownLane).
    pub fn lane_named(mut self, lane: impl Into<String>, schemes: impl Into<String>) -> Self {
        self.lanes.push((lane.into(), schemes.into()));
        self
    }

    /// Time each step of setting a session up may take: the primary
    /// link's connect and handshake, each lane connection's connect,
    /// handshake and `BIND` (bound at once, so together as long as the
    /// slowest), and sending `LANES` (`docs/PROTOCOL.md`, "Lanes").
    /// Default 5 s.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Time a resolve waits for the remote node's answer. Default 5 s.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    /// Messages held per peer while its link is being (re)connected;
    /// beyond, they become dead letters. Default 10,000.
    pub fn pending_messages(mut self, n: usize) -> Self {
        self.pending_messages = n;
        self
    }

    /// Backoff between reconnect attempts: doubles from `min` to `max`.
    /// Default 100 ms to 5 s.
    pub fn reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// Buffers of every link. Default: 64 MiB to send (a remote `tell` never
    /// blocks; beyond this a peer that does not keep up costs dead letters),
    /// 4 MiB received.
    pub fn link_buffers(mut self, link: LinkConfig) -> Self {
        self.link = link;
        self
    }

    /// The node's TLS identity and trust, for `tls://` and `quic://`
    /// schemes (listening and dialling; mutual TLS). Default none: a
    /// `tls://` or `quic://` listen or dial then fails with an error saying
    /// so. A dialled peer's certificate must be valid for the host part of
    /// its URI (`tls://n1:4000` → `n1`).
    ///
    /// The certificate also fixes the node's id (see
    /// [`certified_node_id`](Self::certified_node_id)): create the actor
    /// system with it, or [`Node::start`](crate::Node::start) fails with
    /// [`NodeError::IdentityMismatch`](crate::NodeError::IdentityMismatch).
    /// Peers check that the id claimed in the handshake is the certified
    /// one.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        use crate::identity::{new_incarnation, node_id_of};
        // `TlsConfig` checked that its certificate parses: it certifies an id.
        self.certified = node_id_of(tls.certificate())
            .ok()
            .map(|id| NodeId::from_u64(new_incarnation(id)));
        self.tls = Some(tls);
        self
    }

    /// The TLS material given with [`tls`](Self::tls), if any (for a
    /// transport of one's own that should present the same certificate,
    /// e.g. `wss://`).
    #[cfg(feature = "tls")]
    pub fn tls_config(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// The node id for this configuration's TLS certificate (see
    /// [`identity`](crate::identity)): the part the certificate certifies
    /// and an incarnation picked when [`tls`](Self::tls) took it, so a
    /// restarted node is a new node (refs to the old one's actors do not
    /// reach new actors that got the same serials). The node's actor system
    /// must have it; `None` without [`tls`](Self::tls).
    ///
    /// ```no_run
    /// # use plexus_core::ActorSystem;
    /// # use plexus_remote::{Node, NodeConfig};
    /// # use plexus_transport::tls::TlsConfig;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tls = TlsConfig::from_pem_files("n1.pem", "n1.key", "ca.pem")?;
    /// let config = NodeConfig::default().tls(tls);
    /// let mut system = ActorSystem::builder();
    /// if let Some(id) = config.certified_node_id() {
    ///     system = system.node_id(id);
    /// }
    /// let system = system.build()?;
    /// let node = Node::start(&system, config)?;
    /// # Ok(()) }
    /// ```
    pub fn certified_node_id(&self) -> Option<NodeId> {
        #[cfg(not(feature = "tls"))]
        return None;
        #[cfg(feature = "tls")]
        self.certified
    }

    /// **Test only.** Lets [`Node::start`](crate::Node::start) accept an
    /// actor system whose id is not the one its TLS certificate certifies,
    /// so a test can run a node that claims a forged id and check that
    /// peers refuse it. Never use it otherwise: such a node cannot connect
    /// to any peer that checks identities.
    #[doc(hidden)]
    pub fn danger_unchecked_identity_for_tests(mut self) -> Self {
        self.danger_unchecked_identity = true;
        self
    }

    /// QUIC settings of `quic://` links: windows, datagram buffer, idle
    /// timeout (how long before a silent peer's link is down: default
    /// 30 s), keep-alive. Default [`QuicConfig::default`]; its `link`
    /// buffers are replaced by [`link_buffers`](Self::link_buffers).
    #[cfg(feature = "quic")]
    pub fn quic(mut self, quic: QuicConfig) -> Self {
        self.quic = quic;
        self
    }

    /// The layers that scheme specs may name: the built-in ones by
    /// default. Register a layer of your own in a
    /// [`LayerRegistry`](plexus_net::LayerRegistry) and pass it here to use
    /// it in [`scheme`](Self::scheme) specs; it travels the same send and
    /// receive path as the built-in layers.
    pub fn layers(mut self, registry: LayerRegistry) -> Self {
        self.layers = registry;
        self
    }

    /// The transports scheme specs may name: the built-in ones by default
    /// (`tcp`, `uds`, `udp`, `mem`; the node adds `tls` and `quic` with the
    /// certificate of [`tls`](Self::tls) unless the registry has transports
    /// of those names). Register a transport of your own in a
    /// [`TransportRegistry`] and pass it here; its name is then a URI
    /// scheme with its default stack, and specs may name it.
    pub fn transports(mut self, registry: TransportRegistry) -> Self {
        self.transports = registry;
        self
    }

    /// The node's transports: [`transports`](Self::transports), with `tls`
    /// and `quic` added where the features are on and the registry has
    /// none of those names.
    pub(crate) fn transport_registry(&self) -> TransportRegistry {
        #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
        let mut registry = self.transports.clone();
        #[cfg(feature = "tls")]
        if registry.get(plexus_transport::tls::NAME).is_none() {
            use plexus_transport::builtin::TlsTransport;
            let tls = match &self.tls {
                Some(tls) => TlsTransport::new(tls.clone()),
                None => TlsTransport::without_certificate(),
            };
            let registered = registry.register(tls);
            debug_assert!(registered.is_ok(), "the name is free");
        }
        #[cfg(feature = "quic")]
        if registry.get(plexus_transport::quic::NAME).is_none() {
            use plexus_transport::builtin::QuicTransport;
            let quic = match &self.tls {
                Some(tls) => QuicTransport::new(tls.clone(), self.quic),
                None => QuicTransport::without_certificate(),
            };
            let registered = registry.register(quic);
            debug_assert!(registered.is_ok(), "the name is free");
        }
        registry
    }

    /// The stack spec text of `scheme`: configured, or the default stack
    /// of the transport named `scheme`.
    pub(crate) fn spec_text<'a>(
        &'a self,
        scheme: &str,
        transports: &'a TransportRegistry,
    ) -> Option<&'a str> {
        self.schemes
            .get(scheme)
            .map(String::as_str)
            .or_else(|| transports.get(scheme).map(|t| t.default_stack()))
    }

    /// `text` parsed against the node's layers.
    pub(crate) fn parse_spec(&self, text: &str) -> Result<StackSpec, plexus_net::SpecError> {
        StackSpec::parse(text, &self.layers)
    }
}
