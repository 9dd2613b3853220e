//! The peer state machine on a fake clock: a lost link in every state,
//! the backoff, link loss in the middle of requests, and two nodes dialling
//! each other at once settling on one link in every interleaving.

use std::time::{Duration, Instant};

use plexus_core::{ActorId, NodeId};

use super::*;
use plexus_net::protocol::Protocol as _;

/// What the transport reports when the peer closes its side.
pub(super) fn gone() -> CloseCause {
    CloseCause::Transport(plexus_transport::CloseReason::PeerClosed)
}

/// Plain values for every handle: links are named, requests numbered.
pub(super) struct Fake;

impl Handles for Fake {
    type Sender = &'static str;
    type Held = u32;
    type Waiter = u32;
    type Resolve = u64;
    type Receipt = u64;
    type Watcher = &'static str;
    type Local = &'static str;
}

pub(super) type FakeSession = Session<Fake>;

const BACKOFF: Backoff = Backoff {
    min: Duration::from_millis(100),
    max: Duration::from_secs(5),
};

/// The session's timeout at `at` (as its driver calls it): what it gave
/// up on, if it did.
fn timeout(st: &mut FakeSession, at: Instant) -> Option<Abandoned<Fake>> {
    st.handle_timeout(at);
    let mut gave_up = None;
    while let Some(event) = st.poll_event() {
        match event {
            SessionEvent::GaveUp(abandoned) => {
                assert!(gave_up.replace(abandoned).is_none(), "gave up once");
            }
            _ => panic!("a timeout raises only GaveUp"),
        }
    }
    gave_up
}

/// A session of node 1, idle.
pub(super) fn fresh() -> FakeSession {
    FakeSession::new(node(1), BACKOFF)
}

pub(super) fn node(n: u64) -> NodeId {
    NodeId::from_u64(n)
}

/// A state with one of everything waiting on it.
pub(super) fn loaded(st: &mut FakeSession) {
    st.pending.push_back(7);
    st.waiters.push(1);
    st.expect_resolved(10, 10);
    st.expect_receipt(20, 20);
    st.watchers
        .insert(30, (ActorId::new(node(2), 5), "watcher"));
    st.monitored(40, "watched local", Some(41));
    st.linked(
        ActorId::new(node(1), 3),
        "linked local",
        ActorId::new(node(2), 6),
    );
}

pub(super) fn up(st: &mut FakeSession, link: &'static str, dialed_by: u64) -> u64 {
    match st.attach(link, node(2), node(dialed_by)) {
        Attached::Up { epoch, .. } => epoch,
        Attached::Duplicate { .. } => panic!("{link} refused"),
    }
}

