//! Why a configuration was refused, said so that the user can fix it: the
//! file or environment variable, the key's full path, and the cause (the
//! line and column of a syntax error, the nearest known key of an unknown
//! one, the allowed range of a value out of it).

use std::fmt;
use std::path::PathBuf;

use figment::error::Kind;

/// A configuration that was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A configuration file could not be read.
    #[error("cannot read configuration file {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not valid TOML.
    #[error("{origin}: {message}")]
    Syntax {
        /// The file.
        origin: String,
        /// The parser's message, with the line and column.
        message: String,
    },
    /// A key no section has.
    #[error("{origin}: unknown key `{path}`{}", Suggestion(nearest.as_deref()))]
    UnknownKey {
        /// Where it was given: a file or an environment variable.
        origin: String,
        /// Its full path (`cluster.probe_intervall`).
        path: String,
        /// The nearest known key of its section, if one is near.
        nearest: Option<String>,
    },
    /// A value of the wrong type or out of range.
    #[error("{origin}{}`{path}`: {message}", if origin.is_empty() { "" } else { ": " })]
    Invalid {
        /// Where it was given (empty if after all layers were merged).
        origin: String,
        /// The key's full path.
        path: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A secret's file could not be read.
    #[error("`{key}`: cannot read {}: {source}", file.display())]
    Secret {
        /// The key naming the file.
        key: &'static str,
        /// The file.
        file: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The default cookie on an address other machines can reach.
    #[error(
        "`node.cookie`: the default cookie is refused on {listen} (not a loopback address): \
         anyone who knows it could join; set PLEXUS_NODE__COOKIE or node.cookie_file"
    )]
    DefaultCookie {
        /// The listen URI.
        listen: String,
    },
    /// The TLS files could not be loaded.
    #[error("`node.tls`: {cause}")]
    Tls {
        /// The cause, naming the file.
        cause: String,
    },
}

struct Suggestion<'a>(Option<&'a str>);

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(key) => write!(f, "; did you mean `{key}`?"),
            None => Ok(()),
        }
    }
}

impl ConfigError {
    /// A value refused after the layers were merged (a range check).
    pub fn invalid(path: impl Into<String>, message: impl fmt::Display) -> Self {
        Self::Invalid {
            origin: String::new(),
            path: path.into(),
            message: message.to_string(),
        }
    }

    /// The first of figment's errors, in our terms.
    pub(super) fn from_figment(error: figment::Error) -> Self {
        let error = error.into_iter().next().unwrap_or_else(|| {
            figment::Error::from("the configuration could not be read".to_owned())
        });
        let origin = origin(&error);
        let path = error.path.join(".");
        match &error.kind {
            Kind::UnknownField(field, expected) => {
                // figment's path ends with the unknown key itself.
                let section = match error.path.split_last() {
                    Some((last, section)) if last == field => section,
                    _ => &error.path[..],
                };
                let within = |key: &str| {
                    if section.is_empty() {
                        key.to_owned()
                    } else {
                        format!("{}.{key}", section.join("."))
                    }
                };
                Self::UnknownKey {
                    origin,
                    path: within(field),
                    nearest: nearest(field, expected).map(within),
                }
            }
            // A TOML syntax error comes as a message with no path: the
            // parser's text carries the line and the column.
            Kind::Message(message) if error.path.is_empty() => Self::Syntax {
                origin,
                message: message.clone(),
            },
            kind => Self::Invalid {
                origin,
                path,
                message: kind.to_string(),
            },
        }
    }
}

/// The file or environment variable the error came from.
fn origin(error: &figment::Error) -> String {
    let Some(metadata) = &error.metadata else {
        return "configuration".to_owned();
    };
    match &metadata.source {
        Some(figment::Source::File(file)) => file.display().to_string(),
        _ => {
            if metadata.name.contains("environment") {
                let key = error
                    .path
                    .iter()
                    .map(|k| k.to_uppercase())
                    .collect::<Vec<_>>();
                format!(
                    "environment variable {}{}",
                    super::ENV_PREFIX,
                    key.join("__")
                )
            } else {
                metadata.name.to_string()
            }
        }
    }
}

/// The known key nearest `given`, if it is near enough to be a typo.
fn nearest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(given, k), *k))
        .filter(|(d, k)| *d <= 3.max(k.len() / 3))
        .min()
        .map(|(_, k)| k)
}
