//! The management endpoint of a node, after Akka Management's shape: an
//! HTTP port of the node's own web server (`plexus-http`) that operators,
//! orchestrators and the `plexus` command's operator subcommands use.
//!
//! | call | answer |
//! | --- | --- |
//! | `GET /alive` | 200 while the process serves |
//! | `GET /ready` | 200 once a member is `Up` in its cluster (a plain node: once it listens); 503 with the state before, and while leaving or down |
//! | `GET /cluster/members` | the members as JSON: address, state, incarnation, up-number |
//! | `PUT /cluster/members/{address}` | body `operation=leave` (this member) or `operation=down` (any member); needs the token |
//! | `GET /metrics` | Prometheus text, from the exporter the binary installed |
//! | `GET /actors` | the names published on the node, with their message types |
//! | `GET /data/{key}?type=gcounter` | a replicated counter's value (read at majority) |
//! | `POST /data/{key}?type=gcounter` | body `add=N`: adds N (written at majority); needs the token |
//! | `GET /` | the live view: a page that shows the members, the ring and this node's figures, live |
//! | `GET /view/snapshot` | what the live view shows, as JSON, made now |
//! | WebSocket `/view/ws` | the live view's snapshots, pushed every second and on every cluster event |
//!
//! The live view is in [`view`]. One port serves the calls and the live
//! view's WebSocket: the listener is a `ws` transport's
//! ([`WsTransport`]) with the web server attached, so an upgrade on
//! `/view/ws` becomes a socket and every other request goes to the web
//! server, as `plexus_http::ws_transport` describes.
//!
//! What it guarantees: the state-changing calls need `Authorization:
//! Bearer <management.token>` (401 without it, 403 with another, 403 if no
//! token is configured); an unknown member is 404, a key of another type
//! 409, a malformed body 400, each with a one-line reason in the body. It
//! binds to loopback unless configured otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use plexus_cluster::{Cluster, DownError, Member, MemberState};
use plexus_core::{ActorSystem, SystemRef};
use plexus_data::crdt::{GCounter, PNCounter};
use plexus_data::node::Replication;
use plexus_data::{Consistency, Crdt, GetError, Key, UpdateError};
use plexus_http::server::{HttpRequest, WebServer};
use plexus_http::ws_transport::WsTransport;
use plexus_http::{Method, Response};
use plexus_remote::Node;
use plexus_sharding::node::Sharding;
use plexus_transport::{LinkConfig, Transport};
use serde::Serialize;

use crate::config::ManagementSettings;

pub mod view;

/// Renders the metrics text for `GET /metrics`.
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// How long a data call waits for the replicas.
const DATA_TIMEOUT: Duration = Duration::from_secs(5);

/// What the endpoint serves; give it the parts the process runs.
#[must_use]
pub struct Management {
    settings: ManagementSettings,
    node: Option<Node>,
    cluster: Option<Arc<Cluster>>,
    data: Option<Replication>,
    sharding: Option<Sharding>,
    metrics: Option<MetricsRender>,
    on_scrape: Vec<OnScrape>,
}

/// Publishes a part's counters through the `metrics` facade right before
/// `/metrics` renders them (a part of one's own, a device server).
pub type OnScrape = Arc<dyn Fn() + Send + Sync>;

/// Why the endpoint did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagementError {
    /// A route could not be added.
    #[error("management routes: {0}")]
    Route(String),
    /// The port could not be bound.
    #[error(
        "management endpoint on {bind}: {source} (each process needs a port of its own: \
         set management.bind, or --management-bind 127.0.0.1:0 for a free one)"
    )]
    Serve {
        /// The address asked for.
        bind: SocketAddr,
        /// The cause.
        source: Box<plexus_transport::BindError>,
    },
}

impl Management {
    /// An endpoint with these settings and nothing to show yet.
    pub fn new(settings: &ManagementSettings) -> Self {
        Self {
            settings: settings.clone(),
            node: None,
            cluster: None,
            data: None,
            sharding: None,
            metrics: None,
            on_scrape: Vec::new(),
        }
    }

    /// The node: `/actors`, `/ready` for a node that is not a member, and
    /// the live view's links, lanes and published names.
    pub fn node(mut self, node: &Node) -> Self {
        self.node = Some(node.clone());
        self
    }

    /// The cluster member: `/ready`, `/cluster/members`, and the live
    /// view's members and ring (and a snapshot on each of its events).
    pub fn cluster(mut self, cluster: Arc<Cluster>) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// The replicator: `/data/{key}`, and the live view's replicator
    /// counters.
    pub fn data(mut self, data: &Replication) -> Self {
        self.data = Some(data.clone());
        self
    }

    /// The member's sharding: its counters on `/metrics`.
    pub fn sharding(mut self, sharding: &Sharding) -> Self {
        self.sharding = Some(sharding.clone());
        self
    }

