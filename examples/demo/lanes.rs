//! Section 21 of the demo: a bulk transfer and a control ping between two
//! nodes, first with everything on one TCP connection, then with the
//! control and bulk lanes each on a TCP connection of its own.

use std::time::{Duration, Instant};

use plexus::prelude::*;
use plexus::remote::Bulk;
use plexus::remote::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// A control ping: its type takes the control lane.
#[derive(Serialize, Deserialize)]
struct Ping(ReplyTo<()>);
remote_message!(Ping = "demo.lanes.Ping", lane = Control);

/// 512 chunks of 64 KiB: 32 MiB queued at once.
const CHUNKS: usize = 512;
const CHUNK: usize = 64 << 10;

pub async fn tour() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n21. lanes: 32 MiB of bulk data and a control ping between two nodes, on one lane, then on separate lanes"
    );
    for separate in [false, true] {
        let (first_ping, transfer) = bulk_and_ping(separate).await?;
        println!(
            "  {}: the ping sent behind the bulk data answered in {:.2} ms (the 32 MiB took {:.1} ms)",
            if separate {
                "separate lanes (control and bulk each on a TCP connection of its own)"
            } else {
                "one lane (everything on one TCP connection)"
            },
            first_ping.as_secs_f64() * 1e3,
            transfer.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}

/// Queues the bulk data, then pings at once: returns the ping's round trip
/// and how long the bulk data took to arrive.
async fn bulk_and_ping(separate: bool) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    let mut config = NodeConfig::default().cookie("demo-lanes");
    if separate {
        config = config
            .scheme("ctl", "tcp / framing")
            .scheme("bulk", "tcp / framing")
            .lane(Lane::Control, "ctl")
            .lane(Lane::Bulk, "bulk");
    }
    let (a, b) = (ActorSystem::new(), ActorSystem::new());
    let na = Node::start(&a, config.clone())?;
    let nb = Node::start(&b, config)?;
    let uri = nb.listen("tcp://127.0.0.1:0").await?;
    if separate {
        nb.listen("ctl://127.0.0.1:0").await?;
        nb.listen("bulk://127.0.0.1:0").await?;
    }
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let mut received = 0usize;
    let sink = b.spawn_fn(move |chunk: Bulk, _ctx| {
        received += chunk.0.len();
        if received == CHUNKS * CHUNK {
            let _ = done_tx.send(Instant::now());
        }
    });
    let pong = b.spawn_fn(|Ping(reply): Ping, _ctx| reply.send(()));
    nb.publish(&sink, "sink")?;
    nb.publish(&pong, "pong")?;
    let sink = na.resolve::<Bulk>(&format!("{uri}/sink")).await?;
    let pong = na.resolve::<Ping>(&format!("{uri}/pong")).await?;
    pong.ask(Ping, Duration::from_secs(5)).await?;

    let chunk = Bytes::from(vec![7u8; CHUNK]);
    let start = Instant::now();
    for _ in 0..CHUNKS {
        sink.tell(Bulk(chunk.clone()));
    }
    let sent = Instant::now();
    pong.ask(Ping, Duration::from_secs(10)).await?;
    let first_ping = sent.elapsed();
    let arrived = tokio::time::timeout(Duration::from_secs(10), done.recv())
        .await?
        .ok_or("the sink stopped")?;
    na.shutdown().await;
    nb.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
    Ok((first_ping, arrived - start))
}
