//! A transport written outside the workspace, against the public API only:
//! `pipe`, in-process byte streams ([`tokio::io::duplex`]) addressed by
//! name. Registered in a `TransportRegistry`, it is a URI scheme of its own
//! (`pipe://a/counter`) that two nodes use for tell, ask and monitor, with
//! the same stack (`pipe / framing`) and driver as tcp.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plexus::net::{SpecError, StackSpec, TransportProfile};
use plexus::prelude::*;
use plexus::transport::{
    AcceptError, BindError, BoxFuture, ConnectError, Dialer, Link, LinkConfig, Listener,
    RegisterError, Transport, TransportRegistry,
};
use plexus::NodeError;
use serde::{Deserialize, Serialize};
use tokio::io::DuplexStream;
use tokio::sync::mpsc;

/// Listeners of one namespace, by name.
type Names = Arc<Mutex<HashMap<String, mpsc::Sender<DuplexStream>>>>;

/// The transport: a namespace of pipe listeners.
#[derive(Clone, Default)]
struct PipeTransport {
    names: Names,
}

const PIPE_BUFFER: usize = 256 << 10;

struct PipeListener {
    name: String,
    incoming: tokio::sync::Mutex<mpsc::Receiver<DuplexStream>>,
    dialer: Arc<PipeDialer>,
}

struct PipeDialer {
    names: Names,
    spec: StackSpec,
    link: LinkConfig,
}

fn link_over(io: DuplexStream, spec: &StackSpec, peer: String, link: LinkConfig) -> Link {
    let stack = spec.build(std::time::Instant::now());
    Link::over_stream(io, stack, peer, link)
}

impl Transport for PipeTransport {
    fn name(&self) -> &str {
        "pipe"
    }

    fn profile(&self) -> TransportProfile {
        TransportProfile::byte_stream()
    }

    fn default_stack(&self) -> &str {
        "pipe / framing"
    }

    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(16);
            let mut names = self.names.lock().unwrap();
            if names.contains_key(addr) {
                return Err(BindError::AddrInUse {
                    addr: format!("pipe://{addr}"),
                });
            }
            names.insert(addr.to_owned(), tx);
            let dialer = Arc::new(PipeDialer {
                names: self.names.clone(),
                spec: spec.clone(),
                link,
            });
            Ok(Box::new(PipeListener {
                name: addr.to_owned(),
                incoming: tokio::sync::Mutex::new(rx),
                dialer,
            }) as Box<dyn Listener>)
        })
    }

    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
        let dialer: Arc<dyn Dialer> = Arc::new(PipeDialer {
            names: self.names.clone(),
            spec: spec.clone(),
            link,
        });
        Box::pin(async move { Ok(dialer) })
    }
}

impl Listener for PipeListener {
    fn local_addr(&self) -> String {
        self.name.clone()
    }

    fn accept(&self) -> BoxFuture<'_, Result<Link, AcceptError>> {
        Box::pin(async move {
            let io = self
                .incoming
                .lock()
                .await
                .recv()
                .await
                .ok_or_else(|| AcceptError::Io {
                    addr: format!("pipe://{}", self.name),
                    source: std::io::ErrorKind::NotConnected.into(),
                })?;
            let peer = format!("pipe://{}#accepted", self.name);
            Ok(link_over(io, &self.dialer.spec, peer, self.dialer.link))
        })
    }

    fn dialer(&self) -> Arc<dyn Dialer> {
        self.dialer.clone()
    }
}

impl Dialer for PipeDialer {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>> {
        Box::pin(async move {
            let listener = self.names.lock().unwrap().get(addr).cloned();
            let no_listener = || ConnectError::NoListener {
                addr: format!("pipe://{addr}"),
            };
            let listener = listener.ok_or_else(no_listener)?;
            let (ours, theirs) = tokio::io::duplex(PIPE_BUFFER);
            listener.send(theirs).await.map_err(|_| no_listener())?;
            Ok(link_over(
                ours,
                &self.spec,
                format!("pipe://{addr}"),
                self.link,
            ))
        })
    }
}

