//! Actor and node URIs: `scheme://address[/name]`.
//!
//! | scheme | address | example |
//! | --- | --- | --- |
//! | `tcp`, `udp` (and user schemes over them) | `host:port` | `tcp://127.0.0.1:4000/pong` |
//! | `uds` | an absolute socket path | `uds:///tmp/n1.sock/pong` |
//! | `mem` | a name in the process | `mem://n1/pong` |
//!
//! The actor name is the last path segment; for `uds` the socket path is
//! everything before it.

use std::fmt;

/// A parsed `scheme://address[/name]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Uri {
    /// The scheme (`tcp`, `udp`, `uds`, `mem`, or one from configuration).
    pub scheme: String,
    /// The node address: `host:port`, a socket path, or a mem name.
    pub addr: String,
    /// The actor name, if the URI names an actor.
    pub name: Option<String>,
}

/// A URI that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid URI {uri:?}: {why}")]
pub struct UriError {
    /// The text given.
    pub uri: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Uri {
    /// Parses a node URI (`tcp://127.0.0.1:4000`) or actor URI
    /// (`tcp://127.0.0.1:4000/pong`).
    ///
    /// # Errors
    ///
    /// [`UriError`] naming the problem.
    pub fn parse(text: &str) -> Result<Self, UriError> {
        let err = |why| UriError {
            uri: text.to_owned(),
            why,
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| err("expected scheme://address"))?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '+')
        {
            return Err(err("the scheme must be letters, digits, '-', '_' or '+'"));
        }
        let (addr, name) = if scheme == "uds" {
            if !rest.starts_with('/') {
                return Err(err(
                    "uds addresses are absolute socket paths: uds:///path/to.sock",
                ));
            }
            // The name is the last segment unless the whole path is the socket.
            match rest.rsplit_once('/') {
                Some((path, name))
                    if !path.is_empty() && !name.contains('.') && !name.is_empty() =>
                {
                    (path.to_owned(), Some(name.to_owned()))
                }
                _ => (rest.to_owned(), None),
            }
        } else {
            match rest.split_once('/') {
                Some((addr, "")) => (addr.to_owned(), None),
                Some((addr, name)) => (addr.to_owned(), Some(name.to_owned())),
                None => (rest.to_owned(), None),
            }
        };
        if addr.is_empty() {
            return Err(err("the address is empty"));
        }
        if let Some(n) = &name {
            if n.contains('/') || n.len() > crate::wire::MAX_NAME {
                return Err(err(
                    "the actor name must be one path segment of at most 255 bytes",
                ));
            }
        }
        Ok(Self {
            scheme: scheme.to_owned(),
            addr,
            name,
        })
    }

    /// The node part: `scheme://address`.
    pub fn node_uri(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }
}

impl fmt::Display for Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.addr)?;
        if let Some(n) = &self.name {
            write!(f, "/{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_actor_and_node_uris() {
        let u = Uri::parse("tcp://127.0.0.1:4000/pong").unwrap();
        assert_eq!(
            (u.scheme.as_str(), u.addr.as_str()),
            ("tcp", "127.0.0.1:4000")
        );
        assert_eq!(u.name.as_deref(), Some("pong"));
        assert_eq!(Uri::parse("udp://0.0.0.0:4001").unwrap().name, None);
        let u = Uri::parse("uds:///tmp/n1.sock/pong").unwrap();
        assert_eq!(
            (u.addr.as_str(), u.name.as_deref()),
            ("/tmp/n1.sock", Some("pong"))
        );
        assert_eq!(Uri::parse("uds:///tmp/n1.sock").unwrap().name, None);
        assert_eq!(Uri::parse("mem://n1/pong").unwrap().addr, "n1");
        assert_eq!(
            Uri::parse("rudp-fast://h:1/x").unwrap().to_string(),
            "rudp-fast://h:1/x"
        );
    }

    #[test]
    fn refuses_malformed_uris_with_a_reason() {
        for bad in [
            "pong",
            "://x",
            "tcp://",
            "tcp:///pong",
            "uds://relative.sock",
            "tcp://h:1/a/b",
        ] {
            let e = Uri::parse(bad).unwrap_err();
            assert!(!e.why.is_empty(), "{bad}");
        }
    }
}
