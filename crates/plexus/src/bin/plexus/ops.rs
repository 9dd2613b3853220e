//! The operator's subcommands: calls to a running node's management
//! endpoint (`plexus members`, `plexus leave`, `plexus down`, `plexus data
//! get|incr|add`). The endpoint is `--management URL` (or
//! `PLEXUS_MANAGEMENT_URL`, default `http://127.0.0.1:8558`); the token of
//! state-changing calls comes from `PLEXUS_MANAGEMENT__TOKEN` (the variable
//! the member reads) or `--token-file`, never from the command line.
//!
//! Exit codes: 0 done, 1 refused or failed (the endpoint's reason on
//! stderr), 2 the endpoint could not be reached or answered nonsense.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Where the endpoint is and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct Endpoint {
    /// The management endpoint of a running member.
    #[arg(
        long = "management",
        value_name = "URL",
        env = "PLEXUS_MANAGEMENT_URL",
        default_value = "http://127.0.0.1:8558"
    )]
    url: String,
    /// A file holding the management token (default: the variable
    /// PLEXUS_MANAGEMENT__TOKEN).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

/// `plexus data` calls.
#[derive(Debug, clap::Subcommand)]
pub enum DataCall {
    /// Reads a counter (at majority) and prints its value.
    Get {
        /// The key.
        key: String,
        /// The key's type: gcounter or pncounter.
        #[arg(long = "type", default_value = "gcounter")]
        kind: String,
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Adds 1 to a counter (written at majority).
    Incr {
        /// The key.
        key: String,
        /// The key's type: gcounter or pncounter.
        #[arg(long = "type", default_value = "gcounter")]
        kind: String,
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Adds VALUE to a counter (negative only for a pncounter).
    Add {
        /// The key.
        key: String,
        /// The amount.
        #[arg(allow_negative_numbers = true)]
        value: i64,
        /// The key's type: gcounter or pncounter.
        #[arg(long = "type", default_value = "gcounter")]
        kind: String,
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

/// `plexus members`.
#[derive(Debug, clap::Args)]
pub struct MembersArgs {
    /// Print the endpoint's JSON as it is.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

/// `plexus leave` and `plexus down`.
#[derive(Debug, clap::Args)]
pub struct MemberCall {
    /// The member's address, as `plexus members` lists it
    /// (`tcp://10.0.0.7:4000`).
    address: String,
    #[command(flatten)]
    endpoint: Endpoint,
}

/// Why a call did not get an answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("management URL `{0}`: expected http://HOST:PORT")]
    Url(String),
    #[error("{url}: {source}")]
    Io { url: String, source: std::io::Error },
    #[error("{url}: the answer is not HTTP")]
    NotHttp { url: String },
    #[error("token file {}: {source}", file.display())]
    Token {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// An endpoint's answer.
pub(crate) struct Answer {
    /// The HTTP status.
    pub(crate) status: u16,
    /// The body, as text.
    pub(crate) body: String,
}

impl Endpoint {
    fn token(&self) -> Result<Option<String>, CallError> {
        match &self.token_file {
            Some(file) => std::fs::read_to_string(file)
                .map(|t| Some(t.trim().to_owned()))
                .map_err(|source| CallError::Token {
                    file: file.clone(),
                    source,
                }),
            None => Ok(std::env::var("PLEXUS_MANAGEMENT__TOKEN")
                .ok()
                .filter(|t| !t.is_empty())),
        }
    }

    /// The endpoint's URL, as given.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// One HTTP/1.1 request on a connection of its own.
    pub(crate) fn call(&self, method: &str, path: &str, body: &str) -> Result<Answer, CallError> {
        let io = |source| CallError::Io {
            url: self.url.clone(),
            source,
        };
        let authority = self
            .url
            .strip_prefix("http://")
            .map(|rest| rest.trim_end_matches('/'))
            .filter(|a| !a.is_empty() && !a.contains('/'))
            .ok_or_else(|| CallError::Url(self.url.clone()))?;
        let addr = authority
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| CallError::Url(self.url.clone()))?;
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(io)?;
        // A data call waits for a majority (5 s at most on the member).
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .map_err(io)?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(token) = self.token()? {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).map_err(io)?;
        stream.write_all(body.as_bytes()).map_err(io)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(io)?;
        let text = String::from_utf8_lossy(&raw);
        let not_http = || CallError::NotHttp {
            url: self.url.clone(),
        };
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(not_http)?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(not_http)?;
        Ok(Answer {
            status,
            body: body.to_owned(),
        })
    }
}

/// Prints a state-changing call's answer; the exit code it means.
fn done(what: &str, answer: Result<Answer, CallError>) -> ExitCode {
    match answer {
        Ok(a) if (200..300).contains(&a.status) => {
            print!("{}", a.body);
            ExitCode::SUCCESS
        }
        Ok(a) => {
            eprint!("plexus {what}: refused ({}): {}", a.status, a.body);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("plexus {what}: {e}");
            ExitCode::from(2)
        }
    }
}

/// `plexus members`: the members as the endpoint's member sees them.
pub fn members(args: MembersArgs) -> ExitCode {
    let answer = match args.endpoint.call("GET", "/cluster/members", "") {
        Ok(a) if a.status == 200 => a,
        other => return done("members", other),
    };
    if args.json {
        println!("{}", answer.body.trim_end());
        return ExitCode::SUCCESS;
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&answer.body) else {
        eprintln!("plexus members: the answer is not the members' JSON");
        return ExitCode::from(2);
    };
    println!(
        "{:<40} {:<8} {:>20} {:>4}",
        "ADDRESS", "STATE", "INCARNATION", "UP#"
    );
    for m in v["members"].as_array().into_iter().flatten() {
        let this = if m["address"] == v["this"] { " *" } else { "" };
        println!(
            "{:<40} {:<8} {:>20} {:>4}{this}",
            m["address"].as_str().unwrap_or("?"),
            m["state"].as_str().unwrap_or("?"),
            m["incarnation"].to_string(),
            m["up_number"].to_string(),
        );
    }
    ExitCode::SUCCESS
}

/// `plexus leave` (`down == false`) or `plexus down`.
pub fn change_member(args: MemberCall, down: bool) -> ExitCode {
    let (what, operation) = if down {
        ("down", "down")
    } else {
        ("leave", "leave")
    };
    let path = format!("/cluster/members/{}", args.address);
    done(
        what,
        args.endpoint
            .call("PUT", &path, &format!("operation={operation}")),
    )
}

/// `plexus data get|incr|add`.
pub fn data(call: DataCall) -> ExitCode {
    match call {
        DataCall::Get {
            key,
            kind,
            endpoint,
        } => {
            let answer = match endpoint.call("GET", &format!("/data/{key}?type={kind}"), "") {
                Ok(a) if a.status == 200 => a,
                other => return done("data get", other),
            };
            match serde_json::from_str::<serde_json::Value>(&answer.body) {
                Ok(v) => {
                    println!("{}", v["value"]);
                    ExitCode::SUCCESS
                }
                Err(_) => {
                    eprintln!("plexus data get: the answer is not a value");
                    ExitCode::from(2)
                }
            }
        }
        DataCall::Incr {
            key,
            kind,
            endpoint,
        } => done(
            "data incr",
            endpoint.call("POST", &format!("/data/{key}?type={kind}"), "add=1"),
        ),
        DataCall::Add {
            key,
            value,
            kind,
            endpoint,
        } => done(
            "data add",
            endpoint.call(
                "POST",
                &format!("/data/{key}?type={kind}"),
                &format!("add={value}"),
            ),
        ),
    }
}

/// `plexus config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCall {
    /// Prints the reference configuration: every key, its default and
    /// its meaning.
    Defaults,
    /// Loads the files and environment as a role would, and prints the
    /// result (secrets masked), or why it is refused (exit 2).
    Check {
        /// A configuration file (repeatable).
        #[arg(long = "config", value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// `plexus config defaults|check`.
pub fn config(call: ConfigCall) -> ExitCode {
    match call {
        ConfigCall::Defaults => {
            print!("{}", plexus::config::REFERENCE);
            ExitCode::SUCCESS
        }
        ConfigCall::Check { files } => {
            match plexus::config::Config::load(&files).and_then(|c| c.finish()) {
                Ok(mut c) => {
                    c.node.cookie = "(set)".to_owned();
                    if c.management.token.is_some() {
                        c.management.token = Some("(set)".to_owned());
                    }
                    print!("{}", c.to_toml());
                    ExitCode::SUCCESS
                }
                Err(e) => crate::settings::refused("config check", &e),
            }
        }
    }
}
