//! An actor web server: routes to actors that receive a typed
//! [`HttpRequest`] and reply with a [`Response`], and static files, over a
//! stack with the [`http`](crate::HttpLayer) layer (`tcp / http`).
//!
//! ```no_run
//! # use plexus_core::ActorSystem;
//! # use plexus_http::server::{HttpRequest, WebServer};
//! # use plexus_http::{Method, Response};
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let system = ActorSystem::new();
//! let hello = system.spawn_fn(|req: HttpRequest, _ctx| {
//!     let name = req.param("name").unwrap_or("world").to_owned();
//!     req.reply.send(Response::new(200, format!("hello, {name}\n")));
//! });
//! let server = WebServer::new()
//!     .route(Method::Get, "/hello/:name", hello)?
//!     .static_dir("/static", "./public", 64 << 20)?;
//! let bound = server.listen("127.0.0.1:8080").await?;
//! println!("serving on http://{bound}");
//! # Ok(()) }
//! ```
//!
//! Each connection is a link of the stack `tcp / http(...)`: the layer
//! parses, bounds and times requests, and writes responses in request
//! order; this driver routes each request and hands its response back.
//! Requests to actors are asked concurrently (a pipelined request does not
//! wait for the one before it); static files are answered at once from
//! memory. [`HttpRequest`] is a remote message: a route's actor may be on
//! another node.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use plexus_core::{ActorRef, AskError, ReplyTo};
use plexus_net::{
    Interface, Layer, LayerConfig, LayerConstructor, LayerFactory, LayerOptions, LayerRegistry,
    LinkContext, OptionError, StackSpec,
};
use plexus_transport::tcp::TcpListener;
use plexus_transport::{DriverReceive, LinkSender, LinkTrySendError, Received, Strand};
use serde::{Deserialize, Serialize};

use crate::layer::{HttpConfig, HttpLayer, HttpTotals};
use crate::message::{Method, Request};
use crate::response::Response;
use crate::wire::{RequestMessage, ResponseMessage};

mod files;
#[cfg(feature = "tls")]
mod https;
mod per_core;
mod router;

pub use files::{FilesError, LoadOptions, StaticFiles};
#[cfg(feature = "tls")]
pub use https::{HttpsConfig, HttpsConfigError, HttpsStats, HttpsTotals};
pub use per_core::PerCoreServer;
pub use router::PatternError;
use router::{decode_path, Pattern};

/// A request routed to an actor: the request, the route's parameters, and
/// where the response goes.
#[derive(Serialize, Deserialize)]
pub struct HttpRequest {
    /// The request.
    pub request: Request,
    /// The route's `:name` and `*name` segments, with what they matched.
    pub params: Vec<(String, String)>,
    /// Send the response here.
    pub reply: ReplyTo<Response>,
}
plexus_core::remote_message!(HttpRequest = "plexus.http.Request");

impl HttpRequest {
    /// The value of route parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What serves a route.
#[derive(Clone)]
enum Target {
    Actor(ActorRef<HttpRequest>),
    Files(Arc<StaticFiles>),
}

#[derive(Clone)]
struct Route {
    method: Option<Method>,
    pattern: Pattern,
    target: Target,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The address does not parse.
    #[error("listen {addr:?}: not a socket address")]
    BadAddress {
        /// The text given.
        addr: String,
    },
    /// The stack spec (with the server's `http` options) is invalid.
    #[error("listen {addr}: {source}")]
    Spec {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: plexus_net::SpecError,
    },
    /// Another socket already holds the address: another server serves
    /// this port (with `SO_REUSEPORT` or not). Nothing was started.
    #[error("listen {addr}: the address is already in use (another server serves it)")]
    AddrInUse {
        /// The address.
        addr: SocketAddr,
    },
    /// Binding failed.
    #[error("listen {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: plexus_transport::BindError,
    },
    /// A per-core thread or its runtime could not start.
    #[error("start a per-core server thread: {source}")]
    Runtime {
        /// The OS error.
        source: std::io::Error,
    },
}

/// The web server's routes and settings; [`listen`](Self::listen) serves
/// them. See the [module docs](self).
#[derive(Clone)]
pub struct WebServer {
    routes: Vec<Route>,
    http: HttpConfig,
    ask_timeout: Duration,
    totals: Arc<HttpTotals>,
    access_log: bool,
}

