//! The side processes of the benchmarks that run one node per network
//! namespace (W3, W4, the lossy stream through the link emulator): a
//! child running this binary in a role, its stdout read line by line on a
//! thread, killed when dropped; and the run's development CA, whose
//! certificates name the namespaces' addresses.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use plexus_linkem::{Link, Side};

/// A side process (in a namespace, or on this host without one); killed
/// when dropped.
pub(crate) struct SideProc {
    side: Side,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl SideProc {
    pub(crate) fn start(
        link: Option<&Link>,
        side: Side,
        exe: &str,
        args: &[String],
    ) -> Result<SideProc, String> {
        let mut cmd = match link {
            Some(l) => l.command(side, exe, args),
            None => {
                let mut c = Command::new(exe);
                c.args(args);
                c
            }
        };
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting side {}: {e}", side.letter()))?;
        let stdout = child.stdout.take().ok_or("side stdout not piped")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(SideProc { side, child, lines })
    }

    /// The next line, or `None` at `until`.
    pub(crate) fn next_line(&mut self, until: Instant) -> Result<Option<String>, String> {
        let left = until.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => Ok(Some(line)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string());
                Err(format!(
                    "side {} exited ({})",
                    self.side.letter(),
                    status.unwrap_or_else(|e| e.to_string())
                ))
            }
        }
    }

    /// Waits for a line starting with `prefix` and returns the rest.
    pub(crate) fn expect(&mut self, prefix: &str, deadline: Instant) -> Result<String, String> {
        loop {
            match self.next_line(deadline) {
                Ok(Some(line)) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Ok(None) => {
                    return Err(format!(
                        "side {} printed no `{}` line before the timeout",
                        self.side.letter(),
                        prefix.trim()
                    ))
                }
                Err(e) => return Err(format!("{e} before its `{}` line", prefix.trim())),
            }
        }
    }
}

impl Drop for SideProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the run's CA key lives, for the side processes: the variable
/// `nodes` reads, so its certificates come from the same CA.
use crate::nodes::CERTS_ENV as RUN_CA_ENV;

/// The run's development CA in a temporary directory, handed to the side
/// processes through the environment; removed when dropped.
pub(crate) struct Certs(std::path::PathBuf);

impl Certs {
    /// Makes the CA (`tag` names the directory).
    pub(crate) fn make(tag: &str) -> Result<Certs, String> {
        let dir = std::env::temp_dir().join(format!("plexus-bench-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let ca = plexus::dev_certs::DevCa::generate().map_err(|e| format!("a dev CA: {e}"))?;
        std::fs::write(dir.join("ca.key"), ca.key_pem())
            .map_err(|e| format!("writing the CA key: {e}"))?;
        // Set before any child starts; this process has no other threads
        // reading the environment.
        std::env::set_var(RUN_CA_ENV, &dir);
        Ok(Certs(dir))
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cfg` with a certificate from the run's CA for `host` (an IP address
/// becomes an IP subject name: QUIC checks the dialled address against
/// it). In a side process; exits with a message if the CA is missing.
pub(crate) fn certified(cfg: plexus::NodeConfig, host: &str) -> plexus::NodeConfig {
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("side: {what}: {e}");
        std::process::exit(1);
    };
    let dir = std::env::var_os(RUN_CA_ENV).unwrap_or_else(|| fail(RUN_CA_ENV, &"not set"));
    let path = std::path::Path::new(&dir).join("ca.key");
    let key = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| fail(&format!("reading {}", path.display()), &e));
    let ca =
        plexus::dev_certs::DevCa::from_key_pem(&key).unwrap_or_else(|e| fail("the run's CA", &e));
    let node = ca
        .node(host, 1)
        .unwrap_or_else(|e| fail("a node certificate", &e));
    let tls = node
        .tls_config(&ca)
        .unwrap_or_else(|e| fail("a TLS configuration", &e));
    cfg.tls(tls)
}
