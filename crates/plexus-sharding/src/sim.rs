//! Sharding in the simulator (`plexus-sim`): each simulated process is a
//! cluster member ([`Membership`]) with its [`Regions`], as on a node, and
//! [`campaign`] runs one seed of partitions, crashes, restarts, joins,
//! graceful leaves, loss, duplication and reordering against a witness of
//! every activation and every handled message.
//!
//! ```text
//!   SimShard (one process, address sim:i)
//!     Membership ── its packets (tag 0) ───────────────┐
//!     Regions ─ control packets, entity envelopes ──► Links: per peer, in
//!       ▲ set_members from the membership's view       order, acked and sent
//!       └ activations, deliveries ──► Witness          again (tag 1 frames,
//!                                      (shared)         tag 2 acks)
//! ```
//!
//! The links stand for a node's links: reliable and in order while they
//! hold, over a network that loses, duplicates and reorders datagrams. A
//! partition breaks them (what they had not delivered is lost, as when a
//! node's connection drops); a crash loses the process and everything it
//! held. Entities are the witness's: an activation registers the entity
//! at its member and fails the seed if it is active anywhere else; a
//! passivation or a crash unregisters it. Messages carry unique numbers,
//! so a message handled twice fails the seed too.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use plexus_cluster::sim::{address, index};
use plexus_cluster::{ClusterConfig, Membership};
use plexus_sim::{Address, LinkModel, Protocol, Sim};
use rand::Rng;

use crate::envelope::Header;
use crate::regions::{Event, Regions, ShardingConfig};
use crate::shard::EntityId;

/// The entity type of the simulation.
pub const CART: &str = "cart";

const TAG_MEMBERSHIP: u8 = 0;
const TAG_FRAME: u8 = 1;
const TAG_ACK: u8 = 2;
const TAG_RESET: u8 = 3;
const FRAME_CONTROL: u8 = 0;
const FRAME_ENVELOPE: u8 = 1;
const RETRANSMIT: Duration = Duration::from_millis(100);

/// What every process reports: activations and handled messages, checked
/// as they happen.
#[derive(Debug, Default)]
pub struct Witness {
    /// Active entities and where.
    active: HashMap<EntityId, Address>,
    /// How often each message was handled.
    handled: HashMap<u64, u32>,
    /// Messages refused with a typed error.
    refused: HashSet<u64>,
    /// Safety violations seen, in order.
    pub violations: Vec<String>,
    /// Activations in all.
    pub activations: u64,
    /// With [`CampaignConfig::trace`]: what every member did and saw, on
    /// the virtual clock, to read a failing seed.
    pub trace: Option<Vec<String>>,
    /// The run's start, for the trace's times.
    start: Option<Instant>,
}

impl Witness {
    /// Nanoseconds of the run at `now`.
    fn nanos_at(&self, now: Instant) -> u64 {
        let start = self.start.unwrap_or(now);
        now.saturating_duration_since(start).as_nanos() as u64
    }

    /// Notes `line` at `now` if tracing.
    fn note(&mut self, now: Instant, line: impl FnOnce() -> String) {
        if let (Some(trace), Some(start)) = (&mut self.trace, self.start) {
            let at = now.saturating_duration_since(start).as_secs_f64();
            trace.push(format!("{at:>9.3} {}", line()));
        }
    }

    fn activate(&mut self, id: &EntityId, at: Address) {
        self.activations += 1;
        if let Some(other) = self.active.insert(id.clone(), at) {
            if other != at {
                self.violations.push(format!(
                    "{id} activated on sim:{at} while active on sim:{other}"
                ));
            }
        }
    }

    fn passivated(&mut self, id: &EntityId, at: Address) {
        if self.active.get(id) == Some(&at) {
            self.active.remove(id);
        }
    }

    fn crashed(&mut self, at: Address) {
        self.active.retain(|_, a| *a != at);
    }

    fn handled(&mut self, id: &EntityId, message: u64, at: Address) {
        if self.active.get(id) != Some(&at) {
            self.violations.push(format!(
                "message {message} handled by {id} on sim:{at}, where it is not active"
            ));
        }
        let n = self.handled.entry(message).or_default();
        *n += 1;
        if *n > 1 {
            self.violations
                .push(format!("message {message} handled {n} times"));
        }
    }

