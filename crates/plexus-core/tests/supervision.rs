//! Supervision: restarts keep the ref, start from fresh state, respect the
//! backoff and give up past the intensity limit.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use plexus_core::{Actor, ActorSystem, Backoff, Context, ExitReason, ReplyTo, Supervision};

/// Counts messages in its state; panics on `Crash`.
struct Fragile {
    count: u32,
    starts: Arc<AtomicU32>,
}

enum F {
    Bump,
    Crash,
    Quit,
    Get(ReplyTo<(u32, u32)>),
}

impl Actor for Fragile {
    type Msg = F;
    async fn started(&mut self, _ctx: &mut Context<F>) {
        self.starts.fetch_add(1, Ordering::SeqCst);
    }
    async fn handle(&mut self, msg: F, ctx: &mut Context<F>) {
        match msg {
            F::Bump => self.count += 1,
            F::Crash => panic!("crash #{}", ctx.restarts()),
            F::Quit => ctx.stop(),
            F::Get(r) => r.send((self.count, ctx.restarts())),
        }
    }
}

fn fragile(starts: &Arc<AtomicU32>) -> impl FnMut() -> Fragile + Send + 'static {
    let starts = starts.clone();
    move || Fragile {
        count: 0,
        starts: starts.clone(),
    }
}

const T: Duration = Duration::from_secs(5);

#[tokio::test(start_paused = true)]
async fn restart_keeps_ref_and_starts_from_fresh_state() {
    let system = ActorSystem::new();
    let starts = Arc::new(AtomicU32::new(0));
    let r = system
        .build(fragile(&starts))
        .supervise(Supervision::on_failure())
        .spawn()
        .unwrap();
    let down = r.monitor();
    r.tell(F::Bump);
    r.tell(F::Bump);
    assert_eq!(r.ask(F::Get, T).await, Ok((2, 0)));
    r.tell(F::Crash);
    r.tell(F::Bump); // queued behind the crash: survives the restart
    assert_eq!(r.ask(F::Get, T).await, Ok((1, 1)));
    assert_eq!(starts.load(Ordering::SeqCst), 2);
    assert!(r.is_alive());
    // No Down for a restart.
    r.stop();
    assert_eq!(down.await.reason, ExitReason::Stopped);
}

#[tokio::test(start_paused = true)]
async fn gives_up_past_the_intensity_limit() {
    let system = ActorSystem::new();
    let starts = Arc::new(AtomicU32::new(0));
    let r = system
        .build(fragile(&starts))
        .supervise(
            Supervision::on_failure()
                .backoff(Backoff::none())
                .limit(3, Duration::from_secs(10)),
        )
        .spawn()
        .unwrap();
    let down = r.monitor();
    for _ in 0..4 {
        r.tell(F::Crash);
    }
    let down = down.await;
    match down.reason {
        ExitReason::RestartLimit {
            max_restarts,
            within,
            last,
        } => {
            assert_eq!(max_restarts, 3);
            assert_eq!(within, Duration::from_secs(10));
            assert_eq!(*last, ExitReason::Panicked("crash #3".into()));
        }
        other => panic!("expected RestartLimit, got {other:?}"),
    }
    assert_eq!(starts.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn backoff_delays_each_restart_exponentially() {
    let system = ActorSystem::new();
    let starts = Arc::new(AtomicU32::new(0));
    let r = system
        .build(fragile(&starts))
        .supervise(
            Supervision::on_failure()
                .backoff(Backoff::exponential(
                    Duration::from_millis(100),
                    Duration::from_secs(1),
                ))
                .limit(10, Duration::from_secs(60)),
        )
        .spawn()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    r.tell(F::Crash);
    r.tell(F::Crash);
    r.tell(F::Crash);
    assert_eq!(r.ask(F::Get, T).await, Ok((0, 3)));
    // 100 + 200 + 400 ms of backoff, on paused (virtual) time.
    assert_eq!(t0.elapsed(), Duration::from_millis(700));
}

#[tokio::test(start_paused = true)]
async fn never_policy_does_not_restart_and_always_restarts_normal_exit() {
    let system = ActorSystem::new();
    let starts = Arc::new(AtomicU32::new(0));
    let never = system.build(fragile(&starts)).spawn().unwrap();
    never.tell(F::Crash);
    assert!(matches!(
        never.monitor().await.reason,
        ExitReason::Panicked(_)
    ));

    let always = system
        .build(fragile(&starts))
        .supervise(Supervision::always())
        .spawn()
        .unwrap();
    always.tell(F::Quit);
    assert_eq!(always.ask(F::Get, T).await, Ok((0, 1)));
}

#[tokio::test(start_paused = true)]
async fn external_stop_during_backoff_ends_the_actor() {
    let system = ActorSystem::new();
    let starts = Arc::new(AtomicU32::new(0));
    let r = system
        .build(fragile(&starts))
        .supervise(Supervision::on_failure().backoff(Backoff::fixed(Duration::from_secs(30))))
        .spawn()
        .unwrap();
    let down = r.monitor();
    r.tell(F::Crash);
    tokio::time::sleep(Duration::from_secs(1)).await; // timing-ok: paused clock, a second into the 30 s backoff
    r.stop();
    assert_eq!(down.await.reason, ExitReason::Stopped);
    assert_eq!(starts.load(Ordering::SeqCst), 1);
}
