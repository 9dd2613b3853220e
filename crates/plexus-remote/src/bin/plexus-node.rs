//! A standalone node serving a counter actor, for multi-process tests and
//! for trying Plexus from a shell:
//!
//! ```text
//! plexus-node --listen tcp://127.0.0.1:4000 [--listen udp://127.0.0.1:4001]
//!             [--cookie SECRET] [--name counter]
//!             [--cert n1.pem --key n1.key --ca ca.pem]   # for tls:// and quic://
//! ```
//!
//! Prints `LISTENING <uri>` for each bound URI, then serves until killed.

#[path = "../../tests/common/service.rs"]
mod service;

use plexus_core::ActorSystem;
use plexus_remote::{Node, NodeConfig};
use plexus_transport::tls::TlsConfig;

fn usage() -> ! {
    eprintln!(
        "usage: plexus-node --listen URI [--listen URI ...] [--cookie SECRET] [--name NAME] \
         [--cert PEM --key PEM --ca PEM]"
    );
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let mut listen = Vec::new();
    let mut cookie = "plexus".to_owned();
    let mut name = "counter".to_owned();
    let (mut cert, mut key, mut ca) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--listen" => listen.push(value()),
            "--cookie" => cookie = value(),
            "--name" => name = value(),
            "--cert" => cert = Some(value()),
            "--key" => key = Some(value()),
            "--ca" => ca = Some(value()),
            _ => usage(),
        }
    }
    if listen.is_empty() {
        usage();
    }
    let mut config = NodeConfig::default().cookie(cookie);
    match (cert, key, ca) {
        (Some(cert), Some(key), Some(ca)) => match TlsConfig::from_pem_files(cert, key, ca) {
            Ok(tls) => config = config.tls(tls),
            Err(e) => {
                eprintln!("plexus-node: {e}");
                std::process::exit(1);
            }
        },
        (None, None, None) => {}
        _ => usage(),
    }
    let system = ActorSystem::new();
    let node = match Node::start(&system, config) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("plexus-node: {e}");
            std::process::exit(1);
        }
    };
    for uri in &listen {
        match node.listen(uri).await {
            Ok(bound) => println!("LISTENING {bound}"),
            Err(e) => {
                eprintln!("plexus-node: {e}");
                std::process::exit(1);
            }
        }
    }
    let counter = system.spawn(service::CounterActor::default());
    if let Err(e) = node.publish(&counter, &name) {
        eprintln!("plexus-node: {e}");
        std::process::exit(1);
    }
    println!("NODE {}", node.id());
    // Serve until killed.
    std::future::pending::<()>().await;
}