    /// Whether message `n` was handled.
    pub fn was_handled(&self, n: u64) -> bool {
        self.handled.contains_key(&n)
    }

    /// Messages handled.
    pub fn handled_count(&self) -> usize {
        self.handled.len()
    }

    /// Messages refused with a typed error.
    pub fn refused_count(&self) -> usize {
        self.refused.len()
    }
}

/// The witness all processes of a run share.
pub type SharedWitness = Arc<Mutex<Witness>>;

/// A link's reliability with one peer, both directions. A link's sending
/// session is named by when it started (nanoseconds of the run, unique per
/// sender): a receiver started later than a session refuses it with a
/// reset, as a restarted node refuses its predecessor's connection, and
/// what the sender had not had acked is lost with it (at most once).
#[derive(Debug, Default)]
struct Link {
    session: u64,
    next_seq: u64,
    unacked: VecDeque<(u64, Bytes)>,
    /// The peer's sending life heard last, and what is expected of it.
    peer_session: Option<u64>,
    expected: u64,
    early: BTreeMap<u64, Bytes>,
}

impl Link {
    /// Its sending session ends (a break, the peer's crash or its reset):
    /// what it had not had acked is lost, and the next frame opens a new
    /// one, named by when it is sent.
    fn end(&mut self) {
        self.session = 0;
        self.next_seq = 0;
        self.unacked.clear();
    }
}

/// A cluster member with its sharding, as a simulated process.
#[derive(Debug)]
pub struct SimShard {
    me: Address,
    /// The member.
    pub membership: Membership,
    /// Its sharding.
    pub regions: Regions<u64>,
    /// When this process started (nanoseconds of the run): sessions older
    /// than that were its predecessor's.
    birth: u64,
    /// The last sending session started.
    last_session: u64,
    links: BTreeMap<Address, Link>,
    retransmit_at: Option<Instant>,
    out: VecDeque<(Address, Bytes)>,
    witness: SharedWitness,
    /// Asked to leave: the member leaves the cluster once its shards are
    /// handed over.
    leaving: bool,
    /// The view the regions were last given.
    last_view: Vec<(Arc<str>, plexus_cluster::MemberState, u64, u64)>,
}

impl SimShard {
    /// Member `i` of life `incarnation`, joining through `through` (forming
    /// a cluster without it), hosting [`CART`].
    pub fn new(
        i: Address,
        cluster: &ClusterConfig,
        sharding: ShardingConfig,
        incarnation: u64,
        through: Option<Address>,
        now: Instant,
        witness: SharedWitness,
    ) -> Self {
        let mut config = cluster.clone();
        config.seeds = through.map(address).into_iter().collect();
        config.rng_seed ^= (i as u64) << 32 ^ incarnation;
        let membership = Membership::new(config, address(i), incarnation, now)
            .expect("simulated member settings are valid");
        let mut regions = Regions::new(address(i).into(), sharding);
        regions.register(CART.into(), now);
        let birth = witness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .nanos_at(now);
        Self {
            me: i,
            membership,
            regions,
            birth,
            last_session: birth,
            links: BTreeMap::new(),
            retransmit_at: None,
            out: VecDeque::new(),
            witness,
            leaving: false,
            last_view: Vec::new(),
        }
    }

    /// Notes `line` in the trace, as this member at `now`.
    fn note(&self, now: Instant, line: impl FnOnce() -> String) {
        let me = self.me;
        self.witness().note(now, || format!("sim:{me} {}", line()));
    }

    /// A message numbered `n` for cart `id`, sent on this member.
    pub fn send(&mut self, now: Instant, id: EntityId, n: u64) {
        self.regions.send(&CART.into(), id, n, now);
        self.settle(now);
    }

    /// Hands this member's shards over, then leaves the cluster.
    pub fn leave(&mut self, now: Instant) {
        self.leaving = true;
        self.regions.leave(now);
        self.settle(now);
    }