    /// The metrics exporter's rendering: `/metrics`.
    pub fn metrics(mut self, render: MetricsRender) -> Self {
        self.metrics = Some(render);
        self
    }

    /// Calls `publish` before each `/metrics` rendering, after the parts
    /// given above published theirs: for parts this builder does not know
    /// (a device server, an application's own counters).
    pub fn on_scrape(mut self, publish: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_scrape.push(Arc::new(publish));
        self
    }

    /// Serves the endpoint on `settings.bind`; returns the bound address.
    /// It serves, and the live view's snapshots are pushed to its sockets,
    /// until the runtime stops.
    ///
    /// # Errors
    ///
    /// [`ManagementError`] if the port cannot be bound.
    pub async fn start(self, system: &ActorSystem) -> Result<SocketAddr, ManagementError> {
        let bind = self.settings.bind;
        let parts = Arc::new(Parts {
            token: self.settings.token.clone(),
            node: self.node,
            cluster: self.cluster,
            data: self.data,
            sharding: self.sharding,
            metrics: self.metrics,
            on_scrape: self.on_scrape,
        });
        let route = |server: WebServer, method, path: &str, handler: Handler| {
            let parts = Arc::clone(&parts);
            let actor = system.spawn_fn(move |req: HttpRequest, ctx| {
                handler(Arc::clone(&parts), req, ctx.system().clone());
            });
            server
                .route(method, path, actor)
                .map_err(|e| ManagementError::Route(e.to_string()))
        };
        let mut server = WebServer::new();
        server = route(server, Method::Get, "/alive", alive)?;
        server = route(server, Method::Get, "/ready", ready)?;
        server = route(server, Method::Get, "/cluster/members", members)?;
        server = route(
            server,
            Method::Put,
            "/cluster/members/*address",
            change_member,
        )?;
        server = route(server, Method::Get, "/metrics", metrics)?;
        server = route(server, Method::Get, "/actors", actors)?;
        server = route(server, Method::Get, "/data/:key", data_get)?;
        server = route(server, Method::Post, "/data/:key", data_add)?;
        server = route(server, Method::Get, "/", view::page)?;
        server = route(server, Method::Get, "/view/view.js", view::script)?;
        server = route(server, Method::Get, "/view/view.css", view::style)?;
        server = route(server, Method::Get, "/view/snapshot", view::snapshot)?;
        let serve = |source| ManagementError::Serve {
            bind,
            source: Box::new(source),
        };
        // The spec of the view's sockets: the transport alone (no layers
        // over the WebSocket), which always parses.
        let spec: plexus_net::StackSpec = "ws"
            .parse()
            .map_err(|e: plexus_net::SpecError| ManagementError::Route(e.to_string()))?;
        let transport = WsTransport::new().path(view::SOCKET_PATH).web(server);
        let listener = transport
            .listen(&spec, &bind.to_string(), LinkConfig::default())
            .await
            .map_err(serve)?;
        let bound = listener.local_addr().parse().map_err(|_| {
            serve(plexus_transport::BindError::Address {
                addr: listener.local_addr(),
                why: "the listener's address is not host:port".into(),
            })
        })?;
        view::start_feed(parts, system, listener);
        tracing::info!(target: "plexus::management", %bound, "management endpoint serving");
        Ok(bound)
    }
}

struct Parts {
    token: Option<String>,
    node: Option<Node>,
    cluster: Option<Arc<Cluster>>,
    data: Option<Replication>,
    sharding: Option<Sharding>,
    metrics: Option<MetricsRender>,
    on_scrape: Vec<OnScrape>,
}

type Handler = fn(Arc<Parts>, HttpRequest, SystemRef);

fn text(status: u16, body: impl Into<String>) -> Response {
    let mut body = body.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Response::new(status, body).header("content-type", "text/plain; charset=utf-8")
}

fn json(status: u16, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::new(status, body).header("content-type", "application/json"),
        Err(e) => text(500, format!("encoding the answer: {e}")),
    }
}

fn alive(_: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    req.reply.send(text(200, "alive"));
}

fn ready(parts: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    let answer = match &parts.cluster {
        Some(cluster) => match cluster.local().state {
            MemberState::Up => text(200, "ready: up"),
            state => text(503, format!("not ready: {}", state.name())),
        },
        None => match &parts.node {
            Some(node) if !node.listen_uris().is_empty() => text(200, "ready: listening"),
            _ => text(503, "not ready: not listening"),
        },
    };
    req.reply.send(answer);
}

#[derive(Serialize)]
struct MemberJson<'a> {
    address: &'a str,
    state: &'static str,
    incarnation: u64,
    life: u64,
    up_number: u64,
    weight: u16,
}

#[derive(Serialize)]
struct MembersJson<'a> {
    cluster: &'a str,
    this: &'a str,
    members: Vec<MemberJson<'a>>,
}

