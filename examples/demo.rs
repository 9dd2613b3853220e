//! A tour of the local runtime: ask, supervision, monitors, links,
//! narrowed refs, the registry, dead letters and shutdown.
//!
//! Run with `cargo run --release --example demo`.

use std::time::Duration;

use plexus::prelude::*;
use plexus::{Backoff, DeadLetterReason};

const TIMEOUT: Duration = Duration::from_secs(1);

/// A bank account; it fails (panics) on an overdraft, and its supervisor
/// restarts it from a fresh state.
#[derive(Default)]
struct Account {
    balance: i64,
}

enum Bank {
    Deposit(i64),
    Withdraw(i64),
    Balance(ReplyTo<(i64, u32)>),
}

impl Actor for Account {
    type Msg = Bank;

    async fn started(&mut self, ctx: &mut Context<Bank>) {
        println!("  account {} started (restart #{})", ctx.id(), ctx.restarts());
    }

    async fn handle(&mut self, msg: Bank, ctx: &mut Context<Bank>) {
        match msg {
            Bank::Deposit(n) => self.balance += n,
            Bank::Withdraw(n) if n > self.balance => {
                panic!("overdraft: {n} > {}", self.balance)
            }
            Bank::Withdraw(n) => self.balance -= n,
            Bank::Balance(reply) => reply.send((self.balance, ctx.restarts())),
        }
    }
}

/// Watches other actors and reports what it sees.
struct Watchdog;

enum Watch {
    Monitor(ActorRef<Bank>),
}

impl Actor for Watchdog {
    type Msg = Watch;
    async fn handle(&mut self, Watch::Monitor(target): Watch, ctx: &mut Context<Watch>) {
        ctx.monitor(&target);
    }
    async fn on_down(&mut self, down: Down, _ctx: &mut Context<Watch>) {
        println!("  watchdog: {} is down ({})", down.id, down.reason);
    }
}

/// An event several actor types subscribe to, through narrowed refs.
#[derive(Clone, Copy)]
struct PriceChanged(u32);

enum Trader {
    Price(PriceChanged),
    Sync(ReplyTo<()>),
}
impl From<PriceChanged> for Trader {
    fn from(p: PriceChanged) -> Self {
        Trader::Price(p)
    }
}

enum Logger {
    Price(PriceChanged),
    Sync(ReplyTo<()>),
}
impl From<PriceChanged> for Logger {
    fn from(p: PriceChanged) -> Self {
        Logger::Price(p)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Panics are part of the tour; print them on one line.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        println!("  (a handler panicked: {msg})");
    }));
    let system = ActorSystem::new();
    println!("node {}", system.node_id());

    println!("\n1. ask: typed request and reply");
    let account = system
        .build(Account::default)
        .supervise(
            Supervision::on_failure()
                .backoff(Backoff::exponential(
                    Duration::from_millis(10),
                    Duration::from_millis(100),
                ))
                .limit(2, Duration::from_secs(5)),
        )
        .name("account")
        .spawn()?;
    account.tell(Bank::Deposit(100));
    account.tell(Bank::Withdraw(30));
    let (balance, _) = account.ask(Bank::Balance, TIMEOUT).await?;
    println!("  balance after +100 -30: {balance}");

    println!("\n2. supervision: a failure restarts the actor from fresh state, same ref");
    let watchdog = system.spawn(Watchdog);
    watchdog.tell(Watch::Monitor(account.clone()));
    account.tell(Bank::Withdraw(1_000));
    let (balance, restarts) = account.ask(Bank::Balance, TIMEOUT).await?;
    println!("  after the overdraft: balance {balance}, restarts {restarts}, same id {}", account.id());
    let looked_up = system.lookup::<Bank>("account")?;
    println!("  registry still finds it: {}", looked_up == account);

    println!("\n3. restart limit: two more failures within 5 s and the supervisor gives up");
    account.tell(Bank::Withdraw(1));
    account.tell(Bank::Withdraw(1));
    let down = account.monitor().await;
    println!("  account down: {}", down.reason);
    match account.ask(Bank::Balance, TIMEOUT).await {
        Err(e) => println!("  ask now fails at once: {e}"),
        Ok(_) => println!("  unexpected reply"),
    }
    tokio::task::yield_now().await; // let the watchdog print its Down

    println!("\n4. narrowed refs: one list of subscribers of different actor types");
    let mut seen = 0;
    let trader = system.spawn_fn(move |msg: Trader, _ctx| match msg {
        Trader::Price(PriceChanged(p)) => {
            seen += 1;
            println!("  trader sees price {p} (event #{seen})");
        }
        Trader::Sync(done) => done.send(()),
    });
    let logger = system.spawn_fn(|msg: Logger, _ctx| match msg {
        Logger::Price(PriceChanged(p)) => println!("  logger: price {p}"),
        Logger::Sync(done) => done.send(()),
    });
    let subscribers: Vec<ActorRef<PriceChanged>> = vec![trader.narrow(), logger.narrow()];
    for s in &subscribers {
        s.tell(PriceChanged(42));
    }
    trader.ask(Trader::Sync, TIMEOUT).await?;
    logger.ask(Logger::Sync, TIMEOUT).await?;

    println!("\n5. dead letters: a message to a stopped actor is counted, never lost silently");
    let mut letters = system.dead_letters().subscribe();
    trader.stop();
    trader.monitor().await;
    trader.tell(Trader::Price(PriceChanged(7)));
    let dl = letters.recv().await?;
    assert_eq!(dl.reason, DeadLetterReason::Stopped);
    println!(
        "  dead letter for {}: {} ({:?}); {} so far",
        dl.target,
        dl.message_type,
        dl.reason,
        system.dead_letters().count()
    );

    println!("\n6. shutdown: stop every actor gracefully");
    println!("  live actors before: {}", system.live_actors());
    system.shutdown().await;
    println!("  live actors after: {}", system.live_actors());
    Ok(())
}
