//! Members' regions and coordinators together on a simulated network:
//! control packets and envelopes travel in order per pair of members and
//! per lane, interleaved in any order across pairs and lanes.

use std::collections::BTreeSet;

use super::*;
use crate::envelope::Header;
use crate::shard::shard_of;
use proptest::prelude::*;

const CART: &str = "cart";

fn address(n: u8) -> Arc<str> {
    format!("tcp://198.51.100.{n}:4000").into()
}

fn config() -> ShardingConfig {
    ShardingConfig {
        shards: 16,
        held_limit: 10_000,
        max_active: 1_000,
        passivate_after: Duration::from_secs(3_600),
        lease: Duration::from_secs(10),
        margin: Duration::from_secs(2),
        rebalance_every: Duration::from_secs(1),
        rebalance: Rebalance {
            threshold: 2,
            max_moves: 4,
        },
    }
}

/// What travels between members.
#[derive(Debug)]
enum Item {
    Control(Bytes),
    Envelope(Header, Option<u64>),
}

/// A cluster of members with their regions, and the entities they run.
struct Cluster {
    now: Instant,
    members: Vec<Member>,
    nodes: BTreeMap<Arc<str>, Regions<u64>>,
    /// Per sender, receiver and lane (0 control, 1 envelopes): in order.
    queues: BTreeMap<(Arc<str>, Arc<str>, u8), VecDeque<Item>>,
    /// Active entities: where each runs.
    running: BTreeMap<EntityId, Arc<str>>,
    /// Passivations asked for and not yet done.
    stopping: Vec<(Arc<str>, EntityId)>,
    /// How often each message was handled, refused.
    handled: BTreeMap<u64, u32>,
    refused: BTreeSet<u64>,
    /// Per entity and sending member: the messages handled, in order.
    order: BTreeMap<(EntityId, Arc<str>), Vec<u64>>,
    sender: BTreeMap<u64, Arc<str>>,
    next: u64,
    left: BTreeSet<Arc<str>>,
    /// With remembering regions: the remembered ids (a store every member
    /// reads and writes at once).
    remembered: Option<BTreeSet<EntityId>>,
    /// With the type a singleton's: its entity.
    singleton: Option<EntityId>,
}

impl Cluster {
    fn new(n: u8) -> Self {
        Self::with(n, false)
    }

    /// `n` members whose regions remember their entities.
    fn remembering(n: u8) -> Self {
        Self::with(n, true)
    }

    fn with(n: u8, remember: bool) -> Self {
        let now = Instant::now();
        let mut c = Self {
            now,
            members: Vec::new(),
            nodes: BTreeMap::new(),
            queues: BTreeMap::new(),
            running: BTreeMap::new(),
            stopping: Vec::new(),
            handled: BTreeMap::new(),
            refused: BTreeSet::new(),
            order: BTreeMap::new(),
            sender: BTreeMap::new(),
            next: 0,
            left: BTreeSet::new(),
            remembered: remember.then(BTreeSet::new),
            singleton: None,
        };
        for i in 0..n {
            c.join(i);
        }
        c
    }

    fn join(&mut self, i: u8) {
        let a = address(i);
        let mut m = Member::joining(a.clone(), 1, 1);
        m.state = MemberState::Up;
        m.up_number = u64::from(i) + 1;
        self.members.push(m);
        let mut r = Regions::new(a.clone(), config());
        r.register(CART.into(), self.now);
        if self.remembered.is_some() {
            r.remember(&CART.into(), self.now);
        }
        if let Some(id) = &self.singleton {
            r.singleton(&CART.into(), id.clone(), self.now);
        }
        self.nodes.insert(a, r);
        self.view();
    }

    /// A member that sends to the type but does not host it.
    fn join_client(&mut self, i: u8) {
        let a = address(i);
        let mut m = Member::joining(a.clone(), 1, 1);
        m.state = MemberState::Up;
        m.up_number = u64::from(i) + 1;
        self.members.push(m);
        self.nodes.insert(a, Regions::new(address(i), config()));
        self.view();
    }