    /// Whether it was asked to leave.
    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    /// Its links break (a partition): what they had not delivered is lost.
    pub fn break_links(&mut self) {
        self.links.values_mut().for_each(Link::end);
    }

    /// `peer`'s process ended (a crash): its connection here ends with it,
    /// and what it had not acked is lost; the next frame to it starts a
    /// new link (which its next life, if one comes, takes).
    pub fn peer_crashed(&mut self, peer: Address) {
        if let Some(link) = self.links.get_mut(&peer) {
            link.end();
        }
    }

    fn send_frame(&mut self, now: Instant, to: Address, kind: u8, payload: &[u8]) {
        let nanos = self.witness().nanos_at(now);
        let link = self.links.entry(to).or_default();
        if link.session == 0 {
            // A new sending session, named by when it opens.
            link.session = nanos.max(self.last_session + 1);
            self.last_session = link.session;
        }
        let seq = link.next_seq;
        link.next_seq += 1;
        let mut b = BytesMut::with_capacity(18 + payload.len());
        b.put_u8(TAG_FRAME);
        b.put_u64(link.session);
        b.put_u64(seq);
        b.put_u8(kind);
        b.put_slice(payload);
        let frame = b.freeze();
        link.unacked.push_back((seq, frame.clone()));
        self.out.push_back((to, frame));
    }

    fn on_frame(&mut self, now: Instant, from: Address, frame: &Bytes) {
        if frame.len() < 18 {
            return;
        }
        let session = u64::from_be_bytes(frame[1..9].try_into().expect("8 bytes"));
        let seq = u64::from_be_bytes(frame[9..17].try_into().expect("8 bytes"));
        if session < self.birth {
            self.note(now, || {
                format!(
                    "reset session {session} of sim:{from} (born {})",
                    self.birth
                )
            });
            // A connection to this process's predecessor: refused.
            let mut reset = BytesMut::with_capacity(9);
            reset.put_u8(TAG_RESET);
            reset.put_u64(session);
            self.out.push_back((from, reset.freeze()));
            return;
        }
        let link = self.links.entry(from).or_default();
        if link.peer_session.is_some_and(|p| session < p) {
            // A datagram of a link that broke, late (reordered or
            // duplicated): a connection never delivers its predecessor's
            // bytes after its own, and taking it would restart the link at
            // an old place (sessions only grow: a break or a new life).
            return;
        }
        if link.peer_session != Some(session) {
            // A new link: everything of it is for this process (it started
            // after this process did), from its first frame on.
            link.expected = 0;
            link.peer_session = Some(session);
            link.early.clear();
        }
        let mut ready = Vec::new();
        if seq == link.expected {
            ready.push(frame.slice(17..));
            link.expected += 1;
            while let Some(next) = link.early.remove(&link.expected) {
                ready.push(next.slice(17..));
                link.expected += 1;
            }
        } else if seq > link.expected {
            link.early.insert(seq, frame.clone());
        }
        let mut ack = BytesMut::with_capacity(17);
        ack.put_u8(TAG_ACK);
        ack.put_u64(session);
        ack.put_u64(link.expected);
        self.out.push_back((from, ack.freeze()));
        for item in ready {
            self.on_item(now, from, &item);
        }
    }

    fn on_ack(&mut self, from: Address, ack: &Bytes) {
        let session = u64::from_be_bytes(ack[1..9].try_into().expect("8 bytes"));
        let upto = u64::from_be_bytes(ack[9..17].try_into().expect("8 bytes"));
        if let Some(link) = self.links.get_mut(&from).filter(|l| l.session == session) {
            while link.unacked.front().is_some_and(|(s, _)| *s < upto) {
                link.unacked.pop_front();
            }
        }
    }

