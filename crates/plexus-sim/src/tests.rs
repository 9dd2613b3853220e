use super::*;

/// Sends a numbered packet to every peer each second and records what it
/// hears.
struct Chatter {
    peers: Vec<Address>,
    next: Option<Instant>,
    sent: u32,
    out: Vec<(Address, Bytes)>,
    events: Vec<(Address, u32)>,
}

impl Chatter {
    fn new(start: Instant, peers: Vec<Address>) -> Self {
        Self {
            peers,
            next: Some(start + Duration::from_secs(1)),
            sent: 0,
            out: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl Protocol for Chatter {
    type Address = Address;
    type Event = (Address, u32);

    fn handle_packet(&mut self, _now: Instant, from: Address, packet: Bytes) {
        let n = u32::from_be_bytes(packet.as_ref().try_into().expect("4-byte test packets"));
        self.events.push((from, n));
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.sent += 1;
        for &p in &self.peers {
            self.out
                .push((p, Bytes::copy_from_slice(&self.sent.to_be_bytes())));
        }
        self.next = Some(now + Duration::from_secs(1));
    }

    fn poll_transmit(&mut self) -> Option<(Address, Bytes)> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }

    fn poll_event(&mut self) -> Option<(Address, u32)> {
        if self.events.is_empty() {
            None
        } else {
            Some(self.events.remove(0))
        }
    }
}

fn pair(seed: u64, model: LinkModel) -> Sim<Chatter> {
    let mut sim = Sim::new(seed, model);
    let start = sim.start();
    sim.add(Chatter::new(start, vec![1]));
    sim.add(Chatter::new(start, vec![0]));
    sim
}

fn heard_by(sim: &Sim<Chatter>, address: Address) -> Vec<u32> {
    sim.events()
        .iter()
        .filter(|r| r.process == address)
        .map(|r| r.event.1)
        .collect()
}

#[test]
fn packets_arrive_after_the_link_latency() {
    let mut sim = pair(1, LinkModel::default());
    sim.run_for(Duration::from_millis(1004));
    assert!(heard_by(&sim, 1).is_empty());
    sim.run_for(Duration::from_millis(1));
    assert_eq!(heard_by(&sim, 1), vec![1]);
    assert_eq!(sim.events()[0].at, Duration::from_millis(1005));
}

#[test]
fn one_way_partition_cuts_one_direction_and_heal_restores_it() {
    let mut sim = pair(1, LinkModel::default());
    sim.partition_one_way(&[0], &[1]);
    sim.run_for(Duration::from_millis(2500));
    assert!(heard_by(&sim, 1).is_empty());
    assert_eq!(heard_by(&sim, 0), vec![1, 2]);
    sim.heal();
    sim.run_for(Duration::from_secs(1));
    assert_eq!(heard_by(&sim, 1), vec![3]);
    assert_eq!(sim.traffic(0).packets, 3);
}

#[test]
fn a_crashed_process_hears_nothing_and_a_restarted_one_does() {
    let mut sim = pair(1, LinkModel::default());
    let crashed = sim.crash(1).expect("process 1 runs");
    assert_eq!(crashed.sent, 0);
    sim.run_for(Duration::from_millis(2500));
    assert!(heard_by(&sim, 1).is_empty());
    let start = sim.now();
    sim.restart(1, Chatter::new(start, vec![0]));
    sim.run_for(Duration::from_secs(1));
    assert_eq!(heard_by(&sim, 1), vec![3]);
}

#[test]
fn a_stalled_process_handles_its_queue_when_it_wakes() {
    let mut sim = pair(1, LinkModel::default());
    sim.stall(1, Duration::from_millis(3500));
    sim.run_for(Duration::from_millis(3400));
    assert!(heard_by(&sim, 1).is_empty());
    assert_eq!(sim.process(1).map(|p| p.sent), Some(0));
    sim.run_for(Duration::from_millis(200));
    assert_eq!(heard_by(&sim, 1), vec![1, 2, 3]);
    // Its missed deadline ran once on waking, not once per missed second.
    assert_eq!(sim.process(1).map(|p| p.sent), Some(1));
    assert!(sim
        .events()
        .iter()
        .all(|r| r.process == 0 || r.at == Duration::from_millis(3500)));
}

#[test]
fn one_seed_replays_the_same_trace_and_another_differs() {
    let lossy = LinkModel {
        loss: 0.3,
        duplicate: 0.2,
        reorder: 0.2,
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(3),
    };
    let run = |seed| {
        let mut sim = pair(seed, lossy.clone());
        sim.run_for(Duration::from_secs(60));
        sim.trace().to_owned()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn check_seeds_names_the_failing_seed() {
    let result = std::panic::catch_unwind(|| {
        check_seeds(0..10, |seed| assert!(seed != 6, "six"));
    });
    let cause = result.expect_err("seed 6 fails");
    let message = cause.downcast_ref::<String>().expect("a formatted message");
    assert!(message.starts_with("seed 6: six"), "{message}");
}