    /// Member `i` stops at once: what it was sent and had not handled is
    /// lost with it.
    fn exit(&mut self, i: u8) {
        let gone = address(i);
        self.nodes.remove(&gone);
        self.queues
            .retain(|(from, to, _), _| *from != gone && *to != gone);
        self.stopping.retain(|(at, _)| *at != gone);
        self.running.retain(|_, at| *at != gone);
    }

    fn set_state(&mut self, i: u8, state: MemberState) {
        let a = address(i);
        for m in &mut self.members {
            if m.address == a {
                m.state = state;
            }
        }
        self.view();
    }

    fn view(&mut self) {
        let members = self.members.clone();
        let addresses: Vec<Arc<str>> = self.nodes.keys().cloned().collect();
        for a in addresses {
            let local = members
                .iter()
                .find(|m| m.address == a)
                .expect("a member")
                .clone();
            self.nodes
                .get_mut(&a)
                .expect("a node")
                .set_members(self.now, &local, &members);
            self.pump(&a);
        }
    }

    fn live(&self) -> Vec<Arc<str>> {
        self.members
            .iter()
            .filter(|m| m.state == MemberState::Up)
            .map(|m| m.address.clone())
            .collect()
    }

    fn send(&mut self, from: &Arc<str>, entity: u32) {
        let n = self.next;
        self.next += 1;
        self.sender.insert(n, from.clone());
        let id = EntityId::new(&entity.to_string()).unwrap();
        self.nodes
            .get_mut(from)
            .unwrap()
            .send(&CART.into(), id, n, self.now);
        self.pump(from);
    }

    /// Carries out a member's outputs.
    fn pump(&mut self, me: &Arc<str>) {
        loop {
            let node = self.nodes.get_mut(me).expect("a node");
            if let Some((to, bytes)) = node.poll_transmit() {
                self.queue(me, &to, 0, Item::Control(bytes));
                continue;
            }
            let Some(event) = node.poll_event() else {
                return;
            };
            match event {
                // Counted; the passivations follow.
                Event::LeaseLapsed { .. } => {}
                Event::Forward { to, id, parcel, .. } => {
                    let header = Header::Entity { id, origin: None };
                    self.queue(me, &to, 1, Item::Envelope(header, Some(parcel)));
                }
                Event::Marker {
                    shard, to, handoff, ..
                } => {
                    let header = Header::Marker {
                        from: me.clone(),
                        shard,
                        handoff,
                    };
                    self.queue(me, &to, 1, Item::Envelope(header, None));
                }
                Event::Activate { id, .. } => {
                    if let Some(other) = self.running.get(&id) {
                        panic!("{id} activated on {me} while active on {other}");
                    }
                    self.running.insert(id, me.clone());
                }
                Event::Deliver { id, parcel, .. } => {
                    assert_eq!(self.running.get(&id), Some(me), "{id} not running on {me}");
                    *self.handled.entry(parcel).or_default() += 1;
                    let from = self.sender[&parcel].clone();
                    self.order.entry((id, from)).or_default().push(parcel);
                }
                Event::Passivate { id, .. } => self.stopping.push((me.clone(), id)),
                Event::Refuse { parcel, .. } => {
                    assert!(self.refused.insert(parcel), "{parcel} refused twice");
                }
                Event::Refused { .. } | Event::Delivered { .. } => {}
                Event::Remember { id, .. } => {
                    self.remembered.as_mut().expect("remembering").insert(id);
                }
                Event::Forget { id, .. } => {
                    self.remembered.as_mut().expect("remembering").remove(&id);
                }
                Event::ShardStarted { shard, .. } => {
                    let cart: Arc<str> = CART.into();
                    let ids: Vec<EntityId> = self
                        .remembered
                        .iter()
                        .flatten()
                        .filter(|id| shard_of(CART, id, config().shards) == shard)
                        .cloned()
                        .collect();
                    let node = self.nodes.get_mut(me).expect("a node");
                    for id in ids {
                        node.wake(&cart, id, self.now);
                    }
                }
                Event::Left => {
                    self.left.insert(me.clone());
                }
            }
        }
    }

