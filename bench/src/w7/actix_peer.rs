//! The W7 patterns on actix, written as an actix user would write them.
//!
//! Actix's model is one single-threaded arbiter per thread: an actor lives
//! on the arbiter that started it and its messages are handled there. So
//! each measurement runs in an `actix::System` of its own, on a thread of
//! its own (a system's state is thread-local, and its runtime cannot run
//! inside the bench's tokio runtime):
//! - `spawn`: `Actor::start` on the system's arbiter, as `start` does from
//!   inside a system; the actors share that one thread (spreading them
//!   with `start_in_arbiter` costs a cross-thread closure per actor, which
//!   is not what one writes to spawn many small actors).
//! - `pingpong`: both players on the system's arbiter, `do_send` each hit.
//! - `fanin`: the sink on the system's arbiter and the senders spread
//!   round-robin over one `Arbiter` per core, so the senders run in
//!   parallel as Plexus' and tokio's do; each sender `do_send`s to the sink.
//!
//! `do_send` is actix's fire-and-forget send (it ignores the mailbox
//! capacity, as Plexus' `tell` on an unbounded mailbox and tokio's
//! unbounded channel do); `send` would build a response future per message.

use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::report::peak_rss_bytes;

/// Runs `work` (made inside the system, where actors can start) in a new
/// actix system on a new thread and returns its output once the system's
/// runtime is gone.
fn in_system<T, F, Fut>(work: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    std::thread::spawn(move || {
        let system = actix::System::new();
        let out = system.block_on(async move { work().await });
        System::current().stop();
        out
    })
    .join()
    .expect("actix benchmark thread panicked")
}

// ---------------------------------------------------------------- spawn

#[derive(Message)]
#[rtype(result = "()")]
struct Answer(Addr<Collector>);

#[derive(Message)]
#[rtype(result = "()")]
struct Answered;

/// Answers one message by telling the collector.
struct Answerer;

impl Actor for Answerer {
    type Context = Context<Self>;
}

impl Handler<Answer> for Answerer {
    type Result = ();
    fn handle(&mut self, Answer(collector): Answer, _ctx: &mut Context<Self>) {
        collector.do_send(Answered);
    }
}

struct Collector {
    seen: u64,
    expected: u64,
    done: Option<oneshot::Sender<()>>,
}

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<Answered> for Collector {
    type Result = ();
    fn handle(&mut self, _: Answered, _ctx: &mut Context<Self>) {
        self.seen += 1;
        if self.seen == self.expected {
            if let Some(d) = self.done.take() {
                let _ = d.send(());
            }
        }
    }
}

/// Spawns `n` actors, tells each one message, waits for all answers;
/// returns the seconds and the peak RSS then (before the teardown).
pub fn spawn(n: u64) -> (f64, u64) {
    in_system(move || async move {
        let (done_tx, done) = oneshot::channel();
        let collector = Collector {
            seen: 0,
            expected: n,
            done: Some(done_tx),
        }
        .start();
        let start = Instant::now();
        let mut refs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            refs.push(Answerer.start());
        }
        let spawned = start.elapsed();
        for r in &refs {
            r.do_send(Answer(collector.clone()));
        }
        done.await.expect("collector stopped early");
        let secs = start.elapsed().as_secs_f64();
        eprintln!("actix: spawned in {spawned:?}, answered in {secs:.3} s");
        (secs, peak_rss_bytes().unwrap_or(0))
    })
}

// ------------------------------------------------------------- pingpong

#[derive(Message)]
#[rtype(result = "()")]
enum Ball {
    Peer(Addr<Player>, oneshot::Sender<()>),
    Hit(u64),
}

/// Returns the ball until `limit` hits have been made in all.
struct Player {
    peer: Option<Addr<Player>>,
    done: Option<oneshot::Sender<()>>,
    limit: u64,
}

impl Actor for Player {
    type Context = Context<Self>;
}

impl Handler<Ball> for Player {
    type Result = ();
    fn handle(&mut self, msg: Ball, _ctx: &mut Context<Self>) {
        match msg {
            Ball::Peer(p, done) => {
                p.do_send(Ball::Hit(1));
                self.peer = Some(p);
                self.done = Some(done);
            }
            Ball::Hit(n) if n >= self.limit => match self.done.take() {
                Some(d) => {
                    let _ = d.send(());
                }
                // The other player holds the completion signal.
                None => {
                    if let Some(p) = &self.peer {
                        p.do_send(Ball::Hit(n));
                    }
                }
            },
            Ball::Hit(n) => {
                if let Some(p) = &self.peer {
                    p.do_send(Ball::Hit(n + 1));
                }
            }
        }
    }
}

pub fn pingpong(n: u64) -> Duration {
    in_system(move || async move {
        let a = Player {
            peer: None,
            done: None,
            limit: n,
        }
        .start();
        let b = Player {
            peer: Some(a.clone()),
            done: None,
            limit: n,
        }
        .start();
        let (done_tx, done) = oneshot::channel();
        let start = Instant::now();
        a.do_send(Ball::Peer(b, done_tx));
        done.await.expect("players stopped early");
        start.elapsed()
    })
}

// ---------------------------------------------------------------- fanin

#[derive(Message)]
#[rtype(result = "()")]
struct Value(u64);

#[derive(Message)]
#[rtype(result = "()")]
struct Count(u64);

/// Folds the values into a checksum so the payload is really read.
struct Sink {
    n: u64,
    received: u64,
    checksum: u64,
    done: Option<oneshot::Sender<()>>,
}

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<Value> for Sink {
    type Result = ();
    fn handle(&mut self, Value(v): Value, _ctx: &mut Context<Self>) {
        self.checksum = self.checksum.wrapping_add(v);
        self.received += 1;
        if self.received == self.n {
            if let Some(d) = self.done.take() {
                let _ = d.send(());
            }
            std::hint::black_box(self.checksum);
        }
    }
}

/// Sends `count` values to the sink when told to.
struct Source {
    id: u64,
    sink: Addr<Sink>,
}

impl Actor for Source {
    type Context = Context<Self>;
}

impl Handler<Count> for Source {
    type Result = ();
    fn handle(&mut self, Count(count): Count, _ctx: &mut Context<Self>) {
        for v in 0..count {
            self.sink.do_send(Value(self.id << 40 | v));
        }
    }
}

pub fn fanin(n: u64, senders: u64, threads: usize) -> Duration {
    let (elapsed, arbiters) = in_system(move || async move {
        let (done_tx, done) = oneshot::channel();
        let sink = Sink {
            n,
            received: 0,
            checksum: 0,
            done: Some(done_tx),
        }
        .start();
        let arbiters: Vec<Arbiter> = (0..threads.max(1)).map(|_| Arbiter::new()).collect();
        let per_sender = n / senders;
        let sources: Vec<Addr<Source>> = (0..senders)
            .map(|id| {
                let sink = sink.clone();
                let arbiter = arbiters[id as usize % arbiters.len()].handle();
                Source::start_in_arbiter(&arbiter, move |_| Source { id, sink })
            })
            .collect();
        let start = Instant::now();
        for (i, s) in sources.iter().enumerate() {
            let extra = u64::from((i as u64) < n % senders);
            s.do_send(Count(per_sender + extra));
        }
        done.await.expect("sink stopped early");
        (start.elapsed(), arbiters)
    });
    for a in &arbiters {
        a.stop();
    }
    for a in arbiters {
        let _ = a.join();
    }
    elapsed
}