/// This member, and every member known sorted by address, with this
/// member as it is now (the list may lag it by a step of the driver).
fn member_list(cluster: &Cluster) -> (Member, Vec<Member>) {
    let local = cluster.local();
    let mut list: Vec<Member> = cluster
        .members()
        .iter()
        .filter(|m| *m.address != *local.address)
        .chain(std::iter::once(&local))
        .cloned()
        .collect();
    list.sort_by(|a, b| a.address.cmp(&b.address));
    (local, list)
}

fn members(parts: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    let Some(cluster) = &parts.cluster else {
        req.reply
            .send(text(404, "this node is not a cluster member"));
        return;
    };
    let (local, all) = member_list(cluster);
    let list: Vec<MemberJson<'_>> = all
        .iter()
        .map(|m| MemberJson {
            address: &m.address,
            state: m.state.name(),
            incarnation: m.incarnation,
            life: m.life,
            up_number: m.up_number,
            weight: m.weight,
        })
        .collect();
    req.reply.send(json(
        200,
        &MembersJson {
            cluster: cluster.name(),
            this: &local.address,
            members: list,
        },
    ));
}

/// `None` if the request carries the configured token; the refusal
/// otherwise.
fn refused(parts: &Parts, req: &HttpRequest) -> Option<Response> {
    let Some(token) = &parts.token else {
        return Some(text(
            403,
            "state-changing calls are off: no management.token is configured",
        ));
    };
    let Some(given) = req.request.header("authorization") else {
        return Some(text(401, "this call needs Authorization: Bearer <token>"));
    };
    let given = given.strip_prefix(b"Bearer ").unwrap_or(given);
    // Compared in full whatever the first difference, so the time taken
    // does not say how much of a guess was right.
    let same = given.len() == token.len()
        && given
            .iter()
            .zip(token.as_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    (!same).then(|| text(403, "wrong management token"))
}

/// The `name=value` pairs of a form body or a query.
fn form(text: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(text)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_owned(), v.trim().to_owned()),
            None => (p.trim().to_owned(), String::new()),
        })
        .collect()
}

fn query(req: &HttpRequest) -> Vec<(String, String)> {
    match req.request.target.split_once('?') {
        Some((_, q)) => form(q.as_bytes()),
        None => Vec::new(),
    }
}

fn change_member(parts: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    if let Some(no) = refused(&parts, &req) {
        req.reply.send(no);
        return;
    }
    let Some(cluster) = parts.cluster.clone() else {
        req.reply
            .send(text(404, "this node is not a cluster member"));
        return;
    };
    let address = req.param("address").unwrap_or_default().to_owned();
    let operation = form(&req.request.body)
        .into_iter()
        .find(|(k, _)| k == "operation")
        .map(|(_, v)| v.to_ascii_lowercase());
    tokio::spawn(async move {
        let answer = match operation.as_deref() {
            Some("down") => match cluster.down(&address).await {
                Ok(()) => text(200, format!("downed {address}")),
                Err(e @ DownError::UnknownMember(_)) => text(404, e.to_string()),
                Err(e) => text(409, e.to_string()),
            },
            Some("leave") if *cluster.local().address == *address => {
                // Answered first: the leave takes `leave_timeout`.
                let reply = text(202, format!("{address} is leaving"));
                req.reply.send(reply);
                cluster.leave().await;
                return;
            }
            Some("leave") => {
                let known = cluster.members().iter().any(|m| *m.address == *address);
                if known {
                    text(
                        409,
                        format!(
                            "{address} is another member: ask its own management endpoint to \
                             leave, or down it here"
                        ),
                    )
                } else {
                    text(404, format!("no member has the address {address}"))
                }
            }
            _ => text(400, "expected the body operation=leave or operation=down"),
        };
        req.reply.send(answer);
    });
}

/// Publishes what the parts count (each keeps its counters in a struct:
/// sends cost nothing until a scrape), then renders the exporter's text.
fn metrics(parts: Arc<Parts>, req: HttpRequest, system: SystemRef) {
    let Some(render) = parts.metrics.clone() else {
        req.reply.send(text(
            404,
            "no metrics exporter is installed in this process",
        ));
        return;
    };
    tokio::spawn(async move {
        system.record_metrics();
        if let Some(node) = &parts.node {
            node.record_metrics();
        }
        if let Some(cluster) = &parts.cluster {
            cluster.record_metrics();
        }
        if let Some(data) = &parts.data {
            data.record_metrics().await;
        }
        if let Some(sharding) = &parts.sharding {
            sharding.record_metrics().await;
        }
        for publish in &parts.on_scrape {
            publish();
        }
        req.reply.send(
            Response::new(200, render())
                .header("content-type", "text/plain; version=0.0.4; charset=utf-8"),
        );
    });
}

