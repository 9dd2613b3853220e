//! [`StackSpec`]: a parsed, validated stack description such as
//! `udp / slicing(mtu=1200) / delivery / ordering`, which builds one
//! [`Stack`] per link.
//!
//! # Grammar
//!
//! ```text
//! spec      := transport { "/" layer }        layers listed bottom to top
//! transport := "tcp" | "uds" | "tls"          byte streams
//!            | "udp" | "mem" | "quic"         messages (datagrams)
//! layer     := name [ "(" options ")" ]       see crate::options for options
//! ```
//!
//! A spec is valid when every layer's needs match what the one below offers
//! and the top offers messages: stream transports need `framing` (or another
//! stream-to-message layer) first; message layers such as `slicing` cannot sit
//! directly on a byte stream, and `framing` cannot sit on datagrams.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::layer::{DataUnit, Interface, LinkContext};
use crate::options::{LayerOptions, OptionError};
use crate::registry::{LayerFactory, LayerRegistry};
use crate::stack::Stack;

/// The transport a stack sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// TCP: byte stream.
    Tcp,
    /// Unix domain stream socket: byte stream.
    Uds,
    /// TLS over TCP: byte stream.
    Tls,
    /// UDP: unreliable datagrams of at most 65 507 bytes.
    Udp,
    /// In-memory datagrams (tests, link emulator): messages of any size.
    Mem,
    /// QUIC: message-oriented.
    Quic,
}

impl TransportKind {
    /// Every transport kind.
    pub const ALL: [TransportKind; 6] = [
        TransportKind::Tcp,
        TransportKind::Uds,
        TransportKind::Tls,
        TransportKind::Udp,
        TransportKind::Mem,
        TransportKind::Quic,
    ];

    /// The spec name.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Uds => "uds",
            TransportKind::Tls => "tls",
            TransportKind::Udp => "udp",
            TransportKind::Mem => "mem",
            TransportKind::Quic => "quic",
        }
    }

    /// What the transport offers the first layer.
    pub fn unit(self) -> DataUnit {
        match self {
            TransportKind::Tcp | TransportKind::Uds | TransportKind::Tls => DataUnit::ByteStream,
            TransportKind::Udp | TransportKind::Mem | TransportKind::Quic => DataUnit::Message,
        }
    }

    /// The largest datagram the transport carries, if bounded.
    pub fn max_datagram(self) -> Option<usize> {
        match self {
            TransportKind::Udp => Some(65_507),
            _ => None,
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a spec was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec is empty.
    #[error("empty stack spec")]
    Empty,
    /// The text does not follow the grammar.
    #[error("syntax error at byte {position}: {reason}")]
    Syntax {
        /// Byte offset in the spec.
        position: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// The first token is not a transport kind.
    #[error("unknown transport `{name}` (expected tcp, uds, tls, udp, mem or quic)")]
    UnknownTransport {
        /// The name as written.
        name: String,
    },
    /// No layer of this name is registered.
    #[error("unknown layer `{name}`")]
    UnknownLayer {
        /// The name as written.
        name: String,
    },
    /// A layer's options were rejected.
    #[error("layer `{layer}`: {source}")]
    Option {
        /// The layer.
        layer: String,
        /// The problem.
        #[source]
        source: OptionError,
    },
    /// A layer needs a different unit from what the one below offers.
    #[error("layer `{layer}` needs {needs} but `{below}` below it offers {offers}")]
    Mismatch {
        /// The layer.
        layer: String,
        /// What it needs.
        needs: DataUnit,
        /// The layer or transport below.
        below: String,
        /// What that offers.
        offers: DataUnit,
    },
    /// The top of the stack is a byte stream; the application needs messages.
    #[error("the top of the stack (`{top}`) offers a byte stream; add `framing`")]
    TopNotMessage {
        /// The top layer or transport.
        top: String,
    },
}

#[derive(Clone)]
pub(crate) struct LayerSpec {
    pub(crate) name: String,
    pub(crate) options: LayerOptions,
    pub(crate) factory: LayerFactory,
}

impl fmt::Debug for LayerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LayerSpec")
            .field("name", &self.name)
            .field("options", &self.options)
            .finish()
    }
}

/// A parsed and validated stack description. Cheap to clone; builds any
/// number of independent [`Stack`] instances (one per peer link).
#[derive(Debug, Clone)]
pub struct StackSpec {
    transport: TransportKind,
    layers: Arc<[LayerSpec]>,
}

