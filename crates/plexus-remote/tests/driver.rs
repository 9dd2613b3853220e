//! A user's own protocol under the node's driver (`plexus_remote::driver`)
//! between two nodes over tcp, and the same protocol in the simulator
//! (`plexus_sim`): one `Protocol` trait serves both.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_core::{ActorRef, ActorSystem};
use plexus_remote::driver::{self, Host, Input, Protocol};
use plexus_remote::{ForgedRefs, Node, NodeConfig};
use plexus_sim::{LinkModel, Sim};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// What a [`PingPong`] endpoint heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    Ping(u32),
    Pong(u32),
}

/// Sends `count` numbered pings to its peer (if it has one), one every
/// `interval`, and answers every ping with a pong of the same number.
/// Generic over the address, as a protocol written once for the simulator
/// and the node is.
struct PingPong<A> {
    peer: Option<A>,
    count: u32,
    sent: u32,
    interval: Duration,
    next: Option<Instant>,
    out: VecDeque<(A, Bytes)>,
    heard: VecDeque<Heard>,
}

const PING: u8 = b'i';
const PONG: u8 = b'o';

impl<A> PingPong<A> {
    /// Pings `peer` `count` times from `now` on.
    fn pinger(peer: A, count: u32, interval: Duration, now: Instant) -> Self {
        Self {
            peer: Some(peer),
            count,
            sent: 0,
            interval,
            next: Some(now),
            out: VecDeque::new(),
            heard: VecDeque::new(),
        }
    }

    /// Only answers.
    fn answerer() -> Self {
        Self {
            peer: None,
            count: 0,
            sent: 0,
            interval: Duration::ZERO,
            next: None,
            out: VecDeque::new(),
            heard: VecDeque::new(),
        }
    }
}

fn packet(kind: u8, n: u32) -> Bytes {
    let mut b = vec![kind];
    b.extend_from_slice(&n.to_be_bytes());
    Bytes::from(b)
}

impl<A: Clone> Protocol for PingPong<A> {
    type Address = A;
    type Event = Heard;

    fn handle_packet(&mut self, _now: Instant, from: A, bytes: Bytes) {
        let Some((&kind, n)) = bytes.split_first() else {
            return;
        };
        let Ok(n) = <[u8; 4]>::try_from(n).map(u32::from_be_bytes) else {
            return;
        };
        match kind {
            PING => {
                self.heard.push_back(Heard::Ping(n));
                self.out.push_back((from, packet(PONG, n)));
            }
            PONG => self.heard.push_back(Heard::Pong(n)),
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        let Some(peer) = &self.peer else { return };
        if self.next.is_none_or(|t| t > now) {
            return;
        }
        self.sent += 1;
        self.out.push_back((peer.clone(), packet(PING, self.sent)));
        self.next = (self.sent < self.count).then(|| now + self.interval);
    }

    fn poll_transmit(&mut self) -> Option<(A, Bytes)> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }

    fn poll_event(&mut self) -> Option<Heard> {
        self.heard.pop_front()
    }
}

/// The protocol's packets between nodes: a node's actor is not told who
/// sent a message, so this one names its sender (its node's URI).
#[derive(Serialize, Deserialize)]
struct Wire {
    from: String,
    packet: Vec<u8>,
}
plexus_core::remote_message!(Wire = "test.PingPong");

const ACTOR: &str = "pingpong";

/// The test's host: packets to `<node>/pingpong`, events to the test.
struct NodeHost {
    node: Node,
    me: String,
    refs: ForgedRefs<Wire>,
    heard: mpsc::UnboundedSender<Heard>,
    /// Receives the packets; kept as long as the driver runs.
    _inbox: ActorRef<Wire>,
}

impl Host<PingPong<Arc<str>>> for NodeHost {
    type Command = ();

    fn command(&mut self, _: &mut PingPong<Arc<str>>, _now: Instant, (): ()) {}

    fn transmit(&mut self, _: &mut PingPong<Arc<str>>, _now: Instant, to: Arc<str>, packet: Bytes) {
        let r = self
            .refs
            .get(&self.node, &to, || format!("{to}/{ACTOR}"))
            .expect("the peer's URI is valid");
        r.tell(Wire {
            from: self.me.clone(),
            packet: packet.to_vec(),
        });
    }

    fn event(&mut self, _: &mut PingPong<Arc<str>>, _now: Instant, heard: Heard) {
        let _ = self.heard.send(heard);
    }
}

/// Runs `protocol` on `node` (listening at `me`) under the driver; returns
/// what it hears.
fn drive(
    system: &ActorSystem,
    node: &Node,
    me: &str,
    protocol: PingPong<Arc<str>>,
) -> mpsc::UnboundedReceiver<Heard> {
    let (inputs, received) = mpsc::unbounded_channel();
    let inbox = system.spawn_fn(move |w: Wire, _ctx| {
        let _ = inputs.send(Input::Packet(Arc::from(w.from), Bytes::from(w.packet)));
    });
    node.publish(&inbox, ACTOR).expect("the name is free");
    let (heard, rx) = mpsc::unbounded_channel();
    let host = NodeHost {
        node: node.clone(),
        me: me.to_string(),
        refs: ForgedRefs::default(),
        heard,
        _inbox: inbox,
    };
    tokio::spawn(driver::run(protocol, host, received));
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Heard>, n: usize) -> Vec<Heard> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(rx.recv().await.expect("the driver runs"));
    }
    v
}

#[tokio::test]
async fn a_users_protocol_runs_between_two_nodes_under_the_driver() {
    let config = NodeConfig::default().cookie("test-cookie");
    let (sa, sb) = (ActorSystem::new(), ActorSystem::new());
    let a = Node::start(&sa, config.clone()).unwrap();
    let b = Node::start(&sb, config).unwrap();
    let uri_a = a.listen("tcp://127.0.0.1:0").await.unwrap();
    let uri_b = b.listen("tcp://127.0.0.1:0").await.unwrap();

    let mut at_b = drive(&sb, &b, &uri_b, PingPong::answerer());
    let now = tokio::time::Instant::now().into_std();
    let pinger = PingPong::pinger(Arc::from(uri_b.as_str()), 3, Duration::from_millis(1), now);
    let mut at_a = drive(&sa, &a, &uri_a, pinger);

    let pings: Vec<Heard> = (1..=3).map(Heard::Ping).collect();
    let pongs: Vec<Heard> = (1..=3).map(Heard::Pong).collect();
    assert_eq!(next(&mut at_b, 3).await, pings);
    assert_eq!(next(&mut at_a, 3).await, pongs);
}

#[test]
fn the_same_protocol_runs_in_the_simulator() {
    let mut sim = Sim::new(7, LinkModel::default());
    let start = sim.start();
    let b = sim.add(PingPong::answerer());
    let a = sim.add(PingPong::pinger(b, 3, Duration::from_secs(1), start));
    sim.run_for(Duration::from_secs(10));
    let heard_by = |p| -> Vec<Heard> {
        sim.events()
            .iter()
            .filter(|r| r.process == p)
            .map(|r| r.event)
            .collect()
    };
    assert_eq!(heard_by(b), (1..=3).map(Heard::Ping).collect::<Vec<_>>());
    assert_eq!(heard_by(a), (1..=3).map(Heard::Pong).collect::<Vec<_>>());
}
