//! `plexus-certs`: a development CA for the `tls` transport.
//!
//! ```text
//! plexus-certs ca --out DIR
//!     DIR/ca.pem, DIR/ca.key: a self-signed CA ("Plexus dev CA").
//! plexus-certs node --ca DIR --name NAME --out DIR [--days N]
//!     DIR/NAME.pem, DIR/NAME.key: a certificate signed by the CA in --ca,
//!     valid for DNS NAME, DNS localhost and IP 127.0.0.1, for both server
//!     and client authentication, for N days (default 365). Prints the
//!     part of the node id the certificate certifies (its first 12 hex
//!     digits, derived from its public key; the last 4 are the node's
//!     incarnation, new at every start).
//! ```
//!
//! For development and tests only: keys are written unencrypted.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plexus_remote::dev_certs::DevCa;

const USAGE: &str = "usage:
  plexus-certs ca --out DIR
  plexus-certs node --ca DIR --name NAME --out DIR [--days N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plexus-certs: {e}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let (command, rest) = args.split_first().ok_or("missing command")?;
    let flag = |name: &str| -> Option<&str> {
        rest.iter()
            .position(|a| a == name)
            .and_then(|i| rest.get(i + 1))
            .map(String::as_str)
    };
    let required = |name: &str| flag(name).ok_or_else(|| format!("missing {name}"));
    match command.as_str() {
        "ca" => {
            let out = PathBuf::from(required("--out")?);
            let ca = DevCa::generate().map_err(|e| e.to_string())?;
            write(&out, "ca.pem", &ca.cert_pem())?;
            write(&out, "ca.key", &ca.key_pem())?;
            println!(
                "wrote {} and {}",
                out.join("ca.pem").display(),
                out.join("ca.key").display()
            );
            Ok(())
        }
        "node" => {
            let ca_dir = PathBuf::from(required("--ca")?);
            let name = required("--name")?;
            let out = PathBuf::from(required("--out")?);
            let days: i64 = match flag("--days") {
                Some(d) => d.parse().map_err(|_| format!("--days {d}: not a number"))?,
                None => 365,
            };
            let ca_key_path = ca_dir.join("ca.key");
            let ca_key_pem = std::fs::read_to_string(&ca_key_path)
                .map_err(|e| format!("read {}: {e}", ca_key_path.display()))?;
            let ca = DevCa::from_key_pem(&ca_key_pem)
                .map_err(|e| format!("{}: {e}", ca_key_path.display()))?;
            let node = ca.node(name, days).map_err(|e| e.to_string())?;
            write(&out, &format!("{name}.pem"), &node.cert_pem)?;
            write(&out, &format!("{name}.key"), &node.key_pem)?;
            let id = node.node_id().map_err(|e| e.to_string())?;
            println!(
                "wrote {} and {} (valid {days} days, node ids {}xxxx: \
                 the last 4 hex digits change at every start)",
                out.join(format!("{name}.pem")).display(),
                out.join(format!("{name}.key")).display(),
                &format!("{id:016x}")[..12]
            );
            Ok(())
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

fn write(dir: &Path, file: &str, contents: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
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
        .map_err(|e| format!("write {}: {e}", path.display()))
}
