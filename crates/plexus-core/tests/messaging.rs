//! Messaging: FIFO per sender, tell / try_tell / send / ask, bounded
//! mailboxes, narrowed refs.

use std::collections::HashSet;
use std::time::Duration;

use plexus_core::{
    Actor, ActorRef, ActorSystem, AskError, Context, DeadLetterReason, ReplyTo, TrySendError,
};
use tokio::sync::{mpsc, oneshot};

/// Records every message it gets and reports them when asked.
struct Recorder<T> {
    seen: Vec<T>,
}

enum Rec<T> {
    Item(T),
    Dump(ReplyTo<Vec<T>>),
}

impl<T: Send + 'static> Actor for Recorder<T> {
    type Msg = Rec<T>;
    async fn handle(&mut self, msg: Rec<T>, _ctx: &mut Context<Rec<T>>) {
        match msg {
            Rec::Item(x) => self.seen.push(x),
            Rec::Dump(r) => r.send(std::mem::take(&mut self.seen)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_senders_keep_per_sender_fifo() {
    const SENDERS: u32 = 1_000;
    const PER_SENDER: u32 = 200;
    let system = ActorSystem::new();
    let rec = system.spawn(Recorder::<(u32, u32)> { seen: Vec::new() });
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let rec = rec.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_SENDER {
                rec.tell(Rec::Item((s, i)));
                if i % 16 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seen = rec.ask(Rec::Dump, Duration::from_secs(10)).await.unwrap();
    assert_eq!(seen.len(), (SENDERS * PER_SENDER) as usize);
    let mut next = vec![0u32; SENDERS as usize];
    for (s, i) in seen {
        assert_eq!(next[s as usize], i, "sender {s} out of order");
        next[s as usize] += 1;
    }
    system.shutdown().await;
}

#[tokio::test]
async fn ask_returns_the_typed_reply() {
    let system = ActorSystem::new();
    let rec = system.spawn(Recorder::<u8> { seen: Vec::new() });
    rec.tell(Rec::Item(1));
    rec.tell(Rec::Item(2));
    assert_eq!(
        rec.ask(Rec::Dump, Duration::from_secs(1)).await,
        Ok(vec![1, 2])
    );
}

#[tokio::test(start_paused = true)]
async fn ask_times_out_with_typed_error() {
    let system = ActorSystem::new();
    // Never replies: keeps the ReplyTo alive.
    let mut held = Vec::new();
    let silent = system.spawn_fn(move |r: ReplyTo<u8>, _ctx| held.push(r));
    let err = silent
        .ask(|r| r, Duration::from_millis(250))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        AskError::Timeout {
            target: silent.id(),
            timeout: Duration::from_millis(250)
        }
    );
}

#[tokio::test(start_paused = true)]
async fn ask_to_stopped_actor_fails_at_once_not_at_timeout() {
    let system = ActorSystem::new();
    let rec = system.spawn(Recorder::<u8> { seen: Vec::new() });
    rec.stop();
    rec.monitor().await;
    // Paused time advances only while every task waits for a timer: an ask
    // that waited for its timeout would advance it by 30 s.
    let started = tokio::time::Instant::now();
    let err = rec
        .ask(Rec::Dump, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(err, AskError::Stopped { target: rec.id() });
    assert_eq!(started.elapsed(), Duration::ZERO);
}

/// Blocks in its first message until the gate opens.
struct Blocking {
    entered: Option<oneshot::Sender<()>>,
    gate: Option<oneshot::Receiver<()>>,
}

impl Actor for Blocking {
    type Msg = u32;
    async fn handle(&mut self, _: u32, _ctx: &mut Context<u32>) {
        if let (Some(entered), Some(gate)) = (self.entered.take(), self.gate.take()) {
            let _ = entered.send(());
            let _ = gate.await;
        }
    }
}

/// An actor blocked in its first message with ten more queued behind it,
/// and the sender that opens its gate.
async fn blocked_with_ten_queued(system: &ActorSystem) -> (ActorRef<u32>, oneshot::Sender<()>) {
    let (entered_tx, entered) = oneshot::channel();
    let (open, gate) = oneshot::channel();
    let actor = system.spawn(Blocking {
        entered: Some(entered_tx),
        gate: Some(gate),
    });
    actor.tell(0);
    entered.await.unwrap();
    for i in 1..=10 {
        actor.tell(i);
    }
    (actor, open)
}

#[tokio::test]
async fn a_drain_waiter_is_woken_when_the_actor_takes_its_queue() {
    let system = ActorSystem::new();
    let (actor, open) = blocked_with_ten_queued(&system).await;
    let control = plexus_core::remote::control_of(&actor);
    assert_eq!(control.queued(), 10);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(control.poll_queued_at_most(10, &mut cx).is_ready());
    assert!(control.poll_queued_at_most(3, &mut cx).is_pending());
    let drained = std::future::poll_fn(|cx| control.poll_queued_at_most(3, cx));
    open.send(()).unwrap();
    drained.await;
    assert!(control.queued() <= 3);

    // A stopped actor's waiter goes on too.
    let (actor, _never_opened) = blocked_with_ten_queued(&system).await;
    let control = plexus_core::remote::control_of(&actor);
    assert!(control.poll_queued_at_most(3, &mut cx).is_pending());
    let drained = std::future::poll_fn(|cx| control.poll_queued_at_most(3, cx));
    actor.kill();
    drained.await;
}

#[tokio::test]
async fn ask_fails_as_soon_as_target_stops_with_request_queued() {
    let system = ActorSystem::new();
    let (gate_tx, gate_rx) = oneshot::channel::<()>();
    let mut gate = Some(gate_rx);
    struct Blocker(Option<oneshot::Receiver<()>>);
    enum B {
        Block,
        Ask(ReplyTo<()>),
    }
    impl Actor for Blocker {
        type Msg = B;
        async fn handle(&mut self, msg: B, _ctx: &mut Context<B>) {
            match msg {
                B::Block => {
                    if let Some(g) = self.0.take() {
                        let _ = g.await;
                    }
                }
                B::Ask(r) => r.send(()),
            }
        }
    }
    let b = system.spawn(Blocker(gate.take()));
    b.tell(B::Block);
    let asker = {
        let b = b.clone();
        tokio::spawn(async move { b.ask(B::Ask, Duration::from_secs(30)).await })
    };
    tokio::task::yield_now().await;
    b.stop();
    gate_tx.send(()).unwrap();
    let res = tokio::time::timeout(Duration::from_secs(5), asker)
        .await
        .expect("ask must fail when the actor stops, long before its timeout")
        .unwrap();
    assert_eq!(res, Err(AskError::Stopped { target: b.id() }));
}

#[tokio::test]
async fn dropped_reply_is_no_reply_error() {
    let system = ActorSystem::new();
    let dropper = system.spawn_fn(|r: ReplyTo<u8>, _ctx| drop(r));
    let err = dropper
        .ask(|r| r, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        AskError::NoReply {
            target: dropper.id()
        }
    );
}

/// An actor whose handler waits for a permit per message, so tests control
/// exactly when it takes the next message.
struct Gated {
    permits: mpsc::UnboundedReceiver<()>,
    out: mpsc::UnboundedSender<u32>,
}

impl Actor for Gated {
    type Msg = u32;
    async fn handle(&mut self, n: u32, _ctx: &mut Context<u32>) {
        let _ = self.permits.recv().await;
        let _ = self.out.send(n);
    }
}

fn gated(
    system: &ActorSystem,
    capacity: usize,
) -> (
    ActorRef<u32>,
    mpsc::UnboundedSender<()>,
    mpsc::UnboundedReceiver<u32>,
) {
    let (ptx, prx) = mpsc::unbounded_channel();
    let (otx, orx) = mpsc::unbounded_channel();
    let mut slot = Some((prx, otx));
    let r = system
        .build(move || {
            let (permits, out) = slot.take().expect("built once: no restarts");
            Gated { permits, out }
        })
        .bounded(capacity)
        .spawn()
        .unwrap();
    (r, ptx, orx)
}

#[tokio::test]
async fn bounded_mailbox_try_tell_fails_when_full_and_hands_message_back() {
    let system = ActorSystem::new();
    let (r, permits, mut out) = gated(&system, 2);
    r.try_tell(0).unwrap();
    // Current-thread runtime: one yield lets the actor take message 0 out
    // (returning its room) and block on a permit.
    tokio::task::yield_now().await;
    r.try_tell(1).unwrap();
    r.try_tell(2).unwrap();
    match r.try_tell(3) {
        Err(TrySendError::Full { target, message }) => {
            assert_eq!(target, r.id());
            assert_eq!(message, 3);
        }
        other => panic!("expected Full, got {other:?}"),
    }
    for _ in 0..3 {
        permits.send(()).unwrap();
    }
    let got: Vec<u32> = vec![
        out.recv().await.unwrap(),
        out.recv().await.unwrap(),
        out.recv().await.unwrap(),
    ];
    assert_eq!(got, vec![0, 1, 2]);
}

#[tokio::test]
async fn try_tell_batch_enqueues_in_order_and_hands_back_what_does_not_fit() {
    let system = ActorSystem::new();
    let (r, permits, mut out) = gated(&system, 3);
    r.try_tell(0).unwrap();
    // The actor takes message 0 out (returning its room) and waits.
    tokio::task::yield_now().await;
    let mut batch = vec![1, 2, 3, 4, 5];
    let mut refused = Vec::new();
    r.try_tell_batch(&mut batch, |e| match e {
        TrySendError::Full { message, .. } => refused.push(message),
        other => panic!("expected Full, got {other:?}"),
    });
    assert!(batch.is_empty(), "the batch is drained");
    assert_eq!(refused, vec![4, 5], "room for three, in order");
    for _ in 0..4 {
        permits.send(()).unwrap();
    }
    for want in 0..4 {
        assert_eq!(out.recv().await, Some(want));
    }
    // An unbounded mailbox takes a whole batch, in order, after what came
    // before it.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sink = system.spawn_fn(move |n: u32, _ctx| {
        let _ = tx.send(n);
    });
    sink.tell(0);
    let mut batch: Vec<u32> = (1..100).collect();
    sink.try_tell_batch(&mut batch, |e| panic!("refused {e:?}"));
    for want in 0..100 {
        assert_eq!(rx.recv().await, Some(want));
    }
    // A stopped actor refuses the whole batch.
    sink.stop();
    while sink.is_alive() {
        tokio::task::yield_now().await;
    }
    let mut batch = vec![7, 8];
    let mut stopped = 0;
    sink.try_tell_batch(&mut batch, |e| {
        assert!(matches!(e, TrySendError::Stopped { .. }), "{e:?}");
        stopped += 1;
    });
    assert_eq!(stopped, 2);
}

#[tokio::test]
async fn bounded_mailbox_send_waits_for_room() {
    let system = ActorSystem::new();
    let (r, permits, mut out) = gated(&system, 1);
    r.send(0).await.unwrap();
    r.send(1).await.unwrap_or_else(|e| panic!("{e}"));
    let r2 = r.clone();
    let blocked = tokio::spawn(async move { r2.send(2).await.is_ok() });
    tokio::task::yield_now().await;
    assert!(
        !blocked.is_finished(),
        "send must wait while the mailbox is full"
    );
    for _ in 0..3 {
        permits.send(()).unwrap();
    }
    assert!(blocked.await.unwrap());
    for want in 0..3 {
        assert_eq!(out.recv().await, Some(want));
    }
}

#[tokio::test]
async fn tell_to_full_bounded_mailbox_is_a_dead_letter() {
    let system = ActorSystem::new();
    let mut letters = system.dead_letters().subscribe();
    let (r, _permits, _out) = gated(&system, 1);
    // Current-thread runtime: the actor has not run yet, so message 0 fills
    // the mailbox and the next two cannot fit.
    r.tell(0);
    r.tell(1);
    r.tell(2);
    assert_eq!(system.dead_letters().count(), 2);
    for _ in 0..2 {
        let dl = letters.try_recv().unwrap();
        assert_eq!(dl.target, r.id());
        assert_eq!(dl.reason, DeadLetterReason::MailboxFull);
        assert_eq!(dl.message_type, "u32");
    }
}

#[tokio::test]
async fn zero_capacity_is_a_typed_spawn_error() {
    let system = ActorSystem::new();
    let err = system
        .build(|| Recorder::<u8> { seen: Vec::new() })
        .bounded(0)
        .spawn()
        .unwrap_err();
    assert_eq!(err, plexus_core::SpawnError::ZeroCapacity);
}

#[tokio::test]
async fn narrowed_refs_of_different_actors_share_one_collection() {
    #[derive(Clone, Copy, PartialEq, Debug)]
    struct Tick(u32);
    enum A {
        Tick(Tick),
        Dump(ReplyTo<Vec<u32>>),
    }
    enum B {
        Tick(Tick),
        Dump(ReplyTo<Vec<u32>>),
    }
    impl From<Tick> for A {
        fn from(t: Tick) -> Self {
            A::Tick(t)
        }
    }
    impl From<Tick> for B {
        fn from(t: Tick) -> Self {
            B::Tick(t)
        }
    }
    let system = ActorSystem::new();
    let mut a_seen = Vec::new();
    let a = system.spawn_fn(move |m: A, _ctx| match m {
        A::Tick(t) => a_seen.push(t.0),
        A::Dump(r) => r.send(a_seen.clone()),
    });
    let mut b_seen = Vec::new();
    let b = system.spawn_fn(move |m: B, _ctx| match m {
        B::Tick(t) => b_seen.push(t.0 * 10),
        B::Dump(r) => r.send(b_seen.clone()),
    });
    let subscribers: HashSet<ActorRef<Tick>> = [a.narrow(), b.narrow()].into_iter().collect();
    assert_eq!(subscribers.len(), 2);
    for i in 1..=3 {
        for s in &subscribers {
            s.tell(Tick(i));
        }
    }
    let t = Duration::from_secs(1);
    assert_eq!(a.ask(A::Dump, t).await.unwrap(), vec![1, 2, 3]);
    assert_eq!(b.ask(B::Dump, t).await.unwrap(), vec![10, 20, 30]);
    let narrowed: ActorRef<Tick> = a.narrow();
    assert_eq!(narrowed.id(), a.id());
    a.stop();
    narrowed.monitor().await;
    assert!(matches!(
        narrowed.try_tell(Tick(9)),
        Err(TrySendError::Stopped {
            message: Tick(9),
            ..
        })
    ));
}

#[test]
fn handles_are_send_sync_and_refs_eq_hash() {
    fn send_sync<T: Send + Sync>() {}
    fn eq_hash<T: Eq + std::hash::Hash + Clone>() {}
    send_sync::<ActorRef<u8>>();
    send_sync::<ActorSystem>();
    send_sync::<plexus_core::SystemRef>();
    send_sync::<ReplyTo<u8>>();
    eq_hash::<ActorRef<std::rc::Rc<u8>>>();
}

#[test]
fn ask_works_from_a_thread_without_a_time_driver() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let system = rt.block_on(async { ActorSystem::new() });
    let echo = system.spawn_fn(|r: ReplyTo<u8>, _ctx| r.send(7));
    let mut held = Vec::new();
    let silent = system.spawn_fn(move |r: ReplyTo<u8>, _ctx| held.push(r));
    // A plain thread with a bare executor: no tokio timers available there.
    let outcome = std::thread::spawn(move || {
        let bare = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        bare.block_on(async {
            let ok = echo.ask(|r| r, Duration::from_secs(5)).await;
            let late = silent.ask(|r| r, Duration::from_millis(20)).await;
            (ok, late)
        })
    })
    .join()
    .unwrap();
    assert_eq!(outcome.0, Ok(7));
    assert!(matches!(outcome.1, Err(AskError::Timeout { .. })));
    drop(system);
}
