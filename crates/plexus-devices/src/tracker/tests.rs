//! Servers and devices on virtual time in `plexus-sim`: assignment through
//! a seed, a crashed owner, duplicate drivers, loss, ring changes, and
//! hostile input to a tracker alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use plexus_cluster::Ring;
use plexus_sim::{Address, LinkModel, Protocol, Sim};

use super::*;
use crate::config::SessionConfig;
use crate::session::{DeviceEvent, DeviceSession};

#[derive(Debug)]
enum Ev {
    Server(TrackerEvent),
    Device(DeviceEvent),
}

/// A server or a device in the simulation; packets are addressed by name.
enum Node {
    Server(Tracker),
    Device {
        session: DeviceSession,
        values: Vec<i64>,
        events: VecDeque<DeviceEvent>,
    },
}

struct P {
    node: Node,
    names: Arc<Vec<Arc<str>>>,
}

impl P {
    fn index(&self, name: &str) -> Address {
        self.names
            .iter()
            .position(|n| &**n == name)
            .unwrap_or(usize::MAX)
    }

    /// A device answers each request at once, as the W5 device does.
    fn react(&mut self) {
        if let Node::Device {
            session,
            values,
            events,
        } = &mut self.node
        {
            while let Some(e) = session.poll_event() {
                if let DeviceEvent::ReportRequested { seq } = e {
                    let _ = session.send_report(seq, values);
                }
                events.push_back(e);
            }
        }
    }
}

impl Protocol for P {
    type Address = Address;
    type Event = Ev;

    fn handle_packet(&mut self, now: Instant, _from: Address, packet: Bytes) {
        match &mut self.node {
            Node::Server(t) => {
                let _ = t.handle_packet(now, &packet);
            }
            Node::Device { session, .. } => {
                if let Ok(p) = Packet::parse(&packet) {
                    let _ = session.handle_packet(now, &p);
                }
            }
        }
        self.react();
    }

    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.node {
            Node::Server(t) => t.handle_timeout(now),
            Node::Device { session, .. } => session.handle_timeout(now),
        }
        self.react();
    }

    fn poll_transmit(&mut self) -> Option<(Address, Bytes)> {
        let t = match &mut self.node {
            Node::Server(t) => t.poll_transmit(),
            Node::Device { session, .. } => session.poll_transmit(),
        }?;
        let (To::Server(name) | To::Device(name)) = &t.to;
        Some((self.index(name), t.packet))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.node {
            Node::Server(t) => t.poll_timeout(),
            Node::Device { session, .. } => session.poll_timeout(),
        }
    }

    fn poll_event(&mut self) -> Option<Ev> {
        match &mut self.node {
            Node::Server(t) => t.poll_event().map(Ev::Server),
            Node::Device { events, .. } => events.pop_front().map(Ev::Device),
        }
    }
}

/// `servers` servers (s0..) on one ring and device slots (d0..).
struct World {
    sim: Sim<P>,
    names: Arc<Vec<Arc<str>>>,
    servers: usize,
}

fn lan() -> LinkModel {
    LinkModel {
        latency: Duration::from_micros(250),
        ..LinkModel::default()
    }
}

fn ring_of(members: &[Arc<str>]) -> Arc<Ring> {
    Arc::new(Ring::new(members.iter().map(|m| (m, 1)), 128, 5))
}

impl World {
    fn new(seed: u64, servers: usize, devices: usize, link: LinkModel) -> Self {
        let names: Arc<Vec<Arc<str>>> = Arc::new(
            (0..servers)
                .map(|i| format!("s{i}"))
                .chain((0..devices).map(|i| format!("d{i}")))
                .map(Arc::from)
                .collect(),
        );
        let mut sim = Sim::new(seed, link);
        let ring = ring_of(&names[..servers]);
        for i in 0..servers {
            let mut t = Tracker::new(
                TrackerConfig::default(),
                Arc::clone(&names[i]),
                LocalDirectory::new(),
                sim.now(),
            );
            t.handle_ring(sim.now(), Arc::clone(&ring), []);
            sim.add(P {
                node: Node::Server(t),
                names: Arc::clone(&names),
            });
        }
        Self {
            sim,
            names,
            servers,
        }
    }

