//! Metrics (issue 31): what `SystemRef::record_metrics` publishes, and the
//! sampled handling-time histogram, read back through metrics-util's
//! debugging recorder installed for this thread only (the runtime is a
//! current-thread one inside it, so actors record there too).

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use plexus_core::telemetry::HANDLE_TIME_SAMPLE;
use plexus_core::{Actor, ActorSystem, Context, DeadLetterReason, ReplyTo};
use tokio::sync::oneshot;

/// Every metric recorded so far, by `name{label=value,...}` (labels
/// sorted). Counters read back as what was set since the last snapshot.
fn snapshot(snapshotter: &Snapshotter) -> HashMap<String, DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn gauge(m: &HashMap<String, DebugValue>, key: &str) -> f64 {
    match m.get(key) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{key}: not a gauge: {other:?}"),
    }
}

fn counter(m: &HashMap<String, DebugValue>, key: &str) -> u64 {
    match m.get(key) {
        Some(DebugValue::Counter(v)) => *v,
        other => panic!("{key}: not a counter: {other:?}"),
    }
}

/// Runs `f` on a current-thread runtime with a debugging recorder
/// installed for this thread.
fn with_recorder<F: std::future::Future<Output = ()>>(f: impl FnOnce(Snapshotter) -> F) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || rt.block_on(f(snapshotter)));
}

/// Blocks in its first message until the gate opens, so the messages told
/// after it wait in its mailbox.
struct Gated {
    gate: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
}

enum G {
    Block,
    Item,
    Sync(ReplyTo<()>),
}

impl Actor for Gated {
    type Msg = G;
    async fn handle(&mut self, msg: G, _ctx: &mut Context<G>) {
        match msg {
            G::Block => {
                if let Some((started, gate)) = self.gate.take() {
                    let _ = started.send(());
                    let _ = gate.await;
                }
            }
            G::Item => {}
            G::Sync(r) => r.send(()),
        }
    }
}

#[test]
fn record_metrics_publishes_alive_mailbox_depths_and_dead_letters() {
    with_recorder(|snapshotter| async move {
        let system = ActorSystem::new();
        let (started_tx, started_rx) = oneshot::channel();
        let (open_tx, open_rx) = oneshot::channel();
        let gated = system.spawn(Gated {
            gate: Some((started_tx, open_rx)),
        });
        let idle = system.spawn(Gated { gate: None });
        gated.tell(G::Block);
        started_rx.await.unwrap();
        for _ in 0..10 {
            gated.tell(G::Item);
        }
        // A stopped actor's letters are dead letters (reason `stopped`).
        let gone = system.spawn(Gated { gate: None });
        let down = gone.monitor();
        gone.stop();
        down.await;
        gone.tell(G::Item);
        gone.tell(G::Item);
        for _ in 0..3 {
            idle.tell(G::Item);
        }

        system.record_metrics();
        let m = snapshot(&snapshotter);
        assert_eq!(gauge(&m, "plexus_actors_alive{}"), 2.0);
        assert_eq!(gauge(&m, "plexus_actor_mailbox_depth{rank=1}"), 10.0);
        // `idle` has not run since: nothing awaited after its 3 letters.
        assert_eq!(gauge(&m, "plexus_actor_mailbox_depth{rank=2}"), 3.0);
        assert_eq!(gauge(&m, "plexus_actor_mailbox_depth{rank=3}"), 0.0);
        assert_eq!(gauge(&m, "plexus_actor_mailbox_messages{}"), 13.0);
        assert_eq!(
            counter(&m, "plexus_actor_dead_letters_total{reason=stopped}"),
            2
        );
        assert_eq!(
            counter(&m, "plexus_actor_dead_letters_total{reason=mailbox_full}"),
            0
        );
        assert_eq!(
            system.dead_letters().count_for(DeadLetterReason::Stopped),
            system.dead_letters().count()
        );
        assert_eq!(
            system.deepest_mailboxes(1),
            vec![(gated.id(), 10)],
            "the deepest mailbox is the gated actor's"
        );

        open_tx.send(()).unwrap();
        gated.ask(G::Sync, Duration::from_secs(10)).await.unwrap();
        idle.ask(G::Sync, Duration::from_secs(10)).await.unwrap();
        system.record_metrics();
        let m = snapshot(&snapshotter);
        assert_eq!(gauge(&m, "plexus_actor_mailbox_depth{rank=1}"), 0.0);
        assert_eq!(gauge(&m, "plexus_actor_mailbox_messages{}"), 0.0);
        system.shutdown().await;
    });
}

#[test]
fn handling_time_is_sampled_per_actor_type() {
    with_recorder(|snapshotter| async move {
        let system = ActorSystem::new();
        let actor = system.spawn(Gated { gate: None });
        // Two samples' worth of messages, the last an ask so all are done.
        for _ in 0..2 * HANDLE_TIME_SAMPLE - 1 {
            actor.tell(G::Item);
        }
        actor.ask(G::Sync, Duration::from_secs(10)).await.unwrap();
        let m = snapshot(&snapshotter);
        let key = format!(
            "plexus_actor_handle_seconds{{actor={}}}",
            std::any::type_name::<Gated>()
        );
        match m.get(&key) {
            Some(DebugValue::Histogram(v)) => assert_eq!(v.len(), 2, "{v:?}"),
            other => panic!("{key}: {other:?}"),
        }
        system.shutdown().await;
    });
}

#[test]
fn record_metrics_describes_what_it_records() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        let system = rt.block_on(async { ActorSystem::new() });
        system.record_metrics();
    });
    let described: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(_, _, help, _)| help.is_some())
        .map(|(k, _, _, _)| k.key().name().to_owned())
        .collect();
    for name in ["plexus_actors_alive", "plexus_actor_dead_letters_total"] {
        assert!(described.iter().any(|n| n == name), "{name}: no HELP");
    }
}