    fn on_item(&mut self, now: Instant, from: Address, item: &Bytes) {
        let Some((&kind, body)) = item.split_first() else {
            return;
        };
        let body = item.slice(item.len() - body.len()..);
        match kind {
            FRAME_CONTROL => {
                self.note(now, || match crate::wire::Message::decode(&body) {
                    Ok(m) => format!("from sim:{from}: {m:?}"),
                    Err(e) => format!("from sim:{from}: undecodable: {e}"),
                });
                let _ = self.regions.handle_control(now, &body);
            }
            FRAME_ENVELOPE => {
                let Ok((header, rest)) = Header::decode(&body) else {
                    return;
                };
                let cart: Arc<str> = CART.into();
                match header {
                    Header::Entity { id, .. } if rest.len() == 8 => {
                        let n = u64::from_be_bytes(rest[..].try_into().expect("8 bytes"));
                        self.regions.arrived(&cart, id, n, now);
                    }
                    Header::Marker {
                        from: region,
                        shard,
                        handoff,
                    } => self.regions.marker(&cart, &region, shard, handoff, now),
                    Header::Entity { .. } => {}
                }
            }
            _ => {}
        }
        let _ = from;
    }

    /// Carries out everything the membership and the regions produced.
    fn settle(&mut self, now: Instant) {
        loop {
            let mut busy = false;
            while let Some(event) = self.membership.poll_event() {
                use plexus_cluster::ClusterEvent as E;
                if matches!(
                    event,
                    E::MemberDowned { .. } | E::SelfDowned { .. } | E::MemberUnreachable(_)
                ) {
                    self.note(now, || format!("cluster: {event:?}"));
                }
            }
            // The view as the member holds it (it may learn members
            // without an event of theirs, from a state it merged).
            let view: Vec<(Arc<str>, plexus_cluster::MemberState, u64, u64)> = self
                .membership
                .members()
                .into_iter()
                .map(|m| (m.address, m.state, m.life, m.up_number))
                .collect();
            let view_changed = view != self.last_view;
            self.last_view = view;
            if view_changed {
                self.note(now, || {
                    let local = self.membership.local();
                    let others: Vec<String> = self
                        .last_view
                        .iter()
                        .map(|(a, st, life, up)| format!("{a}:{st:?}:{life}:{up}"))
                        .collect();
                    format!(
                        "view: me {:?} life {}; coordinator {:?}; {}",
                        local.state,
                        local.life,
                        self.regions.coordinator(),
                        others.join(" ")
                    )
                });
                busy = true;
                let local = self.membership.local().clone();
                let members = self.membership.members();
                self.regions.set_members(now, &local, &members);
            }
            while let Some(t) = self.membership.poll_transmit() {
                busy = true;
                let mut b = BytesMut::with_capacity(1 + t.packet.len());
                b.put_u8(TAG_MEMBERSHIP);
                b.put_slice(&t.packet);
                self.out
                    .push_back((index(&t.to).unwrap_or(usize::MAX), b.freeze()));
            }
            while let Some((to, packet)) = self.regions.poll_transmit() {
                busy = true;
                if let Some(to) = index(&to) {
                    self.send_frame(now, to, FRAME_CONTROL, &packet);
                }
            }
            while let Some(event) = self.regions.poll_event() {
                busy = true;
                self.on_event(now, event);
            }
            if !busy {
                break;
            }
        }
        if self.retransmit_at.is_none() && self.links.values().any(|l| !l.unacked.is_empty()) {
            self.retransmit_at = Some(now + RETRANSMIT);
        }
    }