#[derive(Serialize, Deserialize)]
enum Counter {
    Add(u64),
    Get(ReplyTo<u64>),
    Stop,
}
remote_message!(Counter = "own_transport.Counter");

#[derive(Default)]
struct CounterActor(u64);

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, ctx: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.0 += n,
            Counter::Get(reply) => reply.send(self.0),
            Counter::Stop => ctx.stop(),
        }
    }
}

fn config(pipes: &PipeTransport) -> NodeConfig {
    let mut transports = TransportRegistry::default();
    transports
        .register(pipes.clone())
        .expect("no other transport is named pipe");
    NodeConfig::default()
        .cookie("own-transport")
        .transports(transports)
}

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_tell_ask_and_monitor_over_a_transport_of_ones_own() {
    let pipes = PipeTransport::default();
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, config(&pipes)).unwrap();
    let nb = Node::start(&b, config(&pipes)).unwrap();
    assert_eq!(na.listen("pipe://a").await.unwrap(), "pipe://a");
    let uri_b = nb.listen("pipe://b").await.unwrap();
    let counter = b.spawn(CounterActor::default());
    nb.publish(&counter, "counter").unwrap();

    let remote: ActorRef<Counter> = na.resolve(&format!("{uri_b}/counter")).await.unwrap();
    assert!(remote.is_remote());
    for i in 1..=100 {
        remote.tell(Counter::Add(i));
    }
    assert_eq!(remote.ask(Counter::Get, T).await, Ok(5050));

    let down = remote.monitor();
    remote.tell(Counter::Stop);
    let down: Down = tokio::time::timeout(T, down).await.unwrap();
    assert_eq!(down.id, counter.id());
    assert!(
        matches!(down.reason, ExitReason::Normal),
        "{:?}",
        down.reason
    );
}

#[test]
fn a_name_registered_twice_is_refused_naming_both() {
    let mut transports = TransportRegistry::default();
    #[derive(Clone, Default)]
    struct Impostor(PipeTransport);
    impl Transport for Impostor {
        fn name(&self) -> &str {
            "tcp"
        }
        fn profile(&self) -> TransportProfile {
            self.0.profile()
        }
        fn default_stack(&self) -> &str {
            "tcp / framing"
        }
        fn listen<'a>(
            &'a self,
            spec: &'a StackSpec,
            addr: &'a str,
            link: LinkConfig,
        ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>> {
            self.0.listen(spec, addr, link)
        }
        fn dialer<'a>(
            &'a self,
            spec: &'a StackSpec,
            link: LinkConfig,
        ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>> {
            self.0.dialer(spec, link)
        }
    }
    let err = transports.register(Impostor::default()).unwrap_err();
    let RegisterError::Duplicate {
        name,
        registered,
        new,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(name, "tcp");
    assert!(registered.ends_with("TcpTransport"), "{registered}");
    assert!(new.ends_with("Impostor"), "{new}");
}

#[tokio::test]
async fn a_stack_that_does_not_fit_the_transport_is_refused_when_the_node_starts() {
    let pipes = PipeTransport::default();
    let system = ActorSystem::new();
    // `slicing` needs datagrams; a pipe is a byte stream.
    let refused = |config| match Node::start(&system, config) {
        Ok(_) => panic!("the node started"),
        Err(err) => err,
    };
    let err = refused(config(&pipes).scheme("pipe-sliced", "pipe / slicing"));
    let NodeError::Spec { scheme, source } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(scheme, "pipe-sliced");
    assert!(
        matches!(source, SpecError::Mismatch { layer, below, .. } if layer == "slicing" && below == "pipe"),
        "{source:?}"
    );
    let text = err.to_string();
    assert!(text.contains("slicing") && text.contains("pipe"), "{text}");

    let err = refused(config(&pipes).scheme("x", "carrier-pigeon / framing"));
    assert!(
        matches!(&err, NodeError::Spec { source: SpecError::UnknownTransport { name, registered }, .. }
            if name == "carrier-pigeon" && registered.contains("pipe")),
        "{err:?}"
    );
}