    /// Starts device slot `slot` as `device` in run `session`.
    fn start_device(&mut self, slot: usize, device: u64, session: u64, seeds: &[usize]) -> Address {
        let address = self.servers + slot;
        let p = P {
            node: Node::Device {
                session: DeviceSession::new(
                    SessionConfig::default(),
                    DeviceId(device),
                    SessionId(session),
                    Arc::clone(&self.names[address]),
                    seeds.iter().map(|s| Arc::clone(&self.names[*s])).collect(),
                    self.sim.now(),
                )
                .expect("seeds and short names"),
                values: (1..=1000).collect(),
                events: VecDeque::new(),
            },
            names: Arc::clone(&self.names),
        };
        if address < self.sim.len() {
            self.sim.restart(address, p);
        } else {
            assert_eq!(self.sim.add(p), address, "device slots start in order");
        }
        self.sim.wake(address);
        address
    }

    fn tracker(&self, server: usize) -> &Tracker {
        match &self.sim.process(server).expect("server alive").node {
            Node::Server(t) => t,
            Node::Device { .. } => unreachable!("servers come first"),
        }
    }

    fn session(&self, address: Address) -> &DeviceSession {
        match &self.sim.process(address).expect("device alive").node {
            Node::Device { session, .. } => session,
            Node::Server(_) => unreachable!("devices come after servers"),
        }
    }

    fn server_index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| &**n == name)
            .expect("a server name")
    }

    fn reports(&self, server: usize, device: u64) -> u64 {
        self.sim
            .process(server)
            .and_then(|p| match &p.node {
                Node::Server(t) => t.totals(DeviceId(device)).map(|t| t.0),
                Node::Device { .. } => None,
            })
            .unwrap_or(0)
    }
}

/// A device id that `ring` gives to someone other than `not`.
fn device_owned_elsewhere(names: &[Arc<str>], not: usize) -> u64 {
    let ring = ring_of(names);
    (1..)
        .find(|d: &u64| ring.owner(&DeviceId(*d).key()) != Some(&names[not]))
        .expect("some id is owned elsewhere")
}

#[test]
fn a_seed_forwards_the_registration_to_the_owner_which_requests_reports() {
    let mut w = World::new(1, 3, 1, lan());
    let id = device_owned_elsewhere(&w.names[..3], 0);
    let d = w.start_device(0, id, 1, &[0]);
    w.sim.run_for(Duration::from_secs(1));
    let owner = w.tracker(0).owner(DeviceId(id), None);
    let o = w.server_index(&owner);
    assert_ne!(o, 0);
    assert_eq!(w.session(d).server(), Some(&owner));
    assert!(w.tracker(o).holds(DeviceId(id)));
    assert!(!w.tracker(0).holds(DeviceId(id)));
    assert!(w.sim.events().iter().any(|e| e.process == 0
        && matches!(&e.event, Ev::Server(TrackerEvent::Forwarded { to, .. }) if *to == owner)));
    // One request and one report per round trip of 0.5 ms.
    let (reports, total) = w.tracker(o).totals(DeviceId(id)).expect("held");
    assert!(reports > 1000, "{reports}");
    assert_eq!(total, reports as i64 * 500_500);
    let record = w
        .tracker(o)
        .directory()
        .get(DeviceId(id))
        .expect("recorded");
    assert_eq!(record.server, owner);
    assert_eq!(record.status, DeviceStatus::Up);
}