/// The `http` layer as a server builds it: the server's settings (no
/// options in the spec), counting into the server's totals.
struct ServerHttp {
    config: HttpConfig,
    totals: Arc<HttpTotals>,
}

impl LayerConstructor for ServerHttp {
    fn interface(&self) -> Interface {
        <HttpConfig as LayerConfig>::INTERFACE
    }

    fn configure(&self, options: &LayerOptions) -> Result<LayerFactory, OptionError> {
        if let Some(option) = options.iter().next() {
            return Err(option.unknown());
        }
        let (config, totals) = (self.config.clone(), self.totals.clone());
        // Looked up once per server (per core in per-core mode): a request
        // then costs a record, no lookup. A recorder installed after
        // `listen` is not seen by this server.
        let latency = metrics::histogram!(crate::telemetry::REQUEST_SECONDS);
        Ok(Arc::new(move |link: &LinkContext| {
            Box::new(
                HttpLayer::new(config.clone(), link.now)
                    .with_totals(totals.clone())
                    .with_latency(latency.clone()),
            ) as Box<dyn Layer>
        }))
    }
}

impl Default for WebServer {
    fn default() -> Self {
        Self::new()
    }
}

impl WebServer {
    /// A server with no routes, the `http` layer's defaults and a 10 s
    /// limit on each actor's reply.
    pub fn new() -> Self {
        Self {
            routes: Vec::new(),
            http: HttpConfig::default(),
            ask_timeout: Duration::from_secs(10),
            totals: Arc::default(),
            access_log: false,
        }
    }

    /// Routes `method` requests whose path matches `pattern` (`/users/:id`,
    /// `/files/*path`) to `actor`.
    ///
    /// # Errors
    ///
    /// [`PatternError`] for a malformed pattern.
    pub fn route(
        mut self,
        method: Method,
        pattern: &str,
        actor: ActorRef<HttpRequest>,
    ) -> Result<Self, PatternError> {
        self.routes.push(Route {
            method: Some(method),
            pattern: Pattern::parse(pattern)?,
            target: Target::Actor(actor),
        });
        Ok(self)
    }

    /// Serves the files below `dir` under `prefix` (`/static` serves
    /// `dir/app.js` as `/static/app.js`, and `dir/index.html` as
    /// `/static/`), loaded now: small files into memory, up to `max_total`
    /// bytes, large ones kept open and sent from the page cache (see
    /// [`StaticFiles`]).
    ///
    /// # Errors
    ///
    /// [`StaticDirError`] if the prefix is malformed or the directory cannot
    /// be loaded.
    pub fn static_dir(
        self,
        prefix: &str,
        dir: impl AsRef<std::path::Path>,
        max_total: usize,
    ) -> Result<Self, StaticDirError> {
        let options = LoadOptions {
            max_in_memory: max_total,
            ..LoadOptions::default()
        };
        self.static_dir_with(prefix, dir, options)
    }

    /// [`static_dir`](Self::static_dir) with the files held as `options`
    /// say.
    ///
    /// # Errors
    ///
    /// As [`static_dir`](Self::static_dir).
    pub fn static_dir_with(
        mut self,
        prefix: &str,
        dir: impl AsRef<std::path::Path>,
        options: LoadOptions,
    ) -> Result<Self, StaticDirError> {
        let prefix = prefix.trim_end_matches('/');
        let pattern = Pattern::parse(&format!("{prefix}/*file"))?;
        let files = StaticFiles::load_with(dir, options)?;
        self.routes.push(Route {
            method: None,
            pattern,
            target: Target::Files(Arc::new(files)),
        });
        Ok(self)
    }

    /// The `http` layer's settings (limits, timeouts, pipeline depth).
    pub fn http(mut self, config: HttpConfig) -> Self {
        self.http = config;
        self
    }

    /// How long a route's actor may take to reply (then 504).
    pub fn ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// Logs one line per request under the target `plexus::http::access`
    /// at INFO: `method`, `path`, `status`, `bytes` (of the body) and, for
    /// an actor's route, `micros` (until its answer). Default: off (a
    /// `tracing` filter still decides whether a line is written).
    pub fn access_log(mut self, on: bool) -> Self {
        self.access_log = on;
        self
    }