    fn on_event(&mut self, now: Instant, event: Event<u64>) {
        let me = self.me;
        match event {
            Event::LeaseLapsed {
                entity_type,
                active,
            } => {
                self.note(now, || {
                    format!("lease of {entity_type} lapsed with {active} active")
                });
            }
            Event::Forward { to, id, parcel, .. } => {
                self.note(now, || format!("forward {parcel} for {id} to {to}"));
                let Some(to) = index(&to) else { return };
                let mut b = BytesMut::new();
                Header::Entity { id, origin: None }.encode(&mut b);
                b.put_u64(parcel);
                self.send_frame(now, to, FRAME_ENVELOPE, &b);
            }
            Event::Marker {
                shard, to, handoff, ..
            } => {
                let Some(to) = index(&to) else { return };
                let mut b = BytesMut::new();
                Header::Marker {
                    from: address(me).into(),
                    shard,
                    handoff,
                }
                .encode(&mut b);
                self.send_frame(now, to, FRAME_ENVELOPE, &b);
            }
            Event::Activate { id, .. } => {
                self.note(now, || format!("activate {id}"));
                self.witness().activate(&id, me);
            }
            Event::Deliver { id, parcel, .. } => {
                self.note(now, || format!("deliver {parcel} to {id}"));
                self.witness().handled(&id, parcel, me);
            }
            Event::Passivate { entity_type, id } => {
                self.note(now, || format!("passivate {id}"));
                self.witness().passivated(&id, me);
                self.regions.entity_stopped(&entity_type, &id, now);
            }
            Event::Refuse {
                parcel, error, id, ..
            } => {
                self.note(now, || format!("refuse {parcel} to {id}: {error}"));
                self.witness().refused.insert(parcel);
            }
            Event::Left => self.membership.leave(now),
            Event::ShardStarted { shard, .. } => {
                self.note(now, || format!("shard {shard} started"));
            }
            Event::Refused { .. }
            | Event::Delivered { .. }
            | Event::Remember { .. }
            | Event::Forget { .. } => {}
        }
    }

    fn witness(&self) -> std::sync::MutexGuard<'_, Witness> {
        self.witness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Protocol for SimShard {
    type Address = Address;
    type Event = ();

    fn handle_packet(&mut self, now: Instant, from: Address, packet: Bytes) {
        match packet.first() {
            Some(&TAG_MEMBERSHIP) => {
                let _ = self.membership.handle_packet(now, &packet.slice(1..));
            }
            Some(&TAG_FRAME) => self.on_frame(now, from, &packet),
            Some(&TAG_ACK) if packet.len() == 17 => self.on_ack(from, &packet),
            Some(&TAG_RESET) if packet.len() == 9 => {
                let session = u64::from_be_bytes(packet[1..9].try_into().expect("8 bytes"));
                let current = self.links.get(&from).map(|l| l.session);
                self.note(now, || {
                    format!("reset from sim:{from} of session {session} (current {current:?})")
                });
                if let Some(link) = self.links.get_mut(&from).filter(|l| l.session == session) {
                    link.end();
                }
            }
            _ => {}
        }
        self.settle(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.membership.poll_timeout().is_some_and(|t| t <= now) {
            self.membership.handle_timeout(now);
        }
        if self.regions.poll_timeout().is_some_and(|t| t <= now) {
            self.regions.handle_timeout(now);
        }
        if self.retransmit_at.is_some_and(|t| t <= now) {
            self.retransmit_at = None;
            for (to, link) in &self.links {
                for (_, frame) in &link.unacked {
                    self.out.push_back((*to, frame.clone()));
                }
            }
        }
        self.settle(now);
    }

    fn poll_transmit(&mut self) -> Option<(Address, Bytes)> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.membership.poll_timeout(),
            self.regions.poll_timeout(),
            self.retransmit_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn poll_event(&mut self) -> Option<()> {
        None
    }
}

/// What one seed of the campaign saw.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Safety violations (the seed fails with any).
    pub violations: Vec<String>,
    /// Messages sent during the faults.
    pub sent: u64,
    /// Of those, handled.
    pub handled: u64,
    /// Refused with a typed error.
    pub refused: u64,
    /// Messages sent after the heal to every entity, and not handled within
    /// the bound: liveness failures.
    pub unanswered: Vec<u64>,
    /// Activations in all.
    pub activations: u64,
    /// Faults injected.
    pub faults: u32,
    /// With [`CampaignConfig::trace`]: the run's trace.
    pub trace: Vec<String>,
}

/// The campaign's settings.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// Members at the start.
    pub members: usize,
    /// Entities messages go to.
    pub entities: u32,
    /// How long faults are injected (virtual time).
    pub fault_time: Duration,
    /// How long after the heal every live entity must answer.
    pub liveness_bound: Duration,
    /// The network.
    pub link: LinkModel,
    /// Keep a trace of the run in [`Outcome::trace`].
    pub trace: bool,
}

