//! Lifecycle: graceful stop, kill, signals overtaking messages, panics,
//! shutdown, dropping the system, detached actors.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use plexus_core::{
    Actor, ActorSystem, Context, DeadLetterReason, Down, ExitReason, ReplyTo, SpawnError,
};
use tokio::sync::{mpsc, oneshot};

/// Handles `Hold` by waiting for a gate, so a test can queue messages
/// behind it; reports every `Item` and its own `stopped` hook.
struct Holder {
    gate: Option<oneshot::Receiver<()>>,
    events: mpsc::UnboundedSender<String>,
}

enum H {
    Hold,
    Item(u32),
}

impl Actor for Holder {
    type Msg = H;
    async fn handle(&mut self, msg: H, _ctx: &mut Context<H>) {
        match msg {
            H::Hold => {
                if let Some(g) = self.gate.take() {
                    let _ = g.await;
                }
                let _ = self.events.send("held".into());
            }
            H::Item(n) => {
                let _ = self.events.send(format!("item {n}"));
            }
        }
    }
    async fn stopped(&mut self, reason: &ExitReason, _ctx: &mut Context<H>) {
        let _ = self.events.send(format!("stopped: {reason}"));
    }
}

fn holder(
    system: &ActorSystem,
) -> (
    plexus_core::ActorRef<H>,
    oneshot::Sender<()>,
    mpsc::UnboundedReceiver<String>,
) {
    let (gate_tx, gate) = oneshot::channel();
    let (events, rx) = mpsc::unbounded_channel();
    let r = system.spawn(Holder {
        gate: Some(gate),
        events,
    });
    (r, gate_tx, rx)
}

async fn drain(rx: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut all = Vec::new();
    while let Some(e) = rx.recv().await {
        all.push(e);
    }
    all
}

#[tokio::test]
async fn stop_overtakes_queued_messages_which_become_dead_letters() {
    let system = ActorSystem::new();
    let mut letters = system.dead_letters().subscribe();
    let (r, gate, mut events) = holder(&system);
    r.tell(H::Hold);
    for i in 0..5 {
        r.tell(H::Item(i));
    }
    tokio::task::yield_now().await; // the actor is now inside `Hold`
    r.stop();
    gate.send(()).unwrap();
    let down = r.monitor().await;
    assert_eq!(down.reason, ExitReason::Stopped);
    // The current message finished, the stop came next, no item ran.
    assert_eq!(
        drain(&mut events).await,
        vec!["held", "stopped: stopped on request"]
    );
    assert_eq!(system.dead_letters().count(), 5);
    for _ in 0..5 {
        let dl = letters.recv().await.unwrap();
        assert_eq!(dl.reason, DeadLetterReason::Stopped);
        assert!(dl.message_type.ends_with("H"));
    }
}

#[tokio::test]
async fn kill_interrupts_a_handler_and_skips_stopped_hook() {
    let system = ActorSystem::new();
    let (r, _gate_kept_closed, mut events) = holder(&system);
    r.tell(H::Hold);
    tokio::task::yield_now().await;
    r.kill();
    let down = r.monitor().await;
    assert_eq!(down.reason, ExitReason::Killed);
    assert!(drain(&mut events).await.is_empty());
}

#[tokio::test]
async fn tell_after_stop_is_counted_dead_letter() {
    let system = ActorSystem::new();
    let (r, _gate, _events) = holder(&system);
    r.stop();
    r.monitor().await;
    let before = system.dead_letters().count();
    r.tell(H::Item(1));
    assert_eq!(system.dead_letters().count(), before + 1);
    assert!(!r.is_alive());
}

