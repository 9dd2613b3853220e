//! `plexus certs`: a development CA for the `tls` transport.
//!
//! ```text
//! plexus certs ca --out DIR
//!     DIR/ca.pem, DIR/ca.key: a self-signed CA ("Plexus dev CA").
//! plexus certs node --ca DIR --name NAME --out DIR [--days N] [--dns NAME ...] [--ip ADDR ...]
//!     DIR/NAME.pem, DIR/NAME.key: a certificate signed by the CA in --ca,
//!     valid for DNS NAME, DNS localhost, IP 127.0.0.1 and every --dns and
//!     --ip (a pod's DNS name and address), for both server and client
//!     authentication, for N days (default 365). Prints the part of the
//!     node id the certificate certifies (its first 12 hex digits, derived
//!     from its public key; the last 4 are the node's incarnation, new at
//!     every start).
//! ```
//!
//! For development, tests and a first deployment: keys are written
//! unencrypted, readable by their owner only.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use plexus_remote::dev_certs::{DevCa, DevCertError, SubjectNames};

/// `plexus certs` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Args {
    /// Writes a new CA: DIR/ca.pem and DIR/ca.key.
    Ca {
        /// The directory to write to (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Writes a node certificate signed by the CA: DIR/NAME.pem and
    /// DIR/NAME.key.
    Node {
        /// The CA's directory (with ca.pem and ca.key).
        #[arg(long, value_name = "DIR")]
        ca: PathBuf,
        /// The node's name (a DNS name; the certificate is valid for it).
        #[arg(long)]
        name: String,
        /// The directory to write to (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 365)]
        days: i64,
        /// Another DNS name it is valid for (repeatable), e.g. a pod's
        /// `plexus-0.plexus.default.svc.cluster.local`.
        #[arg(long = "dns", value_name = "NAME")]
        dns: Vec<String>,
        /// An IP address it is valid for (repeatable).
        #[arg(long = "ip", value_name = "ADDR")]
        ips: Vec<IpAddr>,
    },
}

/// Why a certificate was not written.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A file could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// "read", "write" or "create".
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The CA key or a name was refused, or signing failed.
    #[error("{}: {source}", path.display())]
    Cert {
        /// The CA key file, or the output directory.
        path: PathBuf,
        /// The cause.
        source: DevCertError,
    },
    /// The certificate written certifies no node id.
    #[error("{}: {source}", path.display())]
    Identity {
        /// The certificate.
        path: PathBuf,
        /// The cause.
        source: plexus_remote::identity::IdentityError,
    },
}

/// Runs a `plexus certs` subcommand.
pub fn run(args: Args) -> Result<(), CertsError> {
    match args {
        Args::Ca { out } => {
            let ca = DevCa::generate().map_err(|source| CertsError::Cert {
                path: out.clone(),
                source,
            })?;
            write(&out, "ca.pem", &ca.cert_pem())?;
            write(&out, "ca.key", &ca.key_pem())?;
            println!(
                "wrote {} and {}",
                out.join("ca.pem").display(),
                out.join("ca.key").display()
            );
        }
        Args::Node {
            ca,
            name,
            out,
            days,
            dns,
            ips,
        } => {
            let ca_key_path = ca.join("ca.key");
            let ca_key_pem =
                std::fs::read_to_string(&ca_key_path).map_err(|source| CertsError::Io {
                    what: "read",
                    path: ca_key_path.clone(),
                    source,
                })?;
            let cert_error = |source| CertsError::Cert {
                path: ca_key_path.clone(),
                source,
            };
            let ca = DevCa::from_key_pem(&ca_key_pem).map_err(cert_error)?;
            let node = ca
                .node_for(&name, &SubjectNames { dns, ips }, days)
                .map_err(cert_error)?;
            write(&out, &format!("{name}.pem"), &node.cert_pem)?;
            write(&out, &format!("{name}.key"), &node.key_pem)?;
            let id = node.node_id().map_err(|source| CertsError::Identity {
                path: out.join(format!("{name}.pem")),
                source,
            })?;
            println!(
                "wrote {} and {} (valid {days} days, node ids {}xxxx: \
                 the last 4 hex digits change at every start)",
                out.join(format!("{name}.pem")).display(),
                out.join(format!("{name}.key")).display(),
                &format!("{id:016x}")[..12]
            );
        }
    }
    Ok(())
}

fn write(dir: &Path, file: &str, contents: &str) -> Result<(), CertsError> {
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        what: "create",
        path: dir.to_owned(),
        source,
    })?;
    let path = dir.join(file);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if file.ends_with(".key") {
        // Private keys: readable by their owner only.
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    options
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, contents.as_bytes()))
        .map_err(|source| CertsError::Io {
            what: "write",
            path,
            source,
        })
}
