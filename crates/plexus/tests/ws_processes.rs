//! Remote actors over `ws://` and `wss://` between processes: a `plexus
//! node` child and a node in the test, directly and through nginx as a
//! plain HTTP reverse proxy (with the upgrade headers) between them.
#![cfg(feature = "tls")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::service::Counter;
use plexus::dev_certs::DevCa;
use plexus::http::ws_transport::WsTransport;
use plexus::transport::TransportRegistry;
use plexus::{ActorRef, ActorSystem, Node, NodeConfig};

const T: Duration = Duration::from_secs(10);

/// A child process, stopped when dropped: SIGTERM for nginx (its master
/// then stops its workers at once, open connections or not), SIGKILL for
/// the rest.
struct Process(Child, nix::sys::signal::Signal);

impl Drop for Process {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, self.1);
        let _ = self.0.wait();
    }
}

/// `plexus node` with `args`; its listen URIs once it serves.
fn plexus_node(args: &[&str]) -> (Process, Vec<String>) {
    let mut child = common::plexus_with("node", args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start plexus node");
    let stdout = child.stdout.take().expect("piped");
    let mut uris = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read plexus node");
        if let Some(uri) = line.strip_prefix("LISTENING ") {
            uris.push(uri.to_owned());
        }
        if line.starts_with("NODE ") {
            return (Process(child, nix::sys::signal::Signal::SIGKILL), uris);
        }
    }
    let status = child.wait();
    panic!("plexus node {args:?} exited before serving: {status:?}");
}

/// A directory of the test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("plexus-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `ca.pem` and `NAME.pem` / `NAME.key` under `dir`.
fn write_certs(ca: &DevCa, dir: &Path, name: &str) {
    let node = ca.node(name, 1).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.cert_pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), &node.cert_pem).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), &node.key_pem).unwrap();
}

/// The test's node: `ws`, and `wss` with a certificate from `ca`.
fn local_node(ca: Option<&DevCa>) -> (ActorSystem, Node) {
    let mut transports = TransportRegistry::default();
    transports.register(WsTransport::new()).unwrap();
    let mut config = NodeConfig::default().cookie("ws-procs");
    if let Some(ca) = ca {
        let tls = ca.node("local", 1).unwrap().tls_config(ca).unwrap();
        transports
            .register(WsTransport::secure(tls.clone()))
            .unwrap();
        config = config.tls(tls);
    }
    let config = config.transports(transports);
    let mut system = ActorSystem::builder();
    if let Some(id) = config.certified_node_id() {
        system = system.node_id(id);
    }
    let system = system.build().unwrap();
    let node = Node::start(&system, config).unwrap();
    (system, node)
}

/// Adds 1..=100 to the counter at `uri` and checks the total it then has.
async fn add_to(node: &Node, uri: &str, total: u64) {
    let counter: ActorRef<Counter> = node.resolve(uri).await.unwrap();
    for i in 1..=100 {
        counter.tell(Counter::Add(i));
    }
    assert_eq!(counter.ask(Counter::Get, T).await, Ok(total));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_process_serves_over_ws_and_wss() {
    let dir = TempDir::new("ws-procs");
    let ca = DevCa::generate().unwrap();
    write_certs(&ca, &dir.0, "child");
    let path = |f: &str| dir.0.join(f).display().to_string();
    let (_child, uris) = plexus_node(&[
        "--listen",
        "ws://127.0.0.1:0",
        "--listen",
        "wss://127.0.0.1:0",
        "--cookie",
        "ws-procs",
        "--tls-cert",
        &path("child.pem"),
        "--tls-key",
        &path("child.key"),
        "--tls-ca",
        &path("ca.pem"),
    ]);
    assert!(
        uris[0].starts_with("ws://") && uris[1].starts_with("wss://"),
        "{uris:?}"
    );
    let (_system, node) = local_node(Some(&ca));
    // One counter behind both schemes.
    add_to(&node, &format!("{}/counter", uris[0]), 5050).await;
    add_to(&node, &format!("{}/counter", uris[1]), 10100).await;
}

/// nginx in the foreground, proxying `/plexus` (with the WebSocket
/// upgrade headers) from `listener` to `upstream`. nginx takes the socket
/// over (its `NGINX` variable, as in a binary upgrade): it is listening
/// before nginx starts, so connections wait in its queue and nobody waits
/// for nginx to be ready.
fn nginx_proxy(dir: &Path, listener: &std::net::TcpListener, upstream: &str) -> Process {
    use std::os::fd::AsRawFd;
    let port = listener.local_addr().unwrap().port();
    // The socket is passed on to nginx: not closed on exec.
    nix::fcntl::fcntl(
        listener,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let user = if nix_root() { "user root;\n" } else { "" };
    let d = dir.display();
    let conf = format!(
        "{user}daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 server {{\n    listen 127.0.0.1:{port};\n\
         \x20   location /plexus {{\n      proxy_pass http://{upstream};\n      proxy_http_version 1.1;\n\
         \x20     proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection \"upgrade\";\n\
         \x20     proxy_read_timeout 1h;\n    }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let nginx = ["/usr/sbin/nginx", "nginx"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("nginx");
    let child = Command::new(nginx)
        .env("NGINX", format!("{};", listener.as_raw_fd()))
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-p")
        .arg(dir)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nginx (apt-get install nginx)");
    Process(child, nix::sys::signal::Signal::SIGTERM)
}

fn nix_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx"]
async fn nodes_talk_through_nginx_as_a_reverse_proxy() {
    let dir = TempDir::new("ws-nginx");
    let (_child, uris) = plexus_node(&["--listen", "ws://127.0.0.1:0", "--cookie", "ws-procs"]);
    let upstream = uris[0].strip_prefix("ws://").unwrap().to_owned();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxied = format!("ws://{}", listener.local_addr().unwrap());
    let _nginx = nginx_proxy(&dir.0, &listener, &upstream);
    let (_system, node) = local_node(None);
    add_to(&node, &format!("{proxied}/counter"), 5050).await;
}
