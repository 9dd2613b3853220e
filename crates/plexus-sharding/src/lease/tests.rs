use super::*;
use proptest::prelude::*;

const LEASE: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_lease_runs_from_the_request_not_the_answer() {
    let t0 = Instant::now();
    let mut lease = RegionLease::new(LEASE);
    assert_eq!(lease.handle_timeout(t0), LeaseState::None);
    let seq = lease.request(t0);
    // However late the answer comes, the lease ends 10 s after the request.
    assert!(lease.answered(seq));
    assert_eq!(lease.poll_timeout(), Some(t0 + LEASE));
    assert!(lease.holds(t0 + LEASE - ms(1)));
    assert_eq!(
        lease.handle_timeout(t0 + LEASE - ms(1)),
        LeaseState::Valid(t0 + LEASE)
    );
    assert_eq!(lease.handle_timeout(t0 + LEASE), LeaseState::Expired);
    assert!(!lease.holds(t0 + LEASE));
    assert_eq!(
        lease.handle_timeout(t0 + LEASE),
        LeaseState::None,
        "expired once"
    );
}

#[test]
fn late_and_unknown_answers_never_shorten_or_revive_it() {
    let t0 = Instant::now();
    let mut lease = RegionLease::new(LEASE);
    let first = lease.request(t0);
    let second = lease.request(t0 + ms(1000));
    assert!(lease.answered(second));
    // The older request was superseded by the newer answer.
    assert!(!lease.answered(first));
    assert!(!lease.answered(99));
    assert_eq!(lease.poll_timeout(), Some(t0 + ms(1000) + LEASE));
    lease.give_up();
    assert!(!lease.holds(t0 + ms(1001)));
    assert!(!lease.answered(second));
}

#[test]
fn a_new_coordinator_waits_two_leases_and_the_margin_after_its_quorum() {
    let t0 = Instant::now();
    let mut grants = Grants::new(LEASE, MARGIN);
    let anyone = "tcp://198.51.100.7:4000";
    assert!(
        !grants.surely_stopped(anyone, t0 + 100 * LEASE),
        "never before a quorum"
    );
    grants.quorum(t0);
    grants.quorum(t0 + LEASE);
    assert!(!grants.surely_stopped(anyone, t0 + 2 * LEASE + MARGIN - ms(1)));
    assert!(grants.surely_stopped(anyone, t0 + 2 * LEASE + MARGIN));
}

proptest! {
    /// Whatever the renewals' timing (requests, answer delays, the
    /// coordinator's start), a region never holds its lease at a time the
    /// coordinator counts it as stopped.
    #[test]
    fn the_region_stops_before_the_coordinator_counts_it_stopped(
        start in 0u64..5_000,
        renewals in proptest::collection::vec((0u64..4_000, 0u64..3_000, any::<bool>()), 0..20),
    ) {
        let t0 = Instant::now();
        let region: Arc<str> = "tcp://198.51.100.3:4000".into();
        let mut lease = RegionLease::new(LEASE);
        let mut grants = Grants::new(LEASE, MARGIN);
        grants.quorum(t0 + ms(start));
        let mut at = t0;
        for (gap, delay, lost) in renewals {
            at += ms(gap);
            let seq = lease.request(at);
            if lost {
                continue;
            }
            let answer = (at + ms(delay)).max(t0 + ms(start));
            grants.answer(region.clone(), answer);
            lease.answered(seq);
        }
        let stopped = grants.stopped_from(&region).expect("a quorum");
        prop_assert!(!lease.holds(stopped), "the region still holds its lease when the coordinator counts it stopped");
        if let Some(end) = lease.poll_timeout() {
            prop_assert!(end + MARGIN <= stopped);
        }
    }
}
