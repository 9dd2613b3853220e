//! The counter `plexus node` serves, shared with the multi-process tests
//! (which include this file, those of plexus-remote too: hence
//! `plexus_core` paths, not the facade's).
#![allow(dead_code)] // each includer uses a different part

use plexus_core::{Actor, ActorRef, Context, ReplyTo};
use serde::{Deserialize, Serialize};

/// Requests to the counter.
#[derive(Serialize, Deserialize)]
pub enum Counter {
    /// Add to the total.
    Add(u64),
    /// Reply with the total.
    Get(ReplyTo<u64>),
    /// Tell the total to the ref inside the message.
    Report(ActorRef<Total>),
    /// Reply with the node id (to tell restarted nodes apart).
    Whoami(ReplyTo<u64>),
}
plexus_core::remote_message!(Counter = "plexus.cli.Counter");

/// A total, sent to the ref of `Counter::Report`.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub struct Total(pub u64);
plexus_core::remote_message!(Total = "plexus.cli.Total");

/// The counter actor.
#[derive(Default)]
pub struct CounterActor(pub u64);

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, ctx: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.0 += n,
            Counter::Get(r) => r.send(self.0),
            Counter::Report(to) => to.tell(Total(self.0)),
            Counter::Whoami(r) => r.send(ctx.system().node_id().as_u64()),
        }
    }
}