    /// Listens on `addr` (`127.0.0.1:8080`; port 0 picks one) and serves
    /// until the runtime stops. Returns the address bound.
    ///
    /// # Errors
    ///
    /// [`ServeError`] naming the address and the cause.
    pub async fn listen(self, addr: &str) -> Result<SocketAddr, ServeError> {
        let socket = parse_addr(addr)?;
        let spec = self.stack_spec().map_err(|source| ServeError::Spec {
            addr: socket,
            source,
        })?;
        let listener = TcpListener::bind(&spec, socket)
            .await
            .map_err(|source| ServeError::from_bind(socket, source))?;
        let bound = listener.local_addr();
        tokio::spawn(Arc::new(self).accept_loop(listener));
        Ok(bound)
    }

    /// Accepts connections on `listener` and serves each in its own task,
    /// until the runtime stops.
    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            match listener.accept().await {
                Ok(link) => {
                    tokio::spawn(self.clone().serve(link));
                }
                Err(e) => {
                    tracing::warn!(target: "plexus::http", "accept failed: {e}");
                }
            }
        }
    }

    /// The stack every connection runs: `tcp / http` with the server's
    /// settings, counting into its totals. For a loop of one's own that
    /// drives the server's connections (the `w6-drivers` benchmark).
    ///
    /// # Errors
    ///
    /// None in practice: the spec is the crate's own.
    pub fn stack_spec(&self) -> Result<StackSpec, plexus_net::SpecError> {
        let mut registry = LayerRegistry::default();
        registry.register(
            <HttpConfig as LayerConfig>::NAME,
            ServerHttp {
                config: self.http.clone(),
                totals: self.totals.clone(),
            },
        );
        StackSpec::parse("tcp / http", &registry)
    }

    /// What the server's `http` layers counted so far, over all its
    /// connections (and those of its clones: take it before
    /// [`listen`](Self::listen), it stays live).
    pub fn totals(&self) -> Arc<HttpTotals> {
        self.totals.clone()
    }

    /// The request bounds of the server's `http` layer.
    pub(crate) fn limits(&self) -> &crate::Limits {
        &self.http.limits
    }

    /// Serves a connection that arrived elsewhere (on a `ws` listener's
    /// port, not upgraded), whose first bytes were read already and are
    /// at the front of `io`.
    pub(crate) fn serve_stream<S>(self: Arc<Self>, io: S, peer: String)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let spec = match self.stack_spec() {
            Ok(spec) => spec,
            Err(e) => {
                // `WebServer` builds only specs that parse; nothing to serve.
                tracing::error!(target: "plexus::http", "{e}");
                return;
            }
        };
        let stack = spec.build_link(plexus_net::LinkContext {
            now: std::time::Instant::now(),
            link_id: 0,
        });
        let link = plexus_transport::Link::over_stream(io, stack, peer, Default::default());
        tokio::spawn(self.serve(link));
    }

    /// Serves one connection until it closes.
    ///
    /// Requests are handled on the connection's driver task as they arrive
    /// ([`LinkReceiver::receive_on_driver`](plexus_transport::LinkReceiver::receive_on_driver)):
    /// a static file or a refusal is answered there and leaves in the
    /// driver's next write, without waking another task; a request for an
    /// actor is asked from a task of its own. This task only waits for the
    /// end (and handles what the driver leaves to it).
    async fn serve(self: Arc<Self>, link: plexus_transport::Link) {
        let (tx, mut rx) = link.split();
        rx.receive_on_driver(Box::new(OnDriver {
            server: self.clone(),
            tx: tx.clone(),
        }));
        while let Ok(bytes) = rx.recv_message().await {
            if !self.handle(&tx, bytes) {
                break;
            }
        }
    }

    /// Answers one request message, or starts the task that will; `false`
    /// for a message that is not one.
    fn handle(&self, tx: &LinkSender, message: bytes::Bytes) -> bool {
        let Ok(RequestMessage { id, request }) = RequestMessage::decode(message) else {
            // The layer only hands up what it encoded.
            return false;
        };
        match self.dispatch(&request) {
            Routed::Now(response) => {
                if self.access_log {
                    access(&request, &response);
                }
                respond_now(tx, id, response);
            }
            Routed::Ask(actor, params) => {
                let tx = tx.clone();
                let timeout = self.ask_timeout;
                let access_log = self.access_log;
                tokio::spawn(async move {
                    // The request moves into the ask; the access line needs
                    // its method and path.
                    let line = access_log.then(|| {
                        let at = std::time::Instant::now();
                        (request.method.clone(), request.path().to_owned(), at)
                    });
                    let asked = actor
                        .ask(
                            |reply| HttpRequest {
                                request,
                                params,
                                reply,
                            },
                            timeout,
                        )
                        .await;
                    let response = match asked {
                        Ok(r) => r,
                        Err(AskError::Timeout { .. }) => {
                            Response::new(504, "the handler did not answer in time\n")
                        }
                        Err(e) => Response::new(503, format!("{e}\n")),
                    };
                    if let Some((method, path, at)) = line {
                        tracing::info!(
                            target: "plexus::http::access",
                            method = method.as_str(),
                            path,
                            status = response.status,
                            bytes = response.body.len(),
                            micros = at.elapsed().as_micros() as u64,
                        );
                    }
                    respond(&tx, id, response).await;
                });
            }
        }
        true
    }

    fn dispatch(&self, request: &Request) -> Routed {
        let Some(path) = decode_path(request.path()) else {
            return Routed::Now(Response::new(400, "malformed path\n"));
        };
        let mut allowed = false;
        for route in &self.routes {
            let Some(params) = route.pattern.matches(&path) else {
                continue;
            };
            match (&route.method, &route.target) {
                (Some(m), _) if *m != request.method => allowed = true,
                (_, Target::Actor(actor)) => return Routed::Ask(actor.clone(), params),
                (_, Target::Files(files)) => {
                    let name = params.first().map_or("", |(_, v)| v.as_str());
                    return Routed::Now(files.serve(request, name));
                }
            }
        }
        Routed::Now(if allowed {
            Response::new(405, "method not allowed\n")
        } else {
            Response::new(404, "not found\n")
        })
    }
}