struct Panicky;
impl Actor for Panicky {
    type Msg = &'static str;
    async fn handle(&mut self, msg: &'static str, _ctx: &mut Context<&'static str>) {
        if msg == "boom" {
            panic!("asked to explode");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_stops_only_that_actor_with_its_message() {
    let system = ActorSystem::new();
    let bad = system.spawn(Panicky);
    let neighbours: Vec<_> = (0..10)
        .map(|_| {
            let mut n = 0u64;
            system.spawn_fn(move |m: ReplyTo<u64>, _ctx| {
                n += 1;
                m.send(n)
            })
        })
        .collect();
    let down = bad.monitor();
    bad.tell("boom");
    assert_eq!(
        down.await,
        Down {
            id: bad.id(),
            reason: ExitReason::Panicked("asked to explode".into())
        }
    );
    for (i, nb) in neighbours.iter().enumerate() {
        assert!(nb.is_alive(), "neighbour {i} disturbed");
        assert_eq!(nb.ask(|r| r, Duration::from_secs(1)).await, Ok(1));
    }
    assert_eq!(system.live_actors(), 10);
    system.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_100k_live_actors_returns_promptly_and_runs_hooks() {
    let system = ActorSystem::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    struct Idle(Arc<AtomicUsize>);
    impl Actor for Idle {
        type Msg = ();
        async fn handle(&mut self, _: (), _ctx: &mut Context<()>) {}
        async fn stopped(&mut self, reason: &ExitReason, _ctx: &mut Context<()>) {
            assert_eq!(*reason, ExitReason::Shutdown);
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    for _ in 0..100_000 {
        system.spawn(Idle(stopped.clone()));
    }
    assert_eq!(system.live_actors(), 100_000);
    system.shutdown().await;
    assert_eq!(stopped.load(Ordering::Relaxed), 100_000);
    assert_eq!(system.live_actors(), 0);
    assert!(matches!(
        system.build(|| Panicky).spawn(),
        Err(SpawnError::ShuttingDown)
    ));
    // `spawn` after shutdown hands back a ref that is already down.
    let late = system.spawn(Panicky);
    assert_eq!(late.monitor().await.reason, ExitReason::Shutdown);
}

#[tokio::test]
async fn shutdown_timeout_kills_stuck_actors() {
    let system = ActorSystem::new();
    let (r, _gate_never_opened, _events) = holder(&system);
    r.tell(H::Hold);
    tokio::task::yield_now().await;
    let graceful = system.shutdown_timeout(Duration::from_millis(50)).await;
    assert!(!graceful);
    assert_eq!(r.monitor().await.reason, ExitReason::Killed);
}

#[test]
fn dropping_the_system_leaks_no_task() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let system = ActorSystem::new();
        let mut downs = Vec::new();
        for i in 0..1_000 {
            let r = system.spawn_fn(|(), _ctx| {});
            if i % 2 == 0 {
                // Some actors also have a timer task of their own.
                r.tell(());
            }
            downs.push(r.monitor());
        }
        let timer_owner = system.spawn_fn(|(), ctx: &mut Context<()>| {
            ctx.send_after(Duration::from_secs(3600), ());
        });
        timer_owner.tell(());
        downs.push(timer_owner.monitor());
        tokio::task::yield_now().await;
        assert!(rt_alive() > 1_000);
        drop(system);
        for d in downs {
            assert_eq!(d.await.reason, ExitReason::Killed);
        }
        tokio::task::yield_now().await;
        // Only this test's own block_on future remains (it is not a task).
        assert_eq!(rt_alive(), 0);
    });
}

fn rt_alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// On a current-thread runtime, a handler blocking the scheduler's one
/// thread would stop every other actor and the test itself: the asks below
/// complete only because the detached actor blocks its own thread. (Were
/// it not detached, the asks would wait until the blocked handler gave up
/// after 30 s and the test would fail on `released`.)
#[tokio::test]
async fn detached_actor_blocks_without_starving_the_scheduler() {
    let system = ActorSystem::new();
    let (release, released_rx) = std::sync::mpsc::channel::<()>();
    let (entered_tx, entered) = oneshot::channel::<()>();
    let released = Arc::new(AtomicBool::new(false));
    let released_in_handler = released.clone();
    type Block = (std::sync::mpsc::Receiver<()>, oneshot::Sender<()>);
    let blocker = system
        .build(move || {
            let flag = released_in_handler.clone();
            plexus_core::FnActor::new(move |(rx, entered): Block, _ctx: &mut Context<Block>| {
                let _ = entered.send(());
                // Blocks this thread until the test releases it.
                let ok = rx.recv_timeout(Duration::from_secs(30)).is_ok();
                flag.store(ok, Ordering::SeqCst);
            })
        })
        .detached()
        .spawn()
        .unwrap();
    blocker.tell((released_rx, entered_tx));
    entered.await.unwrap();
    let mut n = 0u32;
    let echo = system.spawn_fn(move |r: ReplyTo<u32>, _ctx| {
        n += 1;
        r.send(n)
    });
    for i in 1..=100 {
        assert_eq!(echo.ask(|r| r, Duration::from_secs(60)).await, Ok(i));
    }
    release.send(()).unwrap();
    blocker.stop();
    assert_eq!(blocker.monitor().await.reason, ExitReason::Stopped);
    assert!(
        released.load(Ordering::SeqCst),
        "the handler was released, not timed out"
    );
    assert!(std::thread::current().name() != Some("plexus-actor"));
    system.shutdown().await;
}

#[tokio::test]
async fn system_outside_runtime_is_a_typed_error() {
    let err = std::thread::spawn(ActorSystem::try_new)
        .join()
        .unwrap()
        .unwrap_err();
    assert_eq!(err, plexus_core::SystemError::NoRuntime);
}