    fn queue(&mut self, from: &Arc<str>, to: &Arc<str>, lane: u8, item: Item) {
        self.queues
            .entry((from.clone(), to.clone(), lane))
            .or_default()
            .push_back(item);
    }

    /// Delivers the first item of the `pick`th non-empty queue.
    fn deliver(&mut self, pick: usize) -> bool {
        let keys: Vec<_> = self
            .queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return false;
        }
        let (from, to, lane) = keys[pick % keys.len()].clone();
        let item = self
            .queues
            .get_mut(&(from.clone(), to.clone(), lane))
            .unwrap()
            .pop_front()
            .unwrap();
        let now = self.now;
        let Some(node) = self.nodes.get_mut(&to) else {
            return true;
        };
        let cart: Arc<str> = CART.into();
        match item {
            Item::Control(bytes) => node.handle_control(now, &bytes).unwrap(),
            Item::Envelope(Header::Entity { id, .. }, Some(parcel)) => {
                node.arrived(&cart, id, parcel, now)
            }
            Item::Envelope(
                Header::Marker {
                    from,
                    shard,
                    handoff,
                },
                None,
            ) => node.marker(&cart, &from, shard, handoff, now),
            Item::Envelope(..) => unreachable!(),
        }
        self.pump(&to);
        true
    }

    /// Finishes the `pick`th passivation under way.
    fn stop_one(&mut self, pick: usize) {
        if self.stopping.is_empty() {
            return;
        }
        let (at, id) = self.stopping.remove(pick % self.stopping.len());
        assert_eq!(self.running.remove(&id).as_ref(), Some(&at));
        self.nodes
            .get_mut(&at)
            .unwrap()
            .entity_stopped(CART, &id, self.now);
        self.pump(&at);
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        let addresses: Vec<Arc<str>> = self.nodes.keys().cloned().collect();
        for a in addresses {
            let node = self.nodes.get_mut(&a).unwrap();
            if node.poll_timeout().is_some_and(|t| t <= self.now) {
                node.handle_timeout(self.now);
                self.pump(&a);
            }
        }
    }

    /// Delivers and stops everything under way, with time moving slowly
    /// enough for leases to be renewed, until nothing is left to do.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            while self.deliver(0) {}
            while !self.stopping.is_empty() {
                self.stop_one(0);
            }
            self.advance(Duration::from_millis(500));
            let quiet = self.queues.values().all(VecDeque::is_empty) && self.stopping.is_empty();
            let held = self.nodes.values().map(|n| n.stats().held).sum::<usize>();
            let moving = self
                .nodes
                .values()
                .any(|n| n.coordinators.values().any(|c| c.handoffs() > 0));
            if quiet && held == 0 && !moving {
                return;
            }
        }
        let stats: Vec<_> = self
            .nodes
            .iter()
            .map(|(a, n)| (a.clone(), n.stats(), n.coordinator().cloned()))
            .collect();
        panic!("never settled: {stats:#?}");
    }

    fn check(&self) {
        for (n, count) in &self.handled {
            assert_eq!(*count, 1, "message {n} handled {count} times");
        }
        for ((id, from), sent) in &self.order {
            assert!(
                sent.windows(2).all(|w| w[0] < w[1]),
                "{id} from {from}: {sent:?}"
            );
        }
    }

    fn accounted(&self) {
        for n in 0..self.next {
            assert!(
                self.handled.contains_key(&n) || self.refused.contains(&n),
                "message {n} neither handled nor refused"
            );
        }
    }
}