#[test]
fn a_crashed_owner_moves_the_device_to_the_rings_next_owner_within_the_bound() {
    let mut w = World::new(2, 3, 1, lan());
    let id = 42;
    let d = w.start_device(0, id, 1, &[0, 1, 2]);
    w.sim.run_for(Duration::from_secs(2));
    let first = w.session(d).server().cloned().expect("attached");
    let victim = w.server_index(&first);
    let before: u64 = (0..3).map(|s| w.reports(s, id)).sum();
    let crashed_at = w.sim.elapsed();
    w.sim.crash(victim);
    // The next owner by the ring, skipping the crashed server.
    let next = ring_of(&w.names[..3])
        .owners(&DeviceId(id).key(), 3)
        .into_iter()
        .find(|m| ***m != *first)
        .cloned()
        .expect("three servers");
    let moved = w.sim.run_until(Duration::from_secs(10), |sim| {
        sim.events().iter().any(
            |e| matches!(&e.event, Ev::Device(DeviceEvent::Attached { server }) if *server == next),
        )
    });
    assert!(moved, "the device never attached to {next}");
    let attached_at = w
        .sim
        .events()
        .iter()
        .rev()
        .find(|e| matches!(&e.event, Ev::Device(DeviceEvent::Attached { .. })))
        .expect("attached")
        .at;
    let bound = SessionConfig::default().liveness.detection_bound() + Duration::from_secs(1);
    assert!(
        attached_at - crashed_at < bound,
        "moved after {:?}, bound {bound:?}",
        attached_at - crashed_at
    );
    w.sim.run_for(Duration::from_millis(500));
    let n = w.server_index(&next);
    assert!(w.reports(n, id) > 100, "reports resumed at {next}");
    assert!(before > 0);
    assert!(w.sim.events().iter().any(
        |e| matches!(&e.event, Ev::Device(DeviceEvent::ServerLost { server }) if *server == first)
    ));
}

#[test]
fn of_two_drivers_of_one_device_the_older_is_stopped_in_either_order() {
    for (first, second) in [(1u64, 2u64), (2, 1)] {
        let mut w = World::new(3, 3, 2, lan());
        let a = w.start_device(0, 7, first, &[0]);
        w.sim.run_for(Duration::from_millis(500));
        let b = w.start_device(1, 7, second, &[1]);
        w.sim.run_for(Duration::from_millis(500));
        let (older, newer) = if first < second { (a, b) } else { (b, a) };
        assert!(w.session(older).is_stopped(), "older {first} {second}");
        assert!(!w.session(newer).is_stopped());
        let owner = w.session(newer).server().cloned().expect("attached");
        let o = w.server_index(&owner);
        assert!(w.sim.events().iter().any(|e| e.process == o
            && matches!(e.event, Ev::Server(TrackerEvent::DuplicateStopped { stopped, .. })
                if stopped == SessionId(first.min(second)))));
        // The newer one reports; the stopped one sends nothing any more.
        let before = w.reports(o, 7);
        let sent = w.sim.traffic(older).packets;
        w.sim.run_for(Duration::from_millis(200));
        assert!(w.reports(o, 7) > before);
        assert_eq!(w.sim.traffic(older).packets, sent);
    }
}

#[test]
fn reports_keep_flowing_over_lossy_links_through_resends() {
    let mut w = World::new(4, 1, 4, LinkModel { loss: 0.2, ..lan() });
    for slot in 0..4 {
        w.start_device(slot, 100 + slot as u64, 1, &[0]);
    }
    w.sim.run_for(Duration::from_secs(3));
    let stats = w.tracker(0).stats();
    assert_eq!(stats.devices, 4);
    assert!(stats.resends > 100, "{stats:?}");
    for slot in 0..4 {
        assert!(w.reports(0, 100 + slot) > 100, "{stats:?}");
    }
    // No device was lost at 20 % loss.
    assert_eq!(stats.lost, 0, "{stats:?}");
}

#[test]
fn a_ring_change_hands_devices_to_their_new_owner() {
    let mut w = World::new(5, 3, 8, lan());
    for slot in 0..8 {
        w.start_device(slot, 1000 + slot as u64, 1, &[0]);
    }
    w.sim.run_for(Duration::from_millis(500));
    // s2 leaves the ring (as if it left the cluster): its devices go.
    let two = ring_of(&w.names[..2]);
    let now = w.sim.now();
    for s in 0..3 {
        if let Some(Node::Server(t)) = w.sim.process_mut(s).map(|p| &mut p.node) {
            t.handle_ring(now, Arc::clone(&two), []);
        }
        w.sim.wake(s);
    }
    w.sim.run_for(Duration::from_millis(500));
    assert_eq!(w.tracker(2).stats().devices, 0);
    for slot in 0..8 {
        let server = w.session(3 + slot).server().cloned().expect("attached");
        assert_ne!(&*server, "s2");
        let s = w.server_index(&server);
        assert!(w.tracker(s).holds(DeviceId(1000 + slot as u64)));
    }
}