/// The access line of a request answered at once.
fn access(request: &Request, response: &Response) {
    tracing::info!(
        target: "plexus::http::access",
        method = request.method.as_str(),
        path = request.path(),
        status = response.status,
        bytes = response.body.len(),
    );
}

enum Routed {
    Now(Response),
    Ask(ActorRef<HttpRequest>, Vec<(String, String)>),
}

impl ServeError {
    /// [`AddrInUse`](Self::AddrInUse) for a bind that found the address
    /// taken, [`Bind`](Self::Bind) for any other failure.
    fn from_bind(addr: SocketAddr, source: plexus_transport::BindError) -> Self {
        match &source {
            plexus_transport::BindError::Io { source: io, .. }
                if io.kind() == std::io::ErrorKind::AddrInUse =>
            {
                ServeError::AddrInUse { addr }
            }
            _ => ServeError::Bind { addr, source },
        }
    }
}

fn parse_addr(addr: &str) -> Result<SocketAddr, ServeError> {
    addr.parse().map_err(|_| ServeError::BadAddress {
        addr: addr.to_owned(),
    })
}

/// Why a static directory could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StaticDirError {
    /// The prefix is not a path.
    #[error(transparent)]
    Prefix(#[from] PatternError),
    /// The directory could not be loaded.
    #[error(transparent)]
    Files(#[from] FilesError),
}

async fn respond(tx: &LinkSender, id: u64, response: Response) {
    let frame = ResponseMessage::Whole { id, response }.encode();
    // A closed connection has nobody to answer.
    let _ = tx.send_frame_on(Strand::ZERO, frame).await;
}

/// Answers without waiting: queued at once if the connection's send buffer
/// has room (the usual case: a connection waits for its answers), else by a
/// task that waits for room. Responses carry their request's number, so
/// the `http` layer writes them in request order either way.
fn respond_now(tx: &LinkSender, id: u64, response: Response) {
    let message = ResponseMessage::Whole { id, response };
    if let Err(LinkTrySendError::Full { .. }) = tx.try_send_frame_on(Strand::ZERO, message.encode())
    {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send_frame_on(Strand::ZERO, message.encode()).await;
        });
    }
    // Otherwise sent, or the connection is closed: nobody to answer.
}

/// The connection's requests, handled on its driver task (see
/// [`WebServer::serve`]).
struct OnDriver {
    server: Arc<WebServer>,
    tx: LinkSender,
}

impl DriverReceive for OnDriver {
    fn receive(&mut self, batch: &mut VecDeque<Received>) {
        while let Some(Received::Message(_)) = batch.front() {
            let Some(Received::Message(message)) = batch.pop_front() else {
                return;
            };
            if !self.server.handle(&self.tx, message) {
                self.tx.close();
                return;
            }
        }
    }
}