#[test]
fn every_message_is_handled_once_on_one_member() {
    let mut c = Cluster::new(3);
    for n in 0..300 {
        let from = address((n % 3) as u8);
        c.send(&from, n % 40);
    }
    c.settle();
    c.check();
    c.accounted();
    assert!(c.refused.is_empty(), "{:?}", c.refused);
    let coordinators: Vec<bool> = c.nodes.values().map(|n| n.stats().coordinator).collect();
    assert_eq!(coordinators, [true, false, false], "on the oldest member");
    let homed: usize = c.nodes.values().map(|n| n.stats().shards[CART]).sum();
    assert!(homed <= 16 && homed > 0);
}

#[test]
fn a_leaving_member_hands_over_its_shards_and_nothing_is_lost() {
    let mut c = Cluster::new(3);
    for n in 0..200 {
        c.send(&address((n % 3) as u8), n % 40);
    }
    c.settle();
    let leaver = address(1);
    assert!(c.nodes[&leaver].stats().shards[CART] > 0);
    c.nodes.get_mut(&leaver).unwrap().leave(c.now);
    c.pump(&leaver);
    for n in 0..200 {
        c.send(&address((n % 3) as u8), n % 40);
        c.deliver(n as usize);
    }
    c.settle();
    assert!(
        c.left.contains(&leaver),
        "the leaver was told it hosts nothing"
    );
    assert_eq!(c.nodes[&leaver].stats().shards[CART], 0);
    c.set_state(1, MemberState::Leaving);
    c.set_state(1, MemberState::Removed);
    for n in 0..200 {
        c.send(&address(2 * (n % 2) as u8), n % 40);
    }
    c.settle();
    c.check();
    c.accounted();
    assert!(c.refused.is_empty(), "{:?}", c.refused);
}

#[test]
fn a_member_that_hosts_nothing_loses_nothing_when_a_home_leaves() {
    let mut c = Cluster::new(3);
    c.join_client(9);
    let client = address(9);
    for n in 0..200 {
        c.send(&client, n % 40);
        c.deliver(n as usize);
    }
    c.settle();
    let leaver = address(1);
    c.nodes.get_mut(&leaver).unwrap().leave(c.now);
    c.pump(&leaver);
    // The client keeps sending while the leaver's shards move.
    for n in 0..300 {
        c.send(&client, n % 40);
        c.deliver(n as usize * 7);
        if n % 5 == 0 {
            c.stop_one(n as usize);
        }
        if c.left.contains(&leaver) {
            break;
        }
    }
    while !c.left.contains(&leaver) {
        assert!(c.deliver(0) || !c.stopping.is_empty() || !c.queues.is_empty());
        c.stop_one(0);
    }
    // It hosts nothing: it stops at once, and nothing was left with it.
    c.exit(1);
    c.set_state(1, MemberState::Removed);
    for n in 0..100 {
        c.send(&client, n % 40);
    }
    c.settle();
    c.check();
    c.accounted();
    assert!(c.refused.is_empty(), "{:?}", c.refused);
}

#[test]
fn the_oldest_member_leaving_moves_the_coordinator_and_nothing_is_lost() {
    let mut c = Cluster::new(3);
    for n in 0..100 {
        c.send(&address((n % 3) as u8), n % 40);
    }
    c.settle();
    let oldest = address(0);
    c.nodes.get_mut(&oldest).unwrap().leave(c.now);
    c.pump(&oldest);
    c.settle();
    assert!(c.left.contains(&oldest));
    c.set_state(0, MemberState::Leaving);
    c.set_state(0, MemberState::Removed);
    assert!(c.nodes[&address(1)].stats().coordinator);
    for n in 0..100 {
        c.send(&address(1 + (n % 2) as u8), n % 40);
    }
    c.settle();
    c.check();
    c.accounted();
    assert!(c.refused.is_empty(), "{:?}", c.refused);
}

