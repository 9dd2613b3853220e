//! A layer of one's own whose state the application reads: `count` counts
//! the frames it passes each way. It is registered under a name, put in a
//! scheme's stack (`counted` = `tcp / framing / count`) on two nodes, and
//! after an exchange of asks between them each application reads its own
//! node's counters through the `Arc` it handed the layer's constructor.
//!
//! ```sh
//! cargo run --example counted_layer
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus::net::{
    Frame, Interface, Layer, LayerConstructor, LayerFactory, LayerOptions, LayerRegistry,
    LinkContext, OptionError, Output, ReceiveError, StackSendError,
};
use plexus::prelude::*;
use plexus::NodeError;
use serde::{Deserialize, Serialize};

/// What the application reads: frames through every `count` layer of one
/// node (one layer per link; they share these counters).
#[derive(Debug, Default)]
struct Frames {
    sent: AtomicU64,
    received: AtomicU64,
}

/// The layer: one per link, sans-IO, passing every frame on unchanged.
struct Count(Arc<Frames>);

impl Layer for Count {
    fn name(&self) -> &'static str {
        "count"
    }

    fn handle_send(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        self.0.sent.fetch_add(1, Ordering::Relaxed);
        out.push_down(frame);
        Ok(())
    }

    fn handle_receive(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        self.0.received.fetch_add(1, Ordering::Relaxed);
        out.push_up(frame);
        Ok(())
    }

    fn handle_timeout(&mut self, _now: Instant, _out: &mut Output) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// Registered under the layer's name; builds a `Count` for each link,
/// handing it the shared counters.
struct CountConstructor(Arc<Frames>);

impl LayerConstructor for CountConstructor {
    fn interface(&self) -> Interface {
        // Whole messages in, whole messages out: it goes above `framing`.
        Interface::MESSAGE
    }

    fn configure(&self, _options: &LayerOptions) -> Result<LayerFactory, OptionError> {
        let frames = Arc::clone(&self.0);
        Ok(Arc::new(move |_link: &LinkContext| {
            Box::new(Count(Arc::clone(&frames))) as Box<dyn Layer>
        }))
    }
}

/// A node whose `counted://` scheme runs through a `count` layer, and the
/// counters of that layer.
fn node(system: &ActorSystem) -> Result<(Node, Arc<Frames>), NodeError> {
    let frames = Arc::new(Frames::default());
    // The default registry holds the built-in layers (`framing`, ...).
    let mut layers = LayerRegistry::default();
    layers.register("count", CountConstructor(Arc::clone(&frames)));
    let config = NodeConfig::default()
        .cookie("counted-example")
        .layers(layers)
        .scheme("counted", "tcp / framing / count");
    Ok((Node::start(system, config)?, frames))
}

#[derive(Serialize, Deserialize)]
enum Echo {
    Ask(u64, ReplyTo<u64>),
}
remote_message!(Echo = "example.Echo");

const ASKS: u64 = 100;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (server_sys, client_sys) = (ActorSystem::new(), ActorSystem::new());
    let (server, server_frames) = node(&server_sys)?;
    let (client, client_frames) = node(&client_sys)?;

    let uri = server.listen("counted://127.0.0.1:0").await?;
    let echo = server_sys.spawn_fn(|Echo::Ask(n, reply), _ctx| reply.send(n));
    server.publish(&echo, "echo")?;

    let echo = client.resolve::<Echo>(&format!("{uri}/echo")).await?;
    for i in 0..ASKS {
        let n = echo
            .ask(|reply| Echo::Ask(i, reply), Duration::from_secs(5))
            .await?;
        assert_eq!(n, i);
    }

    // Each application reads its own node's layer. Every ask went down
    // through the client's layer and up through the server's, and its
    // reply back (the handshake and the resolve passed through too).
    let (sent, received) = (
        client_frames.sent.load(Ordering::Relaxed),
        server_frames.received.load(Ordering::Relaxed),
    );
    println!("client: {sent} frames sent through `count`");
    println!("server: {received} frames received through `count`");
    println!(
        "server: {} sent, client: {} received",
        server_frames.sent.load(Ordering::Relaxed),
        client_frames.received.load(Ordering::Relaxed)
    );
    assert!(sent >= ASKS && received >= ASKS);

    client.shutdown().await;
    server.shutdown().await;
    Ok(())
}
