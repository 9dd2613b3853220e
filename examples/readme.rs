//! The example on the README's first screen.
use plexus::prelude::*;
use std::time::Duration;

enum Counter {
    Add(u64),
    Get(ReplyTo<u64>),
}

#[derive(Default)]
struct CounterActor {
    total: u64,
}

impl Actor for CounterActor {
    type Msg = Counter;
    async fn handle(&mut self, msg: Counter, _ctx: &mut Context<Counter>) {
        match msg {
            Counter::Add(n) => self.total += n,
            Counter::Get(reply) => reply.send(self.total),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), AskError> {
    let system = ActorSystem::new();
    let counter = system.spawn(CounterActor::default());
    counter.tell(Counter::Add(40));
    counter.tell(Counter::Add(2));
    assert_eq!(counter.ask(Counter::Get, Duration::from_secs(1)).await?, 42);
    println!("total: 42");
    system.shutdown().await;
    Ok(())
}