#[test]
fn a_crashed_member_s_entities_start_elsewhere_only_after_its_lease() {
    let mut c = Cluster::new(3);
    for n in 0..100 {
        c.send(&address((n % 3) as u8), n % 40);
    }
    c.settle();
    let dead = address(2);
    let theirs: Vec<EntityId> = c
        .running
        .iter()
        .filter(|(_, at)| **at == dead)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!theirs.is_empty());
    // It stops answering: its last lease runs on; the others down it.
    c.nodes.remove(&dead);
    c.queues
        .retain(|(from, to, _), _| *from != dead && *to != dead);
    let crashed_at = c.now;
    c.members
        .iter_mut()
        .filter(|m| m.address == dead)
        .for_each(|m| m.state = MemberState::Down);
    let members = c.members.clone();
    for (a, node) in &mut c.nodes {
        let local = members.iter().find(|m| m.address == *a).unwrap();
        node.set_members(c.now, local, &members);
    }
    for a in [address(0), address(1)] {
        c.pump(&a);
    }
    for id in &theirs {
        c.running.remove(id);
    }
    let mut restarted_at = None;
    for step in 0..400 {
        c.send(&address((step % 2) as u8), 0);
        for id in &theirs {
            let n: u32 = id.as_str().parse().unwrap();
            c.send(&address(0), n);
        }
        while c.deliver(0) {}
        while !c.stopping.is_empty() {
            c.stop_one(0);
        }
        if restarted_at.is_none() && theirs.iter().any(|id| c.running.contains_key(id)) {
            restarted_at = Some(c.now);
        }
        c.advance(Duration::from_millis(100));
    }
    let restarted_at = restarted_at.expect("its entities run again");
    assert!(
        restarted_at >= crashed_at + config().lease + config().margin - Duration::from_secs(10),
        "never before the dead member's lease could have run out"
    );
    c.check();
}

impl Cluster {
    /// With remembering regions: every remembered entity runs, on the
    /// member hosting its shard.
    fn remembered_run(&self) {
        for id in self.remembered.iter().flatten() {
            let at = self.running.get(id);
            assert!(at.is_some(), "{id} is remembered but not running");
            let shard = shard_of(CART, id, config().shards);
            let home = at.map(|a| self.nodes[a].types[CART].region.homed().any(|s| s == shard));
            assert_eq!(home, Some(true), "{id} runs away from its shard's home");
        }
    }
}

#[test]
fn remembered_entities_start_again_on_their_new_home_after_a_leave() {
    let mut c = Cluster::remembering(3);
    for n in 0..120 {
        c.send(&address((n % 3) as u8), n % 40);
    }
    c.settle();
    assert_eq!(c.remembered.as_ref().map(BTreeSet::len), Some(40));
    c.remembered_run();
    let leaver = address(1);
    let theirs = c.running.values().filter(|at| **at == leaver).count();
    assert!(theirs > 0);
    c.nodes.get_mut(&leaver).unwrap().leave(c.now);
    c.pump(&leaver);
    c.settle();
    assert!(c.left.contains(&leaver));
    // No message since: every entity runs again, none on the leaver.
    assert_eq!(c.running.len(), 40);
    assert!(c.running.values().all(|at| *at != leaver));
    c.remembered_run();
    c.check();
}

#[test]
fn remembered_entities_of_a_crashed_member_start_elsewhere_after_its_lease() {
    let mut c = Cluster::remembering(3);
    for n in 0..120 {
        c.send(&address((n % 3) as u8), n % 40);
    }
    c.settle();
    let dead = address(2);
    assert!(c.running.values().any(|at| *at == dead));
    c.nodes.remove(&dead);
    c.queues
        .retain(|(from, to, _), _| *from != dead && *to != dead);
    c.running.retain(|_, at| *at != dead);
    c.set_state(2, MemberState::Down);
    // Its lease runs out first: the shards move after it, with no message.
    let until = c.now + config().lease + config().margin + Duration::from_secs(5);
    while c.now < until {
        while c.deliver(0) {}
        while !c.stopping.is_empty() {
            c.stop_one(0);
        }
        c.advance(Duration::from_millis(250));
    }
    c.settle();
    assert_eq!(c.running.len(), 40, "every remembered entity runs again");
    c.remembered_run();
    c.check();
}