/// Gives server `s` the ring of `members`, as its cluster's update would.
fn set_ring(w: &mut World, s: usize, members: &[Arc<str>]) {
    let (now, ring) = (w.sim.now(), ring_of(members));
    if let Some(Node::Server(t)) = w.sim.process_mut(s).map(|p| &mut p.node) {
        t.handle_ring(now, ring, []);
    }
    w.sim.wake(s);
}

#[test]
fn many_devices_settle_on_their_owners_while_the_servers_rings_form() {
    // The W5 start with three servers: each member first sees a ring of
    // itself, then of two, then of all three, at different times, while
    // 64 devices register with every seed. Whatever each server decided
    // on its partial ring, every device ends at its owner on the full
    // ring and reports there, and no other server holds it.
    let mut w = World::new(11, 3, 64, lan());
    let names: Vec<Arc<str>> = w.names[..3].to_vec();
    for s in 0..3 {
        set_ring(&mut w, s, &names[s..=s]);
    }
    for slot in 0..64 {
        w.start_device(slot, 5000 + slot as u64, 1, &[0, 1, 2]);
    }
    w.sim.run_for(Duration::from_millis(30));
    set_ring(&mut w, 0, &names[..2]);
    set_ring(&mut w, 1, &names[..2]);
    w.sim.run_for(Duration::from_millis(40));
    set_ring(&mut w, 0, &names);
    w.sim.run_for(Duration::from_millis(70));
    set_ring(&mut w, 2, &names);
    w.sim.run_for(Duration::from_millis(150));
    set_ring(&mut w, 1, &names);
    let full = ring_of(&names);
    let settled = w.sim.run_until(Duration::from_secs(10), |sim| {
        (0..64).all(|slot| {
            let id = DeviceId(5000 + slot as u64);
            let owner = full.owner(&id.key()).expect("a ring of three");
            let o = names.iter().position(|n| n == owner).expect("a member");
            let at_owner = sim.process(o).is_some_and(
                |p| matches!(&p.node, Node::Server(t) if t.totals(id).is_some_and(|(r, _)| r > 0)),
            );
            let elsewhere = (0..3).filter(|s| *s != o).any(|s| {
                sim.process(s)
                    .is_some_and(|p| matches!(&p.node, Node::Server(t) if t.holds(id)))
            });
            at_owner && !elsewhere
        })
    });
    assert!(settled, "some device did not settle on its owner");
    let reports_before: Vec<u64> = (0..64)
        .map(|s| w.reports(0, 5000 + s) + w.reports(1, 5000 + s) + w.reports(2, 5000 + s))
        .collect();
    w.sim.run_for(Duration::from_millis(100));
    for slot in 0..64u64 {
        let now = w.reports(0, 5000 + slot) + w.reports(1, 5000 + slot) + w.reports(2, 5000 + slot);
        assert!(
            now > reports_before[slot as usize],
            "d{} stopped reporting",
            5000 + slot
        );
    }
}

#[test]
fn same_seed_same_trace() {
    let run = || {
        let mut w = World::new(
            9,
            3,
            3,
            LinkModel {
                loss: 0.05,
                ..lan()
            },
        );
        for slot in 0..3 {
            w.start_device(slot, slot as u64, 1, &[0, 1, 2]);
        }
        w.sim.run_for(Duration::from_secs(1));
        w.sim.crash(1);
        w.sim.run_for(Duration::from_secs(2));
        w.sim.trace().to_owned()
    };
    assert_eq!(run(), run());
}

// ------------------------------------------------------- a tracker alone

fn register(device: u64, session: u64, source: &str) -> Bytes {
    Packet::Register {
        device: DeviceId(device),
        session: SessionId(session),
        hops: 0,
        heartbeat_ms: 100,
        reply_to: source.into(),
        failed: None,
    }
    .to_bytes()
}

fn alone(config: TrackerConfig) -> (Tracker, Instant) {
    let now = Instant::now();
    (
        Tracker::new(config, "s0".into(), LocalDirectory::new(), now),
        now,
    )
}