#[test]
fn a_lost_link_in_every_state_fails_what_waits_on_it_exactly_once() {
    let now = Instant::now();

    // Idle and connecting: no link to lose; a failed connect gives up on
    // what waited, not on watchers (they watch the node, which may answer
    // the next attempt).
    for connecting in [false, true] {
        let mut st = fresh();
        loaded(&mut st);
        if connecting {
            assert_eq!(st.begin_connect(true), Some(None));
            assert_eq!(st.begin_connect(true), None, "one attempt at a time");
        }
        assert!(st.link_lost(1, &gone()).is_none());
        let gave_up = st.connect_failed(now, LinkError::Timeout(Duration::from_secs(5)));
        assert_eq!(
            (
                gave_up.pending.len(),
                gave_up.waiters.len(),
                gave_up.resolves.len(),
                gave_up.receipts.len()
            ),
            (1, 1, 1, 1)
        );
        assert!(st.is_down());
        let again = st.connect_failed(now, LinkError::Timeout(Duration::from_secs(5)));
        assert!(
            again.resolves.is_empty() && again.waiters.is_empty(),
            "failed once"
        );
    }

    // Up: everything that depended on the link is handed back once.
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 1);
    loaded(&mut st);
    let lost = st.link_lost(epoch, &gone()).expect("the link that is up");
    assert_eq!(lost.node, Some(node(2)));
    assert_eq!(
        (
            lost.watchers.len(),
            lost.links.len(),
            lost.resolves.len(),
            lost.receipts.len(),
            lost.remote_monitors.len()
        ),
        (1, 1, 1, 1, 1)
    );
    assert!(st.is_down());
    assert!(matches!(
        &st.last_error,
        Some(LinkError::Closed(CloseCause::Transport(
            plexus_transport::CloseReason::PeerClosed
        )))
    ));
    assert!(st.link_lost(epoch, &gone()).is_none(), "told once");
    // Down: nothing more to lose.
    assert!(st.link_lost(epoch + 1, &gone()).is_none());

    // A replaced link ending late changes nothing.
    let mut st = fresh();
    let old = up(&mut st, "l1", 2);
    let new = up(&mut st, "l2", 1);
    loaded(&mut st);
    assert!(st.link_lost(old, &gone()).is_none());
    assert_eq!(st.sender(), Some(&"l2"));
    assert!(st.link_lost(new, &gone()).is_some());

    // A refused duplicate being drained ending changes nothing.
    let mut st = fresh();
    up(&mut st, "l1", 1);
    let Attached::Duplicate {
        refused,
        draining_epoch,
        ..
    } = st.attach("l2", node(2), node(2))
    else {
        panic!("the link dialled by node 1 stays")
    };
    assert_eq!(refused, "l2");
    assert!(st.link_lost(draining_epoch, &gone()).is_none());
    assert_eq!(st.sender(), Some(&"l1"));

    // Superseded: requests are kept for the other link; if it never comes
    // they fail when the timer says so, not before.
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 2);
    loaded(&mut st);
    assert!(st.superseded(epoch, now, Duration::from_secs(5)));
    assert!(!st.superseded(epoch, now, Duration::from_secs(5)), "once");
    assert!(st.link_lost(epoch, &gone()).is_none());
    let due = st.poll_timeout().expect("a timer");
    assert_eq!(due, now + Duration::from_secs(5));
    assert!(timeout(&mut st, due - Duration::from_millis(1)).is_none());
    assert_eq!(st.resolves.len(), 1, "kept while the other link may come");
    let gave_up = timeout(&mut st, due).expect("given up");
    assert_eq!(gave_up.resolves.len(), 1);
    assert!(
        matches!(gave_up.error, LinkError::DuplicateNeverUp),
        "{}",
        gave_up.error
    );
    assert!(st.is_down());
    assert!(st.poll_timeout().is_none());
}

#[test]
fn superseded_then_the_other_link_comes_up_keeps_every_request() {
    let now = Instant::now();
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 2);
    loaded(&mut st);
    assert!(st.superseded(epoch, now, Duration::from_secs(5)));
    st.pending.push_back(8);
    let Attached::Up {
        pending, waiters, ..
    } = st.attach("l2", node(2), node(1))
    else {
        panic!("the link the peer kept")
    };
    assert_eq!(Vec::from(pending), [7, 8], "held frames go out in order");
    assert_eq!(waiters, [1]);
    assert_eq!(st.resolves.len(), 1, "answered over the new link");
    assert!(st.poll_timeout().is_none(), "no timer once up");
    assert!(timeout(&mut st, now + Duration::from_secs(60)).is_none());
}

#[test]
fn backoff_doubles_to_its_cap_and_a_link_resets_it() {
    let now = Instant::now();
    let mut st = fresh();
    let mut waits = Vec::new();
    for _ in 0..10 {
        assert!(st.begin_connect(true).is_some());
        st.connect_failed(now, LinkError::Timeout(Duration::ZERO));
        waits.push(st.retry_at.expect("a retry time") - now);
    }
    let ms = |n| Duration::from_millis(n);
    assert_eq!(
        waits,
        [
            ms(100),
            ms(200),
            ms(400),
            ms(800),
            ms(1600),
            ms(3200),
            ms(5000),
            ms(5000),
            ms(5000),
            ms(5000)
        ]
    );
    assert_eq!(st.begin_connect(true), Some(Some(now + ms(5000))));
    let epoch = up(&mut st, "l1", 1);
    st.link_lost(epoch, &gone());
    assert_eq!(
        st.begin_connect(true),
        Some(None),
        "a lost link reconnects at once"
    );
    st.connect_failed(now, LinkError::Timeout(Duration::ZERO));
    assert_eq!(
        st.retry_at,
        Some(now + ms(100)),
        "counting from the start again"
    );
    assert_eq!(
        st.begin_connect(false),
        None,
        "nothing to dial: a peer known only by an accepted link"
    );
}