#[test]
fn an_idle_entity_is_forgotten() {
    let mut c = Cluster::remembering(2);
    c.send(&address(0), 7);
    c.settle();
    assert_eq!(c.remembered.as_ref().map(BTreeSet::len), Some(1));
    c.advance(config().passivate_after);
    while !c.stopping.is_empty() {
        c.stop_one(0);
    }
    assert!(c.running.is_empty());
    assert_eq!(c.remembered.as_ref().map(BTreeSet::len), Some(0));
}

fn boss() -> EntityId {
    EntityId::new("boss").unwrap()
}

impl Cluster {
    /// `n` members whose type is a singleton's (entity `boss`).
    fn singleton(n: u8) -> Self {
        let mut c = Self::with(0, false);
        c.singleton = Some(boss());
        for i in 0..n {
            c.join(i);
        }
        // A new coordinator answers once earlier coordinators' leases
        // are surely over (`ALGORITHM.md`).
        c.run_for(config().lease * 3);
        c
    }

    /// The oldest member up (and not leaving).
    fn oldest(&self) -> Arc<str> {
        self.members
            .iter()
            .filter(|m| m.state == MemberState::Up && !self.left.contains(&m.address))
            .min_by_key(|m| m.up_number)
            .map(|m| m.address.clone())
            .expect("a member")
    }

    /// Runs `d` of time with everything under way delivered and stopped.
    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        while self.now < until {
            while self.deliver(0) {}
            while !self.stopping.is_empty() {
                self.stop_one(0);
            }
            self.advance(Duration::from_millis(250));
        }
    }
}

#[test]
fn a_singleton_runs_on_the_oldest_member_without_a_message() {
    let mut c = Cluster::singleton(3);
    c.settle();
    assert_eq!(c.running.get(&boss()), Some(&address(0)));
    assert_eq!(c.running.len(), 1);
    // Messages from anywhere reach it there.
    for n in 0..30 {
        c.send(&address((n % 3) as u8), 0);
    }
    let (from, to) = (address(2), boss());
    let n = c.next;
    c.sender.insert(n, from.clone());
    c.next += 1;
    c.nodes
        .get_mut(&from)
        .unwrap()
        .send(&CART.into(), to, n, c.now);
    c.pump(&from);
    c.settle();
    assert_eq!(c.handled.get(&n), Some(&1));
    assert_eq!(c.running.get(&boss()), Some(&address(0)));
    c.check();
}

#[test]
fn a_singleton_moves_to_the_next_oldest_when_the_oldest_leaves() {
    let mut c = Cluster::singleton(3);
    c.settle();
    let oldest = address(0);
    c.nodes.get_mut(&oldest).unwrap().leave(c.now);
    c.pump(&oldest);
    let from = address(2);
    for _ in 0..20 {
        let n = c.next;
        c.sender.insert(n, from.clone());
        c.next += 1;
        c.nodes
            .get_mut(&from)
            .unwrap()
            .send(&CART.into(), boss(), n, c.now);
        c.pump(&from);
        c.deliver(n as usize);
    }
    c.settle();
    assert!(c.left.contains(&oldest));
    c.set_state(0, MemberState::Leaving);
    c.set_state(0, MemberState::Removed);
    c.settle();
    assert_eq!(c.running.get(&boss()), Some(&address(1)), "the next oldest");
    assert_eq!(c.handled.len(), 20);
    c.check();
    c.accounted();
    assert!(c.refused.is_empty());
}