#[derive(Serialize)]
struct ActorJson {
    name: String,
    types: Vec<&'static str>,
}

fn actors(parts: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    let Some(node) = &parts.node else {
        req.reply.send(text(404, "no node in this process"));
        return;
    };
    let list: Vec<ActorJson> = node
        .published()
        .into_iter()
        .map(|(name, types)| ActorJson { name, types })
        .collect();
    req.reply.send(json(200, &list));
}

/// The replicated types the data calls know.
#[derive(Clone, Copy)]
enum DataType {
    GCounter,
    PNCounter,
}

fn data_type(req: &HttpRequest) -> Result<DataType, Response> {
    match query(req)
        .into_iter()
        .find(|(k, _)| k == "type")
        .map(|(_, v)| v)
        .as_deref()
    {
        None | Some("gcounter") => Ok(DataType::GCounter),
        Some("pncounter") => Ok(DataType::PNCounter),
        Some(other) => Err(text(
            400,
            format!("type `{other}`: expected gcounter or pncounter"),
        )),
    }
}

#[derive(Serialize)]
struct ValueJson<'a> {
    key: &'a str,
    r#type: &'static str,
    value: i128,
}

fn data_get(parts: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    let Some(data) = parts.data.clone() else {
        req.reply.send(text(404, "this node runs no replicator"));
        return;
    };
    let kind = match data_type(&req) {
        Ok(k) => k,
        Err(no) => return req.reply.send(no),
    };
    let name = req.param("key").unwrap_or_default().to_owned();
    tokio::spawn(async move {
        let answer = match kind {
            DataType::GCounter => {
                read::<GCounter>(&data, &name, "gcounter", |c| {
                    i128::try_from(c.value()).unwrap_or(i128::MAX)
                })
                .await
            }
            DataType::PNCounter => {
                read::<PNCounter>(&data, &name, "pncounter", PNCounter::value).await
            }
        };
        req.reply.send(answer);
    });
}

async fn read<T: Crdt>(
    data: &Replication,
    name: &str,
    kind: &'static str,
    value: impl Fn(&T) -> i128,
) -> Response {
    data.register::<T>();
    let key = Key::<T>::new(name);
    match data.get(&key, Consistency::Majority, DATA_TIMEOUT).await {
        Ok(found) => json(
            200,
            &ValueJson {
                key: name,
                r#type: kind,
                value: found.as_ref().map_or(0, value),
            },
        ),
        Err(e @ GetError::TypeMismatch { .. }) => text(409, e.to_string()),
        Err(e) => text(503, e.to_string()),
    }
}

fn data_add(parts: Arc<Parts>, req: HttpRequest, _: SystemRef) {
    if let Some(no) = refused(&parts, &req) {
        req.reply.send(no);
        return;
    }
    let Some(data) = parts.data.clone() else {
        req.reply.send(text(404, "this node runs no replicator"));
        return;
    };
    let kind = match data_type(&req) {
        Ok(k) => k,
        Err(no) => return req.reply.send(no),
    };
    let amount = form(&req.request.body)
        .into_iter()
        .find(|(k, _)| k == "add")
        .map(|(_, v)| v.parse::<i64>());
    let amount = match (kind, amount) {
        (_, Some(Ok(n))) if n != 0 => n,
        (DataType::GCounter, Some(Ok(n))) if n < 0 => {
            return req
                .reply
                .send(text(400, "a gcounter only grows: add=N with N > 0"))
        }
        _ => {
            return req
                .reply
                .send(text(400, "expected the body add=N (a non-zero integer)"))
        }
    };
    let name = req.param("key").unwrap_or_default().to_owned();
    tokio::spawn(async move {
        let result = match kind {
            DataType::GCounter => {
                // Positive: checked above.
                let n = amount.unsigned_abs();
                write::<GCounter>(&data, &name, move |c, me| c.increment(me, n)).await
            }
            DataType::PNCounter => {
                let n = amount.unsigned_abs();
                write::<PNCounter>(&data, &name, move |c, me| {
                    if amount > 0 {
                        c.increment(me, n)
                    } else {
                        c.decrement(me, n)
                    }
                })
                .await
            }
        };
        let answer = match result {
            Ok(()) => text(200, format!("added {amount} to {name}")),
            Err(e @ UpdateError::TypeMismatch { .. }) => text(409, e.to_string()),
            Err(e) => text(503, e.to_string()),
        };
        req.reply.send(answer);
    });
}

async fn write<T: Crdt>(
    data: &Replication,
    name: &str,
    change: impl FnOnce(&mut T, plexus_data::ReplicaId) -> T + Send + 'static,
) -> Result<(), UpdateError> {
    data.register::<T>();
    let key = Key::<T>::new(name);
    data.update(&key, Consistency::Majority, DATA_TIMEOUT, change)
        .await
}