#[test]
fn forwarding_hands_over_what_waits_and_goes_idle() {
    let mut via = fresh();
    assert!(via.begin_connect(true).is_some());
    loaded(&mut via);
    let mut canonical = fresh();
    canonical.pending.push_back(1);
    via.forward_into(&mut canonical);
    assert!(matches!(via.phase, Phase::Idle));
    assert!(via.pending.is_empty() && via.resolves.is_empty() && via.waiters.is_empty());
    assert_eq!(Vec::from(canonical.pending.clone()), [1, 7]);
    assert_eq!((canonical.resolves.len(), canonical.receipts.len()), (1, 1));
}

/// Two nodes dial each other at once: link `ab` dialled by node 1, `ba`
/// by node 2. Each side attaches both links (in either order) and sends
/// `GOODBYE(duplicate)` on the one it refuses or replaces; a side that
/// gets it on its current link is superseded until the other comes. In
/// every interleaving, both sides end up on `ab`, the link the lower node
/// id dialled, with no timer left.
#[test]
fn simultaneous_dials_settle_on_one_link_in_every_interleaving() {
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Event {
        Attach { side: usize, link: &'static str },
        Goodbye { to: usize, link: &'static str },
    }

    struct Side {
        me: u64,
        st: FakeSession,
        /// The epoch each link got here.
        epochs: Vec<(&'static str, u64)>,
    }

    fn dialled_by(link: &str) -> u64 {
        if link == "ab" {
            1
        } else {
            2
        }
    }

    fn explore(sides: &mut [Side; 2], todo: &[Event], runs: &mut usize) {
        if todo.is_empty() {
            *runs += 1;
            for side in sides.iter() {
                assert_eq!(side.st.sender(), Some(&"ab"), "node {} settled", side.me);
                assert!(side.st.poll_timeout().is_none());
            }
            return;
        }
        for i in 0..todo.len() {
            let event = todo[i];
            // A GOODBYE on a link arrives after that side's handshake on it.
            if let Event::Goodbye { to, link } = event {
                if !sides[to].epochs.iter().any(|(l, _)| *l == link) {
                    continue;
                }
            }
            let saved: Vec<(FakeSession, Vec<(&'static str, u64)>)> = sides
                .iter()
                .map(|s| (clone_state(&s.st), s.epochs.clone()))
                .collect();
            let mut next = todo.to_vec();
            next.remove(i);
            match event {
                Event::Attach { side, link } => {
                    let other = 1 - side;
                    let s = &mut sides[side];
                    let peer = node(sides_me(other));
                    match s.st.attach(link, peer, node(dialled_by(link))) {
                        Attached::Up {
                            epoch, replaced, ..
                        } => {
                            s.epochs.push((link, epoch));
                            if let Some(old) = replaced {
                                next.push(Event::Goodbye {
                                    to: other,
                                    link: old,
                                });
                            }
                        }
                        Attached::Duplicate {
                            refused,
                            draining_epoch,
                            ..
                        } => {
                            s.epochs.push((link, draining_epoch));
                            next.push(Event::Goodbye {
                                to: other,
                                link: refused,
                            });
                        }
                    }
                }
                Event::Goodbye { to, link } => {
                    let s = &mut sides[to];
                    let epoch = s
                        .epochs
                        .iter()
                        .find(|(l, _)| *l == link)
                        .expect("attached")
                        .1;
                    s.st.superseded(epoch, Instant::now(), Duration::from_secs(5));
                }
            }
            explore(sides, &next, runs);
            for (side, (st, epochs)) in sides.iter_mut().zip(saved) {
                side.st = st;
                side.epochs = epochs;
            }
        }
    }

    fn sides_me(side: usize) -> u64 {
        side as u64 + 1
    }

    /// The fake handles are all `Copy`: a state is cloned field by field.
    fn clone_state(st: &FakeSession) -> FakeSession {
        FakeSession {
            here: st.here,
            backoff: st.backoff,
            moved: st.moved,
            phase: match &st.phase {
                Phase::Idle => Phase::Idle,
                Phase::Connecting { stuck_at } => Phase::Connecting {
                    stuck_at: *stuck_at,
                },
                Phase::Up {
                    sender,
                    epoch,
                    dialed_by,
                } => Phase::Up {
                    sender,
                    epoch: *epoch,
                    dialed_by: *dialed_by,
                },
                Phase::Down => Phase::Down,
            },
            remote: st.remote,
            pending: st.pending.clone(),
            waiters: st.waiters.clone(),
            resolves: st.resolves.clone(),
            receipts: st.receipts.clone(),
            watchers: st.watchers.clone(),
            remote_monitors: st.remote_monitors.clone(),
            links: st.links.clone(),
            failures: st.failures,
            last_error: st.last_error.clone(),
            retry_at: st.retry_at,
            epoch: st.epoch,
            // No control frame in this exploration: nothing queued.
            control: Default::default(),
        }
    }

    let mut sides = [1u64, 2].map(|me| Side {
        me,
        st: fresh(),
        epochs: Vec::new(),
    });
    let todo = [
        Event::Attach {
            side: 0,
            link: "ab",
        },
        Event::Attach {
            side: 0,
            link: "ba",
        },
        Event::Attach {
            side: 1,
            link: "ab",
        },
        Event::Attach {
            side: 1,
            link: "ba",
        },
    ];
    let mut runs = 0;
    explore(&mut sides, &todo, &mut runs);
    assert!(
        runs >= 24,
        "every order of the four attaches, at least: {runs}"
    );
}

#[test]
fn answers_reach_who_waits_once_and_late_ones_are_ignored() {
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 1);
    st.expect_resolved(1, 100);
    st.expect_receipt(2, 200);
    assert_eq!(st.handle_resolved(1), Some(100));
    assert_eq!(st.handle_resolved(1), None, "answered once");
    assert_eq!(st.handle_receipt(99), None, "unknown: ignored");
    // A link lost with the receipt outstanding fails it; the RECEIPT
    // arriving later (on a new link) finds nobody.
    let lost = st.link_lost(epoch, &gone()).expect("lost");
    assert_eq!(lost.receipts.into_values().collect::<Vec<_>>(), [200]);
    up(&mut st, "l2", 1);
    assert_eq!(st.handle_receipt(2), None);
}

#[test]
fn a_watch_is_refused_while_down_or_when_another_node_answers() {
    let target = ActorId::new(node(2), 5);
    let mut st = fresh();
    // Before the first link: accepted, told when the link comes or fails.
    assert_eq!(st.watch(1, target, "w1"), Ok(()));
    let epoch = up(&mut st, "l1", 1);
    assert_eq!(st.watch(2, target, "w2"), Ok(()));
    let elsewhere = ActorId::new(node(3), 5);
    assert_eq!(
        st.watch(3, elsewhere, "w3"),
        Err("w3"),
        "node 2 answers here"
    );
    assert_eq!(st.handle_down(2), Some((target, "w2")));
    assert_eq!(st.handle_down(2), None, "Down once");
    assert!(st.unwatch(1));
    assert!(!st.unwatch(1));
    st.link_lost(epoch, &gone());
    assert_eq!(
        st.watch(4, target, "w4"),
        Err("w4"),
        "down: NodeDown at once"
    );
}

#[test]
fn links_and_remote_monitors_end_by_frame_or_with_the_link() {
    let mut st = fresh();
    let epoch = up(&mut st, "l1", 1);
    let (a, b) = (ActorId::new(node(1), 3), ActorId::new(node(1), 4));
    let remote = ActorId::new(node(2), 6);
    st.linked(a, "a", remote);
    st.linked(b, "b", remote);
    st.unlinked(a, remote);
    st.monitored(7, "watched", Some(70));
    st.monitored(8, "watched too", Some(80));
    assert_eq!(st.handle_demonitor(7), Some(("watched", Some(70))));
    assert_eq!(st.handle_demonitor(7), None);
    let lost = st.link_lost(epoch, &gone()).expect("lost");
    assert_eq!(
        lost.links,
        [("b", remote)],
        "only what is still linked gets Exit"
    );
    assert_eq!(
        lost.remote_monitors.into_iter().collect::<Vec<_>>(),
        [(8, ("watched too", Some(80)))]
    );
}