#[test]
fn a_singleton_starts_again_after_its_member_crashes_once_its_lease_ran_out() {
    let mut c = Cluster::singleton(3);
    c.settle();
    let dead = address(0);
    assert_eq!(c.running.get(&boss()), Some(&dead));
    c.nodes.remove(&dead);
    c.queues
        .retain(|(from, to, _), _| *from != dead && *to != dead);
    c.running.clear();
    c.set_state(0, MemberState::Down);
    let crashed_at = c.now;
    let mut started_at = None;
    while started_at.is_none() && c.now < crashed_at + Duration::from_secs(60) {
        c.run_for(Duration::from_millis(250));
        if c.running.contains_key(&boss()) {
            started_at = Some(c.now);
        }
    }
    let started_at = started_at.expect("it starts again");
    assert_eq!(c.running.get(&boss()), Some(&address(1)));
    assert!(
        started_at >= crashed_at + config().lease,
        "never before the dead member's lease could have run out"
    );
}

proptest! {
    // 64 cases unless PROPTEST_CASES says otherwise (each is a long run).
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64)
    ))]

    /// Any interleaving of messages, deliveries, passivations, time, one
    /// join and one graceful leave: no entity is ever active on two
    /// members, every message is handled at most once (and, with no crash,
    /// exactly once or refused with a reason), each sender's messages in
    /// order.
    #[test]
    fn planned_moves_lose_nothing_and_handle_nothing_twice(
        ops in proptest::collection::vec((0u8..10, any::<u16>()), 1..400),
        join_at in 0usize..400,
        leave_at in 0usize..400,
        remember in any::<bool>(),
        singleton in any::<bool>(),
        client in any::<bool>(),
    ) {
        let mut c = Cluster::with(0, remember);
        if singleton {
            c.singleton = Some(boss());
        }
        for i in 0..3 {
            c.join(i);
        }
        if client {
            // A member that sends to the type but hosts none.
            c.join_client(9);
        }
        for (i, (op, arg)) in ops.into_iter().enumerate() {
            if i == join_at {
                c.join(3);
            }
            if i == leave_at {
                let leaver = address(1);
                c.nodes.get_mut(&leaver).unwrap().leave(c.now);
                c.pump(&leaver);
            }
            let live = c.live();
            match op {
                0..=3 => {
                    let from = live[usize::from(arg) % live.len()].clone();
                    c.send(&from, u32::from(arg % 30));
                }
                4..=7 => {
                    c.deliver(usize::from(arg));
                }
                8 => c.stop_one(usize::from(arg)),
                _ => c.advance(Duration::from_millis(u64::from(arg % 1_500))),
            }
        }
        c.settle();
        c.check();
        c.accounted();
        if remember {
            // A lease that ran out while messages lagged (its entities
            // passivated) holds again within a renewal round: they wake.
            c.run_for(config().lease);
            c.settle();
            c.remembered_run();
        }
        if singleton {
            // A singleton waits for no message: past the coordinator's
            // start wait, it runs.
            c.run_for(config().lease * 3);
            c.settle();
            prop_assert_eq!(c.running.get(&boss()), Some(&c.oldest()));
        }
    }
}

#[test]
fn settings_that_cannot_work_are_refused_by_name() {
    assert_eq!(ShardingConfig::default().validate(), Ok(()));
    assert_eq!(config().validate(), Ok(()));
    let bad = |f: fn(&mut ShardingConfig)| {
        let mut c = ShardingConfig::default();
        f(&mut c);
        c.validate().unwrap_err().setting
    };
    assert_eq!(bad(|c| c.shards = 0), "shards");
    assert_eq!(bad(|c| c.held_limit = 0), "held_limit");
    assert_eq!(bad(|c| c.lease = Duration::from_millis(10)), "lease");
    assert_eq!(bad(|c| c.margin = Duration::ZERO), "margin");
    let e = ShardingConfig {
        max_active: 0,
        ..ShardingConfig::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "sharding setting `max_active` must be at least 1"
    );
}
