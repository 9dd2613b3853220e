//! The side processes of the benchmarks that run one node per network
//! namespace (W3, W4, the lossy stream through the link emulator): a
//! child running this binary in a role, its stdout read line by line on a
//! thread, killed when dropped.

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