impl Default for CampaignConfig {
    fn default() -> Self {
        Self {
            members: 5,
            entities: 40,
            fault_time: Duration::from_secs(60),
            liveness_bound: Duration::from_secs(60),
            link: LinkModel {
                loss: 0.01,
                duplicate: 0.01,
                reorder: 0.01,
                latency: Duration::from_millis(1),
                jitter: Duration::from_millis(2),
            },
            trace: false,
        }
    }
}

/// The sharding settings of the campaign: short leases, so a run sees
/// many of them.
pub fn sharding_config() -> ShardingConfig {
    ShardingConfig {
        shards: 32,
        lease: Duration::from_secs(3),
        margin: Duration::from_secs(2),
        rebalance_every: Duration::from_millis(500),
        ..ShardingConfig::default()
    }
}

/// A live member that is up, to join through.
fn up_member(sim: &Sim<SimShard>) -> Option<Address> {
    sim.live().find(|&a| {
        sim.process(a).is_some_and(|p| {
            !p.is_leaving() && p.membership.local().state == plexus_cluster::MemberState::Up
        })
    })
}

/// Restarts a crashed member at its address as a new life (a higher
/// incarnation: the virtual milliseconds since the start, as a node takes
/// the wall clock's), joining through a member that is up.
fn restart(
    sim: &mut Sim<SimShard>,
    back: Address,
    cluster: &ClusterConfig,
    sharding: ShardingConfig,
    witness: &SharedWitness,
) {
    let through = up_member(sim);
    let now = sim.now();
    let life = 2 + sim.elapsed().as_millis() as u64;
    let p = SimShard::new(back, cluster, sharding, life, through, now, witness.clone());
    sim.restart(back, p);
}

