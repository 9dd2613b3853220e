//! A `plexus node` child process, for the multi-process tests.
#![allow(dead_code)] // each includer uses a different part

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

/// A `plexus node` child; killed (SIGKILL) when dropped.
pub struct NodeProcess {
    child: Child,
    /// The URIs it listens on (`LISTENING` lines).
    pub uris: Vec<String>,
    /// Its node id (`NODE` line), as printed.
    pub node: String,
}

impl NodeProcess {
    /// Starts `plexus node` with `args` and waits until it serves; a
    /// `--cookie X` among them goes in the environment, where a role reads
    /// its cookie from.
    ///
    /// # Panics
    ///
    /// If it exits before printing its `NODE` line.
    pub fn start(args: &[String]) -> Self {
        let mut child = super::plexus_with("node", args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start plexus node");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut uris = Vec::new();
        for line in lines {
            let line = line.expect("read plexus node output");
            if let Some(uri) = line.strip_prefix("LISTENING ") {
                uris.push(uri.to_owned());
            }
            if let Some(node) = line.strip_prefix("NODE ") {
                return Self {
                    child,
                    uris,
                    node: node.to_owned(),
                };
            }
        }
        let status = child.wait();
        panic!("plexus node {args:?} exited before serving: {status:?}");
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
