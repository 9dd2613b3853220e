//! Trace contexts (issue 31): a message that arrives from another node with
//! a trace context is handled inside a `handle` span made a child of that
//! context, and a message without one outside any span, whatever way the
//! messages are batched out of the mailbox.
//!
//! The propagator here stands in for a tracing backend: it remembers the
//! parent it was given for each span, and calls that the current context
//! while the span is entered. Messages arrive through an actor's
//! [`Inbound`](plexus_core::remote::Inbound), as a node delivers them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use plexus_core::remote::{inbound, RemoteMessage};
use plexus_core::trace::{self, Propagator, TraceContext};
use plexus_core::{Actor, ActorSystem, Context};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Serialize, Deserialize)]
struct Numbered(u32);
plexus_core::remote_message!(Numbered = "test.trace.Numbered");

/// The parent each open span was given, by span id.
static PARENTS: Mutex<Option<HashMap<u64, TraceContext>>> = Mutex::new(None);

struct Remembering;

impl Propagator for Remembering {
    fn current(&self) -> Option<TraceContext> {
        let id = tracing::Span::current().id()?.into_u64();
        PARENTS.lock().unwrap().as_ref()?.get(&id).copied()
    }

    fn set_parent(&self, span: &tracing::Span, parent: TraceContext) {
        let id = span
            .id()
            .expect("the registry enables every span")
            .into_u64();
        PARENTS
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(id, parent);
    }
}

/// Installs the registry (so spans have ids) and the propagator, once.
fn install() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry())
            .expect("the only subscriber of this test binary");
        trace::set_propagator(Remembering).expect("the only propagator of this test binary");
    });
}

/// What the actor saw for one message: the current context, and the name
/// of the span it was handled in.
type Seen = (u32, Option<TraceContext>, Option<&'static str>);

/// Records what it sees; its first message waits for a gate, so the
/// messages after it pile up and are taken as one batch.
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    blocked: Option<oneshot::Sender<()>>,
    gate: Option<oneshot::Receiver<()>>,
    last: u32,
    done: Option<oneshot::Sender<()>>,
}

impl Actor for Recorder {
    type Msg = Numbered;

    async fn handle(&mut self, Numbered(n): Numbered, _: &mut Context<Numbered>) {
        let span = tracing::Span::current().metadata().map(|m| m.name());
        self.seen.lock().unwrap().push((n, trace::current(), span));
        if let (Some(blocked), Some(gate)) = (self.blocked.take(), self.gate.take()) {
            let _ = blocked.send(());
            let _ = gate.await;
        }
        if n == self.last {
            if let Some(done) = self.done.take() {
                let _ = done.send(());
            }
        }
    }
}

fn context(seed: u8, n: u32) -> TraceContext {
    let mut span = [0u8; 8];
    span[..4].copy_from_slice(&n.to_le_bytes());
    span[7] = 1;
    TraceContext::new([seed.max(1); 16], span, 1).expect("non-zero ids")
}

/// Delivers message 0 (traced or not), waits until the actor blocks in it,
/// delivers the rest, opens the gate, and returns what the actor saw
/// beside what each message carried.
fn run(first: Option<u8>, rest: &[Option<u8>]) -> (Vec<Seen>, Vec<Option<TraceContext>>) {
    install();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let system = ActorSystem::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (blocked_tx, blocked) = oneshot::channel();
        let mut blocked = Some(blocked);
        let (gate, gate_rx) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let actor = system.spawn(Recorder {
            seen: Arc::clone(&seen),
            blocked: Some(blocked_tx),
            gate: Some(gate_rx),
            last: rest.len() as u32,
            done: Some(done_tx),
        });
        let to = inbound(actor);
        let mut sent = Vec::new();
        for (n, seed) in std::iter::once(first)
            .chain(rest.iter().copied())
            .enumerate()
        {
            let n = n as u32;
            let payload = Numbered(n).into_payload().unwrap();
            let trace = seed.map(|s| context(s, n));
            match trace {
                Some(t) => to.deliver_traced(payload, t).unwrap(),
                None => to.deliver(payload).unwrap(),
            }
            sent.push(trace);
            if let Some(blocked) = blocked.take() {
                blocked.await.unwrap();
                // Taken out of the mailbox alone; the others pile up.
            }
        }
        let _ = gate.send(());
        done.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        system.shutdown().await;
        (seen, sent)
    })
}

fn check(seen: &[Seen], sent: &[Option<TraceContext>]) {
    assert_eq!(seen.len(), sent.len());
    for (i, ((n, current, span), carried)) in seen.iter().zip(sent).enumerate() {
        assert_eq!(*n as usize, i, "handled in order");
        assert_eq!(current, carried, "message {i}: its own context, or none");
        let expected = carried.map(|_| "handle");
        assert_eq!(*span, expected, "message {i}: its span");
    }
}

#[test]
fn a_traced_message_is_handled_under_its_context_and_an_untraced_one_under_none() {
    let (seen, sent) = run(Some(7), &[None, Some(3), Some(3), None, None, Some(9)]);
    check(&seen, &sent);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// However traced and untraced messages interleave in one batch, each
    /// is handled under exactly the context it came with.
    #[test]
    fn every_message_keeps_its_own_context_through_a_batch(
        first in proptest::option::of(any::<u8>()),
        rest in proptest::collection::vec(proptest::option::of(any::<u8>()), 0..48),
    ) {
        let (seen, sent) = run(first, &rest);
        check(&seen, &sent);
    }
}