#[test]
fn a_registration_flood_from_one_source_is_rate_limited_and_the_table_bounded() {
    let (mut t, now) = alone(TrackerConfig {
        register_burst: 100,
        register_rate: 10,
        max_devices: 1000,
        ..TrackerConfig::default()
    });
    let mut limited = 0;
    for d in 0..10_000 {
        match t.handle_packet(now, &register(d, 1, "evil")) {
            Err(PacketError::RateLimited { .. }) => limited += 1,
            r => assert!(r.is_ok(), "{r:?}"),
        }
    }
    assert_eq!(limited, 9_900);
    assert_eq!(t.stats().devices, 100);
    // Many sources: the table stops at max_devices.
    let mut full = 0;
    for d in 0..5_000u64 {
        if let Err(PacketError::TableFull { .. }) =
            t.handle_packet(now, &register(20_000 + d, 1, &format!("src{d}")))
        {
            full += 1;
        }
    }
    assert_eq!(t.stats().devices, 1000);
    assert!(full > 0);
    // The limiter's table is bounded too.
    assert!(t.limiter.sources() <= TrackerConfig::default().max_sources);
    // It still serves: a known device's heartbeat is taken.
    let hb = Packet::DeviceHeartbeat {
        device: DeviceId(0),
        session: SessionId(1),
        reply_to: "evil".into(),
    }
    .to_bytes();
    assert_eq!(t.handle_packet(now, &hb), Ok(()));
}

#[test]
fn a_device_claiming_another_devices_id_is_refused() {
    let (mut t, now) = alone(TrackerConfig::default());
    t.handle_packet(now, &register(5, 10, "good"))
        .expect("taken");
    let report = |session| {
        Packet::Report {
            device: DeviceId(5),
            session: SessionId(session),
            seq: 1,
            values: Values::from_slice(&[1, 2, 3]),
        }
        .to_bytes()
    };
    assert_eq!(
        t.handle_packet(now, &report(11)),
        Err(PacketError::WrongSession {
            device: DeviceId(5),
            claimed: SessionId(11),
            holder: SessionId(10)
        })
    );
    // An older session registering is told to stop; the holder stays.
    assert!(matches!(
        t.handle_packet(now, &register(5, 9, "impostor")),
        Err(PacketError::OlderDuplicate { .. })
    ));
    assert_eq!(t.totals(DeviceId(5)), Some((0, 0)));
    t.handle_packet(now, &report(10))
        .expect("the holder's report");
    assert_eq!(t.totals(DeviceId(5)), Some((1, 6)));
    let stop = std::iter::from_fn(|| t.poll_transmit())
        .filter_map(|tr| Packet::parse(&tr.packet).ok().map(|p| (tr.to, p)))
        .find(|(_, p)| matches!(p, Packet::Stop { .. }));
    assert!(
        matches!(&stop, Some((To::Device(to), Packet::Stop { session: SessionId(9), .. })) if &**to == "impostor"),
        "{stop:?}"
    );
    // Garbage is refused, not a panic.
    assert!(matches!(
        t.handle_packet(now, &Bytes::from_static(&[3, 1, 2])),
        Err(PacketError::Malformed(_))
    ));
    assert_eq!(t.stats().refused, 3);
}

#[test]
fn a_silent_device_is_lost_then_forgotten() {
    let (mut t, now) = alone(TrackerConfig::default());
    t.handle_packet(now, &register(5, 1, "d")).expect("taken");
    let mut at = now;
    let mut events = Vec::new();
    for _ in 0..1000 {
        let Some(next) = t.poll_timeout() else { break };
        at = next.max(at);
        t.handle_timeout(at);
        while t.poll_transmit().is_some() {}
        events.extend(std::iter::from_fn(|| t.poll_event()));
        if !t.holds(DeviceId(5)) {
            break;
        }
    }
    assert!(events.contains(&TrackerEvent::Lost {
        device: DeviceId(5)
    }));
    assert!(events.contains(&TrackerEvent::Forgotten {
        device: DeviceId(5)
    }));
    let lost_after = at - now - TrackerConfig::default().forget_after;
    assert!(
        lost_after
            <= TrackerConfig::default().liveness.detection_bound() + Duration::from_millis(10),
        "{lost_after:?}"
    );
}