/// Runs one seed: a cluster forms, then for `fault_time` messages go to
/// random entities from random members while partitions (which break the
/// links), crashes, restarts, stalls, joins and graceful leaves come and
/// go; then everything heals, and one message to every entity must be
/// handled within `liveness_bound`. Safety is checked throughout.
pub fn campaign(seed: u64, config: &CampaignConfig) -> Outcome {
    let witness = SharedWitness::default();
    if config.trace {
        witness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .trace = Some(Vec::new());
    }
    let cluster = ClusterConfig::default();
    let sharding = sharding_config();
    let mut sim = Sim::new(seed, config.link.clone());
    let start = sim.now();
    witness
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .start = Some(start);
    let note = |sim: &Sim<SimShard>, line: String| {
        witness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .note(sim.now(), || format!("campaign: {line}"));
    };
    for i in 0..config.members {
        let through = (i > 0).then_some(0);
        sim.add(SimShard::new(
            i,
            &cluster,
            sharding,
            1,
            through,
            start,
            witness.clone(),
        ));
    }
    sim.run_for(Duration::from_secs(10));
    let mut next = 0u64;
    let mut outcome = Outcome::default();
    let id = |n: u32| EntityId::new(&n.to_string()).expect("a short id");
    let fault_end = sim.now() + config.fault_time;
    let mut crashed: Vec<Address> = Vec::new();
    let mut partitioned = false;
    while sim.now() < fault_end {
        let step = Duration::from_millis(sim.rng().gen_range(20..400));
        sim.run_for(step);
        let live: Vec<Address> = sim
            .live()
            .filter(|&a| sim.process(a).is_some_and(|p| !p.is_leaving()))
            .collect();
        if live.is_empty() {
            break;
        }
        let roll: u32 = sim.rng().gen_range(0..1000);
        match roll {
            // Messages, most of the time.
            0..=939 => {
                for _ in 0..sim.rng().gen_range(1..6) {
                    let from = live[sim.rng().gen_range(0..live.len())];
                    let entity = sim.rng().gen_range(0..config.entities);
                    let now = sim.now();
                    if let Some(p) = sim.process_mut(from) {
                        p.send(now, id(entity), next);
                    }
                    sim.wake(from);
                    next += 1;
                }
            }
            940..=954 if !partitioned && live.len() > 2 => {
                let k = sim.rng().gen_range(1..live.len());
                let mut side = live.clone();
                for j in (1..side.len()).rev() {
                    let o = sim.rng().gen_range(0..=j);
                    side.swap(j, o);
                }
                let (a, b) = side.split_at(k);
                note(&sim, format!("partition {a:?} | {b:?}"));
                sim.partition(a, b);
                for &p in &side {
                    if let Some(p) = sim.process_mut(p) {
                        p.break_links();
                    }
                }
                partitioned = true;
                outcome.faults += 1;
            }
            955..=974 if partitioned => {
                note(&sim, "heal".into());
                sim.heal();
                partitioned = false;
            }
            // Crashes keep a majority of the members running.
            975..=982 if live.len() > config.members / 2 + 2 => {
                let victim = live[sim.rng().gen_range(0..live.len())];
                note(&sim, format!("crash sim:{victim}"));
                sim.crash(victim);
                for &other in &live {
                    if let Some(p) = sim.process_mut(other) {
                        p.peer_crashed(victim);
                    }
                }
                witness
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .crashed(victim);
                crashed.push(victim);
                outcome.faults += 1;
            }
            983..=988 if !crashed.is_empty() => {
                let back = crashed.remove(0);
                note(&sim, format!("restart sim:{back}"));
                restart(&mut sim, back, &cluster, sharding, &witness);
                outcome.faults += 1;
            }
            989..=992 => {
                let who = live[sim.rng().gen_range(0..live.len())];
                let d = Duration::from_millis(sim.rng().gen_range(100..500));
                note(&sim, format!("stall sim:{who} {d:?}"));
                sim.stall(who, d);
                outcome.faults += 1;
            }
            993..=995 if sim.len() < config.members + 3 => {
                let i = sim.len();
                let now = sim.now();
                let through = up_member(&sim);
                note(&sim, format!("join sim:{i} through {through:?}"));
                sim.add(SimShard::new(
                    i,
                    &cluster,
                    sharding,
                    1,
                    through,
                    now,
                    witness.clone(),
                ));
                outcome.faults += 1;
            }
            996..=999 if live.len() > 3 && !partitioned => {
                let who = live[sim.rng().gen_range(0..live.len())];
                let now = sim.now();
                note(&sim, format!("leave sim:{who}"));
                if let Some(p) = sim.process_mut(who) {
                    p.leave(now);
                }
                sim.wake(who);
                outcome.faults += 1;
            }
            _ => {}
        }
    }
    outcome.sent = next;
    note(
        &sim,
        "heal, restart every crashed member; probes in 30 s".into(),
    );
    sim.heal();
    for back in std::mem::take(&mut crashed) {
        restart(&mut sim, back, &cluster, sharding, &witness);
    }
    // Settle: membership converges, leases and hand-offs finish.
    sim.run_for(Duration::from_secs(30));
    let live: Vec<Address> = sim
        .live()
        .filter(|&a| {
            sim.process(a)
                .is_some_and(|p| !p.is_leaving() && p.membership.local().state.is_live())
        })
        .collect();
    let mut probes = Vec::new();
    if !live.is_empty() {
        for entity in 0..config.entities {
            let from = live[entity as usize % live.len()];
            let now = sim.now();
            if let Some(p) = sim.process_mut(from) {
                p.send(now, id(entity), next);
            }
            sim.wake(from);
            probes.push(next);
            next += 1;
        }
    }
    let bound = config.liveness_bound;
    let w = witness.clone();
    let probes2 = probes.clone();
    sim.run_until(bound, move |_| {
        let w = w.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        probes2.iter().all(|&n| w.was_handled(n))
    });
    if config.trace {
        let now = sim.now();
        for a in sim.live().collect::<Vec<_>>() {
            if let Some(p) = sim.process(a) {
                p.note(now, || format!("at the end: {:?}", p.regions.stats()));
            }
        }
    }
    let w = witness
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    outcome.violations = w.violations.clone();
    outcome.handled = (0..outcome.sent).filter(|&n| w.was_handled(n)).count() as u64;
    outcome.refused = w.refused_count() as u64;
    outcome.activations = w.activations;
    outcome.unanswered = probes.into_iter().filter(|&n| !w.was_handled(n)).collect();
    outcome.trace = w.trace.clone().unwrap_or_default();
    outcome
}
