//! The counter `plexus node` serves, shared with the multi-process tests.
#![allow(dead_code)] // each includer uses a different part

use plexus::{Actor, Context, ReplyTo};
use serde::{Deserialize, Serialize};

/// Requests to the counter.
#[derive(Serialize, Deserialize)]
pub enum Counter {
    /// Add to the total.
    Add(u64),
    /// Reply with the total.
    Get(ReplyTo<u64>),
}
plexus::remote_message!(Counter = "plexus.cli.Counter");

/// The counter actor.
#[derive(Default)]
pub struct CounterActor(pub u64);

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, _ctx: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.0 += n,
            Counter::Get(r) => r.send(self.0),
        }
    }
}
