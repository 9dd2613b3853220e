//! What `plexus certs` writes is what a node loads: nodes with its
//! certificates resolve and ask over `tls://`, and a certificate is valid
//! for the addresses `--ip` names and no others (a pod's address).
#![cfg(feature = "tls")]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::certified::certified_node;
use common::service::{Counter, CounterActor};
use plexus_remote::{NodeConfig, ResolveError};
use plexus_transport::tls::TlsConfig;

/// Turns a hang into a failure.
const T: Duration = Duration::from_secs(30);

fn certs(args: &[&str]) {
    let status = Command::new(env!("CARGO_BIN_EXE_plexus"))
        .arg("certs")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("run plexus certs");
    assert!(status.success(), "plexus certs {args:?}: {status}");
}

fn load(dir: &Path, name: &str) -> NodeConfig {
    let tls = TlsConfig::from_pem_files(
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
        dir.join("ca.pem"),
    )
    .expect("load plexus certs output");
    NodeConfig::default().cookie("certs-test").tls(tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_serve_nodes_at_the_addresses_they_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let out = d.to_str().expect("utf-8 temp path");
    certs(&["ca", "--out", out]);
    certs(&[
        "node", "--ca", out, "--name", "n1", "--out", out, "--days", "2",
    ]);
    certs(&[
        "node",
        "--ca",
        out,
        "--name",
        "n2",
        "--out",
        out,
        "--dns",
        "n2.plexus.test",
        "--ip",
        "127.0.0.2",
    ]);
    let (_a, client) = certified_node(load(d, "n1"));
    // n2 on 127.0.0.2, which its certificate names: resolved and asked.
    let (b, pod) = certified_node(load(d, "n2"));
    let bound = pod.listen("tls://127.0.0.2:0").await.expect("listen");
    pod.publish(&b.spawn(CounterActor(21)), "counter")
        .expect("publish");
    let counter = client
        .resolve::<Counter>(&format!("{bound}/counter"))
        .await
        .expect("resolve the node at the address its certificate names");
    assert_eq!(counter.ask(Counter::Get, T).await, Ok(21));
    // n1 on 127.0.0.2, which its certificate does not name: refused.
    let (c, other) = certified_node(load(d, "n1"));
    let bound = other.listen("tls://127.0.0.2:0").await.expect("listen");
    other
        .publish(&c.spawn(CounterActor(0)), "counter")
        .expect("publish");
    let (_e, client2) = certified_node(load(d, "n2"));
    let refused = client2
        .resolve::<Counter>(&format!("{bound}/counter"))
        .await
        .expect_err("a certificate not valid for the address dialled");
    assert!(matches!(refused, ResolveError::Link { .. }), "{refused:?}");
    assert!(
        refused
            .to_string()
            .contains("not valid for name \"127.0.0.2\""),
        "{refused}"
    );
}
