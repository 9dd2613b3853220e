//! [`Link`]: two network namespaces joined through TUN devices, and
//! everything needed to remove them again.
//!
//! Setup, in order (each step recorded, so that a failure at any point
//! removes exactly what was made so far and nothing else):
//! 1. check privileges, `ip`, `/dev/net/tun`, and that no namespace or
//!    interface named `<prefix>-a` / `<prefix>-b` exists (someone else's is
//!    never touched);
//! 2. write `/run/plexus-linkem/<prefix>.pid` (used by `exec` and `cleanup`);
//! 3. `ip netns add <prefix>-a`, `<prefix>-b`;
//! 4. open a TUN device per side in the root namespace, move it into its
//!    namespace, give it 198.51.100.1/24 (a) or .2/24 (b) and bring it up;
//! 5. start the [`Forwarder`].
//!
//! Teardown (on [`Link::shutdown`] or drop, so also on error and panic):
//! stop the forwarder and close the TUNs, delete the namespaces, remove the
//! pid file.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::config::LinkConfig;
use crate::forward::{Forwarder, ForwarderStopped};
use crate::model::LinkStats;

/// Where the pid files of running links live.
pub const STATE_DIR: &str = "/run/plexus-linkem";

/// One end of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Side a: 198.51.100.1, namespace `<prefix>-a`.
    A,
    /// Side b: 198.51.100.2, namespace `<prefix>-b`.
    B,
}

impl Side {
    /// The side's address (RFC 5737 documentation range).
    pub fn address(self) -> Ipv4Addr {
        match self {
            Side::A => Ipv4Addr::new(198, 51, 100, 1),
            Side::B => Ipv4Addr::new(198, 51, 100, 2),
        }
    }

    /// `"a"` or `"b"`.
    pub fn letter(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }

    /// The other side.
    pub fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

impl std::str::FromStr for Side {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "a" | "A" => Ok(Side::A),
            "b" | "B" => Ok(Side::B),
            _ => Err(format!("side {s:?}: expected `a` or `b`")),
        }
    }
}

/// Why a link could not be set up, found, or removed. Whatever the setup
/// had made before the error has been removed when this is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The process lacks capabilities.
    #[error(
        "plexus-linkem needs {missing} to create network namespaces and TUN devices: run it as root (e.g. `sudo plexus-linkem ...`); nothing was created"
    )]
    MissingPrivilege {
        /// The missing capability names.
        missing: String,
    },
    /// A tool or device the setup needs is not there.
    #[error("{what} is missing ({hint}); nothing was created")]
    Missing {
        /// What is missing.
        what: &'static str,
        /// How to get it.
        hint: &'static str,
    },
    /// The prefix cannot name namespaces and interfaces.
    #[error(
        "prefix {0:?}: use 1 to 12 characters from a-z, 0-9 and _, starting with a letter (interface names are at most 15 characters)"
    )]
    InvalidPrefix(String),
    /// A namespace or interface of the same name exists already.
    #[error(
        "{kind} `{name}` already exists; it is left untouched. Pick another --prefix, or if it is a leftover of plexus-linkem, remove it with `plexus-linkem cleanup --prefix {prefix}`"
    )]
    AlreadyExists {
        /// "network namespace" or "interface".
        kind: &'static str,
        /// Its name.
        name: String,
        /// The prefix asked for.
        prefix: String,
    },
    /// A link with this prefix is running in another process.
    #[error("a link with prefix `{prefix}` is running (pid {pid}); stop it (Ctrl-C or kill {pid}) first")]
    Running {
        /// The prefix.
        prefix: String,
        /// Its process.
        pid: u32,
    },
    /// No running link has this prefix.
    #[error(
        "no link with prefix `{0}` is running: start one first, e.g. `plexus-linkem run --prefix {0} &`"
    )]
    NotRunning(String),
    /// An `ip` command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Another I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SetupError {
    let what = what.into();
    move |source| SetupError::Io { what, source }
}

/// Checks CAP_NET_ADMIN and CAP_SYS_ADMIN (namespaces are bind mounts).
///
/// # Errors
/// [`SetupError::MissingPrivilege`] naming what is missing.
pub fn check_privileges() -> Result<(), SetupError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(io_err("reading /proc/self/status"))?;
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let missing = missing_capabilities(eff);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(SetupError::MissingPrivilege {
            missing: missing.join(" and "),
        })
    }
}

/// The capabilities the link needs that the effective set `cap_eff` lacks.
pub fn missing_capabilities(cap_eff: u64) -> Vec<&'static str> {
    const NET_ADMIN: u64 = 1 << 12;
    const SYS_ADMIN: u64 = 1 << 21;
    let mut missing = Vec::new();
    if cap_eff & NET_ADMIN == 0 {
        missing.push("CAP_NET_ADMIN");
    }
    if cap_eff & SYS_ADMIN == 0 {
        missing.push("CAP_SYS_ADMIN");
    }
    missing
}

/// Checks that the prefix makes valid, short names.
///
/// # Errors
/// [`SetupError::InvalidPrefix`].
pub fn check_prefix(prefix: &str) -> Result<(), SetupError> {
    let ok = (1..=12).contains(&prefix.len())
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SetupError::InvalidPrefix(prefix.to_owned()))
    }
}

