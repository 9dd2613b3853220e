//! Timers (on paused time) and the local registry.

use std::time::Duration;

use plexus_core::{
    ActorRef, ActorSystem, Context, ExitReason, LookupError, RegistryError, ReplyTo, SpawnError,
};
use tokio::sync::mpsc;

enum T {
    Start,
    Tick(u32),
}

fn ticker(system: &ActorSystem, out: mpsc::UnboundedSender<(u32, Duration)>) -> ActorRef<T> {
    let t0 = tokio::time::Instant::now();
    let mut n = 0;
    system.spawn_fn(move |m: T, ctx: &mut Context<T>| match m {
        T::Start => {
            ctx.send_after(Duration::from_millis(50), T::Tick(1000));
            ctx.interval(Duration::from_millis(100), move || {
                n += 1;
                T::Tick(n)
            });
        }
        T::Tick(i) => {
            let _ = out.send((i, t0.elapsed()));
        }
    })
}

#[tokio::test(start_paused = true)]
async fn send_after_and_interval_fire_on_time() {
    let system = ActorSystem::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let t = ticker(&system, tx);
    t.tell(T::Start);
    let ms = |d: Duration| d.as_millis();
    let got: Vec<(u32, u128)> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            let (i, at) = rx.recv().await.unwrap();
            v.push((i, ms(at)));
        }
        v
    };
    assert_eq!(got, vec![(1000, 50), (1, 100), (2, 200), (3, 300)]);
}

#[tokio::test(start_paused = true)]
async fn timers_are_cancelled_when_the_actor_stops() {
    let system = ActorSystem::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let t = ticker(&system, tx);
    t.tell(T::Start);
    rx.recv().await.unwrap();
    t.stop();
    t.monitor().await;
    let dead_before = system.dead_letters().count();
    tokio::time::sleep(Duration::from_secs(10)).await; // timing-ok: paused clock, past every timer
                                                       // No tick arrived, and none was even sent (no dead letters).
    assert!(rx.try_recv().is_err());
    assert_eq!(system.dead_letters().count(), dead_before);
}

#[tokio::test(start_paused = true)]
async fn cancelled_timer_never_fires() {
    let system = ActorSystem::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<u32>();
    let a = system.spawn_fn(move |m: u32, ctx: &mut Context<u32>| {
        if m == 0 {
            let t = ctx.send_after(Duration::from_millis(10), 1);
            ctx.send_after(Duration::from_millis(20), 2);
            t.cancel();
        } else {
            let _ = tx.send(m);
        }
    });
    a.tell(0);
    assert_eq!(rx.recv().await, Some(2));
}

#[tokio::test]
async fn registry_registers_looks_up_and_refuses_taken_names() {
    let system = ActorSystem::new();
    let a = system.spawn_fn(|r: ReplyTo<&'static str>, _ctx| r.send("a"));
    let b = system.spawn_fn(|r: ReplyTo<&'static str>, _ctx| r.send("b"));
    system.register("svc", &a).unwrap();
    assert_eq!(
        system.register("svc", &b),
        Err(RegistryError::NameTaken {
            name: "svc".into(),
            holder: a.id()
        })
    );
    assert_eq!(system.register("", &b), Err(RegistryError::EmptyName));
    let found: ActorRef<ReplyTo<&'static str>> = system.lookup("svc").unwrap();
    assert_eq!(found, a);
    assert_eq!(found.ask(|r| r, Duration::from_secs(1)).await, Ok("a"));
    match system.lookup::<u64>("svc") {
        Err(LookupError::WrongType {
            expected, actual, ..
        }) => {
            assert_eq!(expected, "u64");
            assert!(actual.contains("ReplyTo<&str>"), "{actual}");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_eq!(
        system.lookup::<u64>("nope"),
        Err(LookupError::NotFound {
            name: "nope".into()
        })
    );
    assert_eq!(system.unregister("svc"), Some(a.id()));
    system.register("svc", &b).unwrap();
}

#[tokio::test]
async fn names_are_released_when_the_actor_stops() {
    let system = ActorSystem::new();
    let a = system
        .build(|| plexus_core::FnActor::new(|(), _ctx: &mut Context<()>| {}))
        .name("worker")
        .spawn()
        .unwrap();
    let err = system
        .build(|| plexus_core::FnActor::new(|(), _ctx: &mut Context<()>| {}))
        .name("worker")
        .spawn()
        .unwrap_err();
    assert!(matches!(
        err,
        SpawnError::Name(RegistryError::NameTaken { .. })
    ));
    a.stop();
    assert_eq!(a.monitor().await.reason, ExitReason::Stopped);
    assert!(matches!(
        system.lookup::<()>("worker"),
        Err(LookupError::NotFound { .. })
    ));
    assert_eq!(system.registered(), 0);
    assert_eq!(
        system.register("worker", &a),
        Err(RegistryError::ActorStopped {
            name: "worker".into(),
            id: a.id()
        })
    );
}

#[test]
fn errors_read_as_actionable_sentences() {
    let id = plexus_core::ActorId::new(plexus_core::NodeId::from_u64(1), 5);
    let e = RegistryError::NameTaken {
        name: "svc".into(),
        holder: id,
    };
    assert_eq!(
        e.to_string(),
        "register name \"svc\": already taken by actor 5@0000000000000001"
    );
    let e = plexus_core::AskError::Timeout {
        target: id,
        timeout: Duration::from_millis(200),
    };
    assert_eq!(
        e.to_string(),
        "ask actor 5@0000000000000001: no reply within 200ms"
    );
}
