//! A peer that completes the handshake and then misbehaves: messages of an
//! unknown type, payloads that do not decode, garbage. Each gets the
//! documented answer (receipt error, dead letter, closed link) and other
//! links carry on.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::service::{Counter, CounterActor};
use plexus_core::remote::RemoteMessage;
use plexus_core::{ActorRef, ActorSystem, NodeId};
use plexus_net::StackSpec;
use plexus_remote::handshake::Handshake;
use plexus_remote::wire::{GoodbyeCode, ReceiptStatus, Resolution, WireFrame};
use plexus_remote::{Node, NodeConfig};
use plexus_transport::Link;

const T: Duration = Duration::from_secs(5);

/// Dials `addr` and completes the handshake by hand, and says it bound no
/// lane connections: the session is up.
async fn raw_peer(addr: &str, cookie: &str) -> Link {
    let (link, _) = raw_handshake(addr, cookie, 0x0bad).await;
    link.send(WireFrame::Lanes { bound: vec![] }.encode())
        .await
        .unwrap();
    link
}

/// Dials `addr` as node `node` and completes the handshake by hand; returns
/// the link and the session it set up.
async fn raw_handshake(addr: &str, cookie: &str, node: u64) -> (Link, u64) {
    let spec: StackSpec = "tcp / framing".parse().unwrap();
    let mut link = plexus_transport::tcp::connect(&spec, addr.parse().unwrap())
        .await
        .unwrap();
    let mut hs = Handshake::new(NodeId::from_u64(node), cookie, [node as u8; 16], vec![]);
    link.send(hs.hello().encode()).await.unwrap();
    loop {
        let f = WireFrame::decode(link.recv_message().await.unwrap()).unwrap();
        let (reply, done) = hs.handle_frame(f).unwrap();
        if let Some(r) = reply {
            link.send(r.encode()).await.unwrap();
        }
        if let Some(verified) = done {
            return (link, verified.session);
        }
    }
}

async fn next_frame(link: &mut Link) -> WireFrame {
    let bytes = tokio::time::timeout(T, link.recv_message())
        .await
        .unwrap()
        .unwrap();
    WireFrame::decode(bytes).unwrap()
}