impl StackSpec {
    /// Parses and validates `text` against the layers in `registry`.
    ///
    /// # Errors
    ///
    /// A [`SpecError`] naming the offending token.
    pub fn parse(text: &str, registry: &LayerRegistry) -> Result<Self, SpecError> {
        if text.trim().is_empty() {
            return Err(SpecError::Empty);
        }
        let mut tokens = split_tokens(text)?.into_iter();
        // split_tokens returns at least one token for a non-empty text.
        let (pos, first) = tokens.next().ok_or(SpecError::Empty)?;
        let (tname, topts) = parse_token(pos, first)?;
        let transport = TransportKind::ALL
            .into_iter()
            .find(|t| t.name() == tname)
            .ok_or_else(|| SpecError::UnknownTransport {
                name: tname.to_owned(),
            })?;
        if !topts.is_empty() {
            return Err(SpecError::Syntax {
                position: pos,
                reason: "transports take no options",
            });
        }
        let mut below = (transport.name().to_owned(), transport.unit());
        let mut layers = Vec::new();
        for (pos, token) in tokens {
            let (name, options) = parse_token(pos, token)?;
            let constructor = registry.get(name).ok_or_else(|| SpecError::UnknownLayer {
                name: name.to_owned(),
            })?;
            let Interface { needs, offers } = constructor.interface();
            if needs != below.1 {
                return Err(SpecError::Mismatch {
                    layer: name.to_owned(),
                    needs,
                    below: below.0,
                    offers: below.1,
                });
            }
            let factory = constructor
                .configure(&options)
                .map_err(|source| SpecError::Option {
                    layer: name.to_owned(),
                    source,
                })?;
            layers.push(LayerSpec {
                name: name.to_owned(),
                options,
                factory,
            });
            below = (name.to_owned(), offers);
        }
        if below.1 != DataUnit::Message {
            return Err(SpecError::TopNotMessage { top: below.0 });
        }
        Ok(Self {
            transport,
            layers: layers.into(),
        })
    }

    /// The transport kind.
    pub fn transport(&self) -> TransportKind {
        self.transport
    }

    /// Layer names, bottom to top.
    pub fn layer_names(&self) -> impl Iterator<Item = &str> {
        self.layers.iter().map(|l| l.name.as_str())
    }

    /// Builds a stack instance for link 0 created at `now`.
    pub fn build(&self, now: Instant) -> Stack {
        self.build_link(LinkContext { now, link_id: 0 })
    }

    /// Builds a stack instance for the link described by `link`.
    pub fn build_link(&self, link: LinkContext) -> Stack {
        let layers = self.layers.iter().map(|l| (l.factory)(&link)).collect();
        Stack::new(self.transport, layers)
    }
}

impl fmt::Display for StackSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.transport.name())?;
        for layer in self.layers.iter() {
            write!(f, " / {}", layer.name)?;
            if !layer.options.is_empty() {
                f.write_str("(")?;
                for (i, o) in layer.options.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}={}", o.key(), o.value())?;
                }
                f.write_str(")")?;
            }
        }
        Ok(())
    }
}

impl FromStr for StackSpec {
    type Err = SpecError;

    /// Parses against the built-in layers ([`LayerRegistry::default`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        static REGISTRY: OnceLock<LayerRegistry> = OnceLock::new();
        Self::parse(s, REGISTRY.get_or_init(LayerRegistry::default))
    }
}

/// Splits at `/` outside parentheses, returning (offset, trimmed token).
fn split_tokens(text: &str) -> Result<Vec<(usize, &str)>, SpecError> {
    let mut tokens = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1).ok_or(SpecError::Syntax {
                    position: i,
                    reason: "unbalanced `)`",
                })?
            }
            '/' if depth > 0 => {
                return Err(SpecError::Syntax {
                    position: i,
                    reason: "`/` inside layer options",
                })
            }
            '/' => {
                tokens.push(trimmed(text, start, i)?);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(SpecError::Syntax {
            position: text.len(),
            reason: "unclosed `(`",
        });
    }
    tokens.push(trimmed(text, start, text.len())?);
    Ok(tokens)
}

