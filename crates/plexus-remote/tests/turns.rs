//! What an actor sends to remote actors during one turn is held and handed
//! to the link together (`proxy/cork.rs`): the messages must still arrive
//! in the order sent, whichever path each took (held small ones, long
//! ones sent at once, ones with receipts), to two refs interleaved, and
//! nothing held may wait past an `await` in the handler.

use std::time::Duration;

use plexus_core::remote::ReceiptError;
use plexus_core::{Actor, ActorRef, ActorSystem, Context, Receipt, ReplyTo};
use plexus_remote::{Node, NodeConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

#[derive(Serialize, Deserialize)]
enum Rec {
    Item(u32, Vec<u8>),
    /// How many items arrived before this.
    Count(ReplyTo<u32>),
}
plexus_core::remote_message!(Rec = "test.turns.Rec");

/// Tells each item's number to the test, answers counts.
struct Recorder {
    seen: u32,
    tell: mpsc::UnboundedSender<(u32, usize)>,
}

impl Actor for Recorder {
    type Msg = Rec;
    async fn handle(&mut self, msg: Rec, _ctx: &mut Context<Rec>) {
        match msg {
            Rec::Item(seq, payload) => {
                self.seen += 1;
                let _ = self.tell.send((seq, payload.len()));
            }
            Rec::Count(reply) => reply.send(self.seen),
        }
    }
}

/// The long items' length: over the length a held message may have.
const LONG: usize = 6000;
const N: u32 = 1000;
const T: Duration = Duration::from_secs(10);

struct Go {
    to: ActorRef<Rec>,
    other: ActorRef<Rec>,
    done: oneshot::Sender<(u32, Vec<Result<Receipt, ReceiptError>>)>,
}

/// Sends `N` items to `to` (every 17th long, every 50th with a receipt,
/// awaited: the turn ends there) and every third to `other` between them,
/// then asks `to` how many arrived.
struct Source;

impl Actor for Source {
    type Msg = Go;
    async fn handle(&mut self, go: Go, _ctx: &mut Context<Go>) {
        let mut receipts = Vec::new();
        for seq in 0..N {
            let len = if seq % 17 == 0 { LONG } else { 0 };
            let item = Rec::Item(seq, vec![7; len]);
            if seq % 50 == 25 {
                // Sent when awaited, after what this turn held.
                receipts.push(go.to.tell_with_receipt(item).await);
            } else {
                go.to.tell(item);
            }
            if seq % 3 == 0 {
                go.other.tell(Rec::Item(seq, Vec::new()));
            }
        }
        // The turn ends at this await: if the items were held past it, the
        // count would never cover them (or the ask would wait behind them).
        let count = go.to.ask(Rec::Count, T).await.expect("the count");
        let _ = go.done.send((count, receipts));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_one_turn_arrive_in_order_on_every_path() {
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let cfg = NodeConfig::default().cookie("turns");
    let na = Node::start(&a, cfg.clone()).unwrap();
    let nb = Node::start(&b, cfg).unwrap();
    let uri_b = nb.listen("tcp://127.0.0.1:0").await.unwrap();
    let (tx_to, mut rx_to) = mpsc::unbounded_channel();
    let (tx_other, mut rx_other) = mpsc::unbounded_channel();
    let to = b.spawn(Recorder {
        seen: 0,
        tell: tx_to,
    });
    let other = b.spawn(Recorder {
        seen: 0,
        tell: tx_other,
    });
    nb.publish(&to, "to").unwrap();
    nb.publish(&other, "other").unwrap();
    let to: ActorRef<Rec> = na.resolve(&format!("{uri_b}/to")).await.unwrap();
    let other: ActorRef<Rec> = na.resolve(&format!("{uri_b}/other")).await.unwrap();

    let source = a.spawn(Source);
    let (done, finished) = oneshot::channel();
    source.tell(Go { to, other, done });
    let (count, receipts) = tokio::time::timeout(T, finished).await.unwrap().unwrap();
    assert_eq!(count, N, "every item arrived before the count");
    assert_eq!(receipts.len(), 20);
    for r in receipts {
        assert_eq!(r, Ok(Receipt::Delivered));
    }
    for seq in 0..N {
        let len = if seq % 17 == 0 { LONG } else { 0 };
        assert_eq!(rx_to.recv().await, Some((seq, len)));
    }
    for seq in (0..N).step_by(3) {
        assert_eq!(rx_other.recv().await, Some((seq, 0)));
    }
}