/// Sends `payload` to actor `to` as a message of `type_id` asking for
/// receipt `id`, and returns the receipt's status.
async fn receipt(link: &mut Link, to: u64, type_id: u64, id: u64, payload: Bytes) -> ReceiptStatus {
    link.send(
        WireFrame::Message {
            to,
            type_id,
            receipt: id,
            payload,
        }
        .encode(),
    )
    .await
    .unwrap();
    match next_frame(link).await {
        WireFrame::Receipt { id: got, status } if got == id => status,
        other => panic!("expected receipt {id}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_peer_gets_typed_answers_and_only_its_link_closes() {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("c")).unwrap();
    let uri = node.listen("tcp://127.0.0.1:0").await.unwrap();
    let counter = system.spawn(CounterActor::default());
    node.publish(&counter, "counter").unwrap();
    let addr = uri.strip_prefix("tcp://").unwrap().to_owned();

    // A well-behaved node, connected before and used after.
    let other_sys = ActorSystem::new();
    let other = Node::start(&other_sys, NodeConfig::default().cookie("c")).unwrap();
    let good: ActorRef<Counter> = other.resolve(&format!("{uri}/counter")).await.unwrap();
    good.tell(Counter::Add(1));

    let mut bad = raw_peer(&addr, "c").await;
    bad.send(
        WireFrame::Resolve {
            request: 1,
            type_id: Counter::TYPE_ID,
            type_name: Counter::TYPE_NAME.into(),
            name: "counter".into(),
        }
        .encode(),
    )
    .await
    .unwrap();
    let serial = match next_frame(&mut bad).await {
        WireFrame::Resolved {
            resolution: Resolution::Found(s),
            ..
        } => s,
        other => panic!("{other:?}"),
    };
    let dead_before = system.dead_letters().count();

    // An unknown message type id: a receipt error and a dead letter.
    assert_eq!(
        receipt(&mut bad, serial, 0xdead_beef, 7, Bytes::from_static(b"x")).await,
        ReceiptStatus::NoSuchActor
    );

    // The right type id, a payload that does not decode as it.
    assert_eq!(
        receipt(
            &mut bad,
            serial,
            Counter::TYPE_ID,
            8,
            Bytes::from_static(&[0xff, 0xff, 0xff])
        )
        .await,
        ReceiptStatus::Undecodable
    );
    assert_eq!(system.dead_letters().count(), dead_before + 2);

    // Back-to-back messages to one actor are delivered as a run (one
    // mailbox lock): one that does not decode in the middle of it is a dead
    // letter, the others arrive.
    let mut dead = system.dead_letters().subscribe();
    for payload in [
        plexus_core::remote::encode(&Counter::Add(10))
            .unwrap()
            .to_vec(),
        vec![0xff, 0xff, 0xff],
        plexus_core::remote::encode(&Counter::Add(20))
            .unwrap()
            .to_vec(),
        plexus_core::remote::encode(&Counter::Add(30))
            .unwrap()
            .to_vec(),
    ] {
        bad.send(
            WireFrame::Message {
                to: serial,
                type_id: Counter::TYPE_ID,
                receipt: 0,
                payload: Bytes::from(payload),
            }
            .encode(),
        )
        .await
        .unwrap();
    }
    let letter = dead
        .recv()
        .await
        .expect("a dead letter for the undecodable message");
    assert_eq!(letter.target.serial(), serial);
    assert_eq!(system.dead_letters().count(), dead_before + 3);
    // A receipted message behind the run: its receipt says the run before
    // it is in the mailbox, ahead of the ask below.
    assert_eq!(
        receipt(
            &mut bad,
            serial,
            Counter::TYPE_ID,
            9,
            plexus_core::remote::encode(&Counter::Add(0)).unwrap()
        )
        .await,
        ReceiptStatus::Delivered
    );
    assert_eq!(good.ask(Counter::Get, T).await, Ok(61));

    // Garbage: the node closes this link.
    bad.send(Bytes::from_static(&[0xee, 1, 2, 3]))
        .await
        .unwrap();
    let closed = tokio::time::timeout(T, async {
        loop {
            if bad.recv_message().await.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the node must close a link that sent garbage"
    );

    // The well-behaved node and the actor are unaffected.
    assert_eq!(good.ask(Counter::Get, T).await, Ok(61));
    assert!(counter.is_alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_the_cookie_never_reaches_an_actor() {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("right")).unwrap();
    let uri = node.listen("tcp://127.0.0.1:0").await.unwrap();
    let spec: StackSpec = "tcp / framing".parse().unwrap();
    let mut link =
        plexus_transport::tcp::connect(&spec, uri.strip_prefix("tcp://").unwrap().parse().unwrap())
            .await
            .unwrap();
    // Skip the handshake and send a message at once.
    link.send(
        WireFrame::Message {
            to: 1,
            type_id: Counter::TYPE_ID,
            receipt: 1,
            payload: Bytes::new(),
        }
        .encode(),
    )
    .await
    .unwrap();
    let mut saw_reject = false;
    while let Ok(Ok(bytes)) = tokio::time::timeout(T, link.recv_message()).await {
        if let Ok(WireFrame::Reject { detail, .. }) = WireFrame::decode(bytes) {
            assert!(detail.contains("protocol violation"), "{detail}");
            saw_reject = true;
        }
    }
    assert!(saw_reject, "the node answers with REJECT and closes");
}

/// Waits until the node closes `link` (reading what it still sends).
async fn closed_by_node(link: &mut Link) -> bool {
    tokio::time::timeout(T, async { while link.recv_message().await.is_ok() {} })
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lane_connections_without_their_session_are_refused_and_overfilled_lanes_closed() {
    let system = ActorSystem::new();
    // A lane connection waits this long for its session to appear.
    let config = NodeConfig::default()
        .cookie("c")
        .connect_timeout(Duration::from_millis(300));
    let node = Node::start(&system, config).unwrap();
    let uri = node.listen("tcp://127.0.0.1:0").await.unwrap();
    let addr = uri.strip_prefix("tcp://").unwrap().to_owned();

    // A session nobody set up.
    let (mut stray, _) = raw_handshake(&addr, "c", 0x0b01).await;
    let bind = |session| {
        WireFrame::Bind {
            session,
            lane: 2,
            candidate: 0,
        }
        .encode()
    };
    stray.send(bind(0x1234_5678)).await.unwrap();
    match next_frame(&mut stray).await {
        WireFrame::Reject { code, detail } => {
            assert_eq!(code, plexus_remote::wire::RejectCode::Session);
            assert!(detail.contains("no session"), "{detail}");
        }
        other => panic!("expected REJECT, got {other:?}"),
    }
    assert!(closed_by_node(&mut stray).await);

    // Node 0x0b02 sets up a session (its LANES not sent yet); node 0x0b03
    // claims it.
    let (_owner, session) = raw_handshake(&addr, "c", 0x0b02).await;
    let (mut thief, _) = raw_handshake(&addr, "c", 0x0b03).await;
    thief.send(bind(session)).await.unwrap();
    match next_frame(&mut thief).await {
        WireFrame::Reject { code, detail } => {
            assert_eq!(code, plexus_remote::wire::RejectCode::Session);
            assert!(detail.contains("is with node"), "{detail}");
        }
        other => panic!("expected REJECT, got {other:?}"),
    }
    assert!(closed_by_node(&mut thief).await);

    // An established peer that numbers an adaptive lane's frames far
    // beyond what the resequencing buffer takes: its link is closed.
    let mut flooder = raw_peer(&addr, "c").await;
    let frame = WireFrame::Sequenced {
        lane: 2,
        seq: 1 << 40,
        frame: WireFrame::Goodbye {
            code: GoodbyeCode::Shutdown,
        }
        .encode(),
    };
    flooder.send(frame.encode()).await.unwrap();
    assert!(
        closed_by_node(&mut flooder).await,
        "a frame beyond the resequencing window closes the link"
    );
    // A GOODBYE with a code this version does not know is a protocol
    // error: the link closes, typed, and nothing panics.
    let mut stranger = raw_peer(&addr, "c").await;
    let mut unknown = WireFrame::Goodbye {
        code: GoodbyeCode::Shutdown,
    }
    .encode()
    .to_vec();
    *unknown.last_mut().unwrap() = 0xEE;
    stranger.send(Bytes::from(unknown)).await.unwrap();
    assert!(
        closed_by_node(&mut stranger).await,
        "an unknown goodbye code closes the link"
    );
    // The node goes on accepting well-behaved peers.
    let _ok = raw_peer(&addr, "c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_when_one_of_its_lane_connections_closes() {
    let system = ActorSystem::new();
    let node = Node::start(&system, NodeConfig::default().cookie("c")).unwrap();
    let uri = node.listen("tcp://127.0.0.1:0").await.unwrap();
    let addr = uri.strip_prefix("tcp://").unwrap().to_owned();

    // Node 0x0b04 binds a bulk lane connection to its session, then says
    // the session is complete.
    let (mut primary, session) = raw_handshake(&addr, "c", 0x0b04).await;
    let (mut lane, _) = raw_handshake(&addr, "c", 0x0b04).await;
    let bind = WireFrame::Bind {
        session,
        lane: 2,
        candidate: 0,
    };
    lane.send(bind.encode()).await.unwrap();
    assert_eq!(
        next_frame(&mut lane).await,
        bind,
        "the node echoes the BIND"
    );
    primary
        .send(
            WireFrame::Lanes {
                bound: vec![(2, 0)],
            }
            .encode(),
        )
        .await
        .unwrap();
    // The session is up: a resolve on the primary link is answered.
    primary
        .send(
            WireFrame::Resolve {
                request: 1,
                type_id: Counter::TYPE_ID,
                type_name: Counter::TYPE_NAME.into(),
                name: "nobody".into(),
            }
            .encode(),
        )
        .await
        .unwrap();
    assert!(matches!(
        next_frame(&mut primary).await,
        WireFrame::Resolved {
            resolution: Resolution::NoSuchName,
            ..
        }
    ));
    assert_eq!(node.connected_nodes(), vec![NodeId::from_u64(0x0b04)]);

    // The lane connection goes: the node ends the session, primary link
    // included.
    lane.close();
    assert!(
        closed_by_node(&mut primary).await,
        "losing a lane connection ends the session"
    );
}