fn trimmed(text: &str, start: usize, end: usize) -> Result<(usize, &str), SpecError> {
    let raw = &text[start..end];
    let lead = raw.len() - raw.trim_start().len();
    let token = raw.trim();
    if token.is_empty() {
        return Err(SpecError::Syntax {
            position: start,
            reason: "empty layer name",
        });
    }
    Ok((start + lead, token))
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses `name` or `name(k=v, ...)`.
fn parse_token(pos: usize, token: &str) -> Result<(&str, LayerOptions), SpecError> {
    let mut options = LayerOptions::new();
    let (name, rest) = match token.find('(') {
        None => (token, None),
        Some(i) => (token[..i].trim_end(), Some((i, &token[i + 1..]))),
    };
    if !is_ident(name) {
        return Err(SpecError::Syntax {
            position: pos,
            reason: "names are made of letters, digits, `_` and `-`",
        });
    }
    if let Some((open, rest)) = rest {
        let inner = rest.strip_suffix(')').ok_or(SpecError::Syntax {
            position: pos + token.len(),
            reason: "text after `)`",
        })?;
        if inner.contains('(') || inner.contains(')') {
            return Err(SpecError::Syntax {
                position: pos + open,
                reason: "nested parentheses",
            });
        }
        if !inner.trim().is_empty() {
            for item in inner.split(',') {
                let (key, value) = item.split_once('=').ok_or(SpecError::Syntax {
                    position: pos + open,
                    reason: "options are written key=value",
                })?;
                let (key, value) = (key.trim(), value.trim());
                if !is_ident(key) || value.is_empty() {
                    return Err(SpecError::Syntax {
                        position: pos + open,
                        reason: "options are written key=value",
                    });
                }
                options.push(key, value);
            }
        }
    }
    Ok((name, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<StackSpec, SpecError> {
        s.parse()
    }

    #[test]
    fn valid_specs_parse_bottom_to_top() {
        let spec = parse("udp / slicing / delivery / ordering").expect("valid");
        assert_eq!(spec.transport(), TransportKind::Udp);
        assert_eq!(
            spec.layer_names().collect::<Vec<_>>(),
            ["slicing", "delivery", "ordering"]
        );
        assert!(parse("tcp/framing").is_ok());
        assert!(parse("udp").is_ok());
        assert!(parse(" mem / delivery(max_retries=8) / ordering(mode=lossy) ").is_ok());
    }

    #[test]
    fn framing_over_datagrams_is_rejected() {
        assert!(matches!(
            parse("udp / framing"),
            Err(SpecError::Mismatch { ref layer, needs: DataUnit::ByteStream, .. }) if layer == "framing"
        ));
    }

    #[test]
    fn message_layer_directly_on_a_stream_is_rejected() {
        assert!(matches!(
            parse("tcp / slicing"),
            Err(SpecError::Mismatch { ref below, .. }) if below == "tcp"
        ));
    }

    #[test]
    fn stream_without_framing_is_rejected() {
        assert_eq!(
            parse("tcp").unwrap_err(),
            SpecError::TopNotMessage { top: "tcp".into() }
        );
    }

    #[test]
    fn unknown_names_are_rejected() {
        assert_eq!(
            parse("carrier-pigeon / framing").unwrap_err(),
            SpecError::UnknownTransport {
                name: "carrier-pigeon".into()
            }
        );
        assert_eq!(
            parse("udp / teleport").unwrap_err(),
            SpecError::UnknownLayer {
                name: "teleport".into()
            }
        );
    }

    #[test]
    fn bad_options_are_rejected_at_parse_time() {
        assert!(matches!(
            parse("udp / slicing(mtu=big)"),
            Err(SpecError::Option { .. })
        ));
        assert!(matches!(
            parse("udp / slicing(colour=red)"),
            Err(SpecError::Option {
                source: OptionError::Unknown { .. },
                ..
            })
        ));
        assert!(matches!(
            parse("udp / slicing(mtu)"),
            Err(SpecError::Syntax { .. })
        ));
        assert!(matches!(
            parse("udp / slicing(mtu=1200"),
            Err(SpecError::Syntax { .. })
        ));
        assert!(matches!(
            parse("udp // delivery"),
            Err(SpecError::Syntax { .. })
        ));
        assert_eq!(parse("  ").unwrap_err(), SpecError::Empty);
    }

    #[test]
    fn spec_displays_in_canonical_form() {
        let spec = parse("udp/slicing( mtu = 1200 )/delivery").expect("valid");
        assert_eq!(spec.to_string(), "udp / slicing(mtu=1200) / delivery");
    }
}