/// Runs `ip ARGS` and returns its output if it succeeded.
fn ip(args: &[&str]) -> Result<Output, SetupError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SetupError::Missing {
                what: "the `ip` command",
                hint: "install iproute2",
            },
            _ => io_err("running `ip`")(e),
        })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(SetupError::Command {
            command: format!("ip {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Names of the network namespaces that exist (`ip netns list`).
///
/// # Errors
/// If `ip` cannot be run.
pub fn namespaces() -> Result<Vec<String>, SetupError> {
    let out = ip(&["netns", "list"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

fn interface_exists(name: &str) -> bool {
    ip(&["link", "show", "dev", name]).is_ok()
}

/// The namespace (and TUN interface) name of a side.
pub fn namespace_name(prefix: &str, side: Side) -> String {
    format!("{prefix}-{}", side.letter())
}

fn pid_file(prefix: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{prefix}.pid"))
}

/// The pid of the process running the link with this prefix, if it lives.
pub fn running_pid(prefix: &str) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file(prefix))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    PathBuf::from(format!("/proc/{pid}"))
        .exists()
        .then_some(pid)
}

/// A command that runs `program args` inside a side of the running link
/// with this prefix (`ip netns exec <prefix>-<side> program args`).
///
/// # Errors
/// [`SetupError::NotRunning`] if no link with this prefix is running.
pub fn side_command(
    prefix: &str,
    side: Side,
    program: &str,
    args: &[String],
) -> Result<Command, SetupError> {
    check_prefix(prefix)?;
    running_pid(prefix).ok_or_else(|| SetupError::NotRunning(prefix.to_owned()))?;
    Ok(netns_exec(&namespace_name(prefix, side), program, args))
}

fn netns_exec(ns: &str, program: &str, args: &[String]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, program]).args(args);
    cmd
}

/// Removes leftovers of links whose process is gone: their namespaces and
/// pid files. Only prefixes that have a pid file are touched. Returns the
/// namespaces removed.
///
/// # Errors
/// [`SetupError::Running`] if the link with `prefix` still runs; `ip` errors.
pub fn cleanup(prefix: Option<&str>) -> Result<Vec<String>, SetupError> {
    check_privileges()?;
    let prefixes: Vec<String> = match prefix {
        Some(p) => {
            check_prefix(p)?;
            vec![p.to_owned()]
        }
        None => std::fs::read_dir(STATE_DIR)
            .map(|dir| {
                dir.filter_map(|e| {
                    e.ok()?
                        .file_name()
                        .to_str()?
                        .strip_suffix(".pid")
                        .map(str::to_owned)
                })
                .collect()
            })
            .unwrap_or_default(),
    };
    let existing = namespaces()?;
    let mut removed = Vec::new();
    for p in prefixes {
        if let Some(pid) = running_pid(&p) {
            if prefix.is_some() {
                return Err(SetupError::Running { prefix: p, pid });
            }
            continue;
        }
        if !pid_file(&p).exists() {
            // Not made by plexus-linkem (or already cleaned): not ours to touch.
            continue;
        }
        for side in [Side::A, Side::B] {
            let ns = namespace_name(&p, side);
            if existing.contains(&ns) {
                ip(&["netns", "del", &ns])?;
                removed.push(ns);
            }
        }
        let _ = std::fs::remove_file(pid_file(&p));
    }
    Ok(removed)
}

/// A running emulated link. Dropping it removes everything it created.
pub struct Link {
    prefix: String,
    created_namespaces: Vec<String>,
    pid_file: Option<PathBuf>,
    forwarder: Option<Forwarder>,
}

impl Link {
    /// Sets up the namespaces, the TUN devices and the forwarder.
    ///
    /// # Errors
    /// See [`SetupError`]; on error nothing created is left behind.
    pub fn up(prefix: &str, config: LinkConfig) -> Result<Link, SetupError> {
        check_prefix(prefix)?;
        check_privileges()?;
        if !std::path::Path::new("/dev/net/tun").exists() {
            return Err(SetupError::Missing {
                what: "/dev/net/tun",
                hint: "load the tun module with `modprobe tun`",
            });
        }
        if let Some(pid) = running_pid(prefix) {
            return Err(SetupError::Running {
                prefix: prefix.to_owned(),
                pid,
            });
        }
        let existing = namespaces()?;
        for side in [Side::A, Side::B] {
            let name = namespace_name(prefix, side);
            let kind = if existing.contains(&name) {
                "network namespace"
            } else if interface_exists(&name) {
                "interface"
            } else {
                continue;
            };
            return Err(SetupError::AlreadyExists {
                kind,
                name,
                prefix: prefix.to_owned(),
            });
        }
        let mut link = Link {
            prefix: prefix.to_owned(),
            created_namespaces: Vec::new(),
            pid_file: None,
            forwarder: None,
        };
        std::fs::create_dir_all(STATE_DIR).map_err(io_err(format!("creating {STATE_DIR}")))?;
        let file = pid_file(prefix);
        std::fs::write(&file, format!("{}\n", std::process::id()))
            .map_err(io_err(format!("writing {}", file.display())))?;
        link.pid_file = Some(file);
        for side in [Side::A, Side::B] {
            let ns = namespace_name(prefix, side);
            ip(&["netns", "add", &ns]).map_err(|e| match e {
                SetupError::Command { ref stderr, .. } if stderr.contains("exists") => {
                    SetupError::AlreadyExists {
                        kind: "network namespace",
                        name: ns.clone(),
                        prefix: prefix.to_owned(),
                    }
                }
                e => e,
            })?;
            link.created_namespaces.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_err("starting the forwarder runtime"))?;
        let tuns = {
            let _enter = rt.enter();
            let mut tuns = Vec::new();
            for side in [Side::A, Side::B] {
                let name = namespace_name(prefix, side);
                let tun = tokio_tun::Tun::builder()
                    .name(&name)
                    .mtu(1500)
                    .build()
                    .map_err(|e| SetupError::Io {
                        what: format!("creating TUN device {name}"),
                        source: std::io::Error::other(e.to_string()),
                    })?
                    .pop()
                    .ok_or_else(|| {
                        io_err(format!("creating TUN device {name}"))(std::io::Error::other(
                            "no queue",
                        ))
                    })?;
                tuns.push(tun);
            }
            tuns
        };
        for side in [Side::A, Side::B] {
            let name = namespace_name(prefix, side);
            let addr = format!("{}/24", side.address());
            ip(&["link", "set", "dev", &name, "netns", &name])?;
            // No IPv6 link-local address: keeps router solicitations and
            // DAD packets off the emulated link.
            ip(&[
                "-n",
                &name,
                "link",
                "set",
                "dev",
                &name,
                "addrgenmode",
                "none",
            ])?;
            ip(&["-n", &name, "addr", "add", &addr, "dev", &name])?;
            ip(&["-n", &name, "link", "set", "dev", &name, "up"])?;
        }
        let mut tuns = tuns.into_iter();
        // Two TUNs were pushed above.
        let (tun_a, tun_b) = (tuns.next().expect("tun a"), tuns.next().expect("tun b"));
        link.forwarder = Some(Forwarder::start(rt, tun_a, tun_b, config)?);
        Ok(link)
    }

    /// The prefix of the namespace names.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace of a side.
    pub fn namespace(&self, side: Side) -> String {
        namespace_name(&self.prefix, side)
    }

    /// A command that runs `program args` inside a side.
    pub fn command(&self, side: Side, program: &str, args: &[String]) -> Command {
        netns_exec(&self.namespace(side), program, args)
    }

    /// Changes the link's settings while it runs, e.g. 100 % loss both ways
    /// to cut it and the old settings to heal it. See
    /// [`Forwarder::set_config`].
    ///
    /// # Errors
    /// [`ForwarderStopped`] if the forwarder has ended.
    pub fn set_config(&self, config: LinkConfig) -> Result<(), ForwarderStopped> {
        self.forwarder
            .as_ref()
            .ok_or(ForwarderStopped)?
            .set_config(config)
    }

    /// Resolves when the forwarder stopped on its own (an I/O error on a
    /// TUN device), with the reason. Pending forever otherwise.
    ///
    /// # Cancel safety
    /// Cancel safe: the reason stays until it is read.
    pub async fn failed(&mut self) -> String {
        match self.forwarder.as_mut() {
            Some(f) => f.failed().await,
            None => std::future::pending().await,
        }
    }

    /// Stops the forwarder and removes everything, returning the counters
    /// of the a→b and b→a directions.
    ///
    /// # Errors
    /// The first error of the teardown (every step is still tried).
    pub fn shutdown(mut self) -> Result<[LinkStats; 2], SetupError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<[LinkStats; 2], SetupError> {
        let mut first_err = None;
        let stats = match self.forwarder.take().map(Forwarder::stop) {
            Some(Ok(stats)) => stats,
            Some(Err(e)) => {
                first_err.get_or_insert(io_err("forwarder")(e));
                Default::default()
            }
            None => Default::default(),
        };
        while let Some(ns) = self.created_namespaces.pop() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(file) = self.pid_file.take() {
            if let Err(e) = std::fs::remove_file(&file) {
                first_err.get_or_insert(io_err(format!("removing {}", file.display()))(e));
            }
        }
        first_err.map_or(Ok(stats), Err)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("plexus-linkem: while removing link `{}`: {e}", self.prefix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_capabilities_are_named() {
        assert_eq!(
            missing_capabilities(0),
            vec!["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]
        );
        assert_eq!(missing_capabilities(1 << 12), vec!["CAP_SYS_ADMIN"]);
        assert!(missing_capabilities(u64::MAX).is_empty());
    }

    #[test]
    fn prefixes_that_would_make_bad_names_are_refused() {
        assert!(check_prefix("plx").is_ok());
        assert!(check_prefix("a_1").is_ok());
        for bad in ["", "1ab", "Plx", "a-b", "a/b", "abcdefghijklm", "a b"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
