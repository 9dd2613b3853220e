//! Monitors deliver `Down` exactly once; links propagate abnormal exits.

use plexus_core::{Actor, ActorRef, ActorSystem, Context, Down, Exit, ExitReason};
use tokio::sync::mpsc;

/// Reports every `Down` and `Exit` it sees.
struct Watcher {
    events: mpsc::UnboundedSender<String>,
    trap: bool,
}

enum W {
    Monitor(ActorRef<()>),
    Link(ActorRef<()>),
    Fail,
}

impl Actor for Watcher {
    type Msg = W;
    async fn started(&mut self, ctx: &mut Context<W>) {
        ctx.trap_exits(self.trap);
    }
    async fn handle(&mut self, msg: W, ctx: &mut Context<W>) {
        match msg {
            W::Monitor(r) => {
                ctx.monitor(&r);
            }
            W::Link(r) => ctx.link(&r),
            W::Fail => ctx.fail("told to fail"),
        }
    }
    async fn on_down(&mut self, down: Down, _ctx: &mut Context<W>) {
        let _ = self
            .events
            .send(format!("down {}: {}", down.id, down.reason));
    }
    async fn on_exit(&mut self, exit: Exit, _ctx: &mut Context<W>) {
        let _ = self
            .events
            .send(format!("exit {}: {}", exit.from, exit.reason));
    }
    async fn stopped(&mut self, reason: &ExitReason, _ctx: &mut Context<W>) {
        let _ = self.events.send(format!("stopped: {reason}"));
    }
}

fn watcher(system: &ActorSystem, trap: bool) -> (ActorRef<W>, mpsc::UnboundedReceiver<String>) {
    let (events, rx) = mpsc::unbounded_channel();
    (system.spawn(Watcher { events, trap }), rx)
}

fn idle(system: &ActorSystem) -> ActorRef<()> {
    system.spawn_fn(|(), _ctx| {})
}

/// Fails with "bye" on its first message.
fn failing(system: &ActorSystem) -> ActorRef<()> {
    system.spawn_fn(|(), ctx: &mut Context<()>| ctx.fail("bye"))
}

#[tokio::test]
async fn monitor_delivers_down_exactly_once() {
    let system = ActorSystem::new();
    let (w, mut events) = watcher(&system, false);
    let target = idle(&system);
    // Two monitors from the same actor: two Downs, each exactly once.
    w.tell(W::Monitor(target.clone()));
    w.tell(W::Monitor(target.clone()));
    // Whether these run before or after the stop, each yields one Down.
    target.stop();
    for _ in 0..2 {
        assert_eq!(
            events.recv().await.unwrap(),
            format!("down {}: stopped on request", target.id())
        );
    }
    w.stop();
    assert_eq!(events.recv().await.unwrap(), "stopped: stopped on request");
    assert_eq!(events.recv().await, None, "no further Down");
}

#[tokio::test]
async fn monitor_of_already_stopped_actor_fires_at_once() {
    let system = ActorSystem::new();
    let target = failing(&system);
    target.tell(());
    let first = target.monitor().await;
    assert_eq!(first.reason, ExitReason::Failed("bye".into()));
    // Later monitors see the same reason at once.
    let (w, mut events) = watcher(&system, false);
    w.tell(W::Monitor(target.clone()));
    assert_eq!(
        events.recv().await.unwrap(),
        format!("down {}: failed: bye", target.id())
    );
    assert_eq!(target.monitor().await, first);
}

#[tokio::test]
async fn dropping_a_monitor_future_cancels_it() {
    let system = ActorSystem::new();
    let target = idle(&system);
    for _ in 0..1_000 {
        drop(target.monitor());
    }
    let kept = target.monitor();
    target.stop();
    assert_eq!(kept.await.reason, ExitReason::Stopped);
}

#[tokio::test]
async fn abnormal_exit_propagates_over_link() {
    let system = ActorSystem::new();
    let (w, mut events) = watcher(&system, false);
    let buddy = failing(&system);
    w.tell(W::Link(buddy.clone()));
    let w_down = w.monitor();
    buddy.tell(());
    let down = w_down.await;
    assert_eq!(
        down.reason,
        ExitReason::Linked {
            from: buddy.id(),
            reason: Box::new(ExitReason::Failed("bye".into()))
        }
    );
    assert!(events
        .recv()
        .await
        .unwrap()
        .starts_with("stopped: linked actor"));
}

#[tokio::test]
async fn link_is_bidirectional() {
    let system = ActorSystem::new();
    let (w, _events) = watcher(&system, false);
    let buddy = idle(&system);
    w.tell(W::Link(buddy.clone()));
    let buddy_down = buddy.monitor();
    w.tell(W::Fail);
    assert_eq!(
        buddy_down.await.reason,
        ExitReason::Linked {
            from: w.id(),
            reason: Box::new(ExitReason::Failed("told to fail".into()))
        }
    );
}

#[tokio::test]
async fn normal_exit_does_not_propagate() {
    let system = ActorSystem::new();
    let (w, _events) = watcher(&system, false);
    let buddy = idle(&system);
    w.tell(W::Link(buddy.clone()));
    w.tell(W::Monitor(buddy.clone()));
    buddy.stop();
    buddy.monitor().await;
    // The watcher is still serving: it answers a monitor request normally.
    let other = idle(&system);
    let sync = other.monitor();
    w.tell(W::Monitor(other.clone()));
    other.stop();
    sync.await;
    assert!(w.is_alive());
}

#[tokio::test]
async fn trapping_actor_receives_exit_instead_of_dying() {
    let system = ActorSystem::new();
    let (w, mut events) = watcher(&system, true);
    let buddy = failing(&system);
    w.tell(W::Link(buddy.clone()));
    w.tell(W::Monitor(buddy.clone()));
    buddy.tell(());
    let mut got = vec![events.recv().await.unwrap(), events.recv().await.unwrap()];
    got.sort();
    assert_eq!(
        got,
        vec![
            format!("down {}: failed: bye", buddy.id()),
            format!("exit {}: failed: bye", buddy.id()),
        ]
    );
    assert!(w.is_alive());
}

#[tokio::test]
async fn linking_to_a_dead_actor_delivers_its_exit_at_once() {
    let system = ActorSystem::new();
    let dead = failing(&system);
    dead.tell(());
    dead.monitor().await;
    let (w, _events) = watcher(&system, false);
    let w_down = w.monitor();
    w.tell(W::Link(dead.clone()));
    assert!(matches!(w_down.await.reason, ExitReason::Linked { .. }));
}
