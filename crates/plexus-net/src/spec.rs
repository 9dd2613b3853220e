//! [`StackSpec`]: a parsed, validated stack description such as
//! `udp / slicing(mtu=1200) / delivery / ordering`, which builds one
//! [`Stack`] per link.
//!
//! # Grammar
//!
//! ```text
//! spec      := transport { "/" layer }        layers listed bottom to top
//! transport := name                           a registered transport (tcp,
//!                                             tls, uds: byte streams; udp,
//!                                             mem, quic: messages; or yours)
//! layer     := name [ "(" options ")" ]       see crate::options for options
//! ```
//!
//! A spec is valid when every layer's needs match what the one below offers
//! and the top offers messages: stream transports need `framing` (or another
//! stream-to-message layer) first; message layers such as `slicing` cannot sit
//! directly on a byte stream, and `framing` cannot sit on datagrams. This
//! crate knows no transport: parsing checks the layers against each other,
//! and [`StackSpec::fit`] checks the first one against the transport's
//! [`TransportProfile`] when a transport takes the spec.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::guarantees::{GuaranteeEffect, Guarantees};
use crate::layer::{DataUnit, Interface, LinkContext};
use crate::options::{LayerOptions, OptionError};
use crate::registry::{LayerFactory, LayerRegistry};
use crate::stack::Stack;

/// What a stack needs to know of the transport under it: the unit it
/// carries and, for datagrams, the largest one. A transport (in
/// `plexus-transport`, or a user's own) gives its profile; a
/// [`StackSpec`] is checked against it with [`StackSpec::fit`] before it
/// builds stacks for that transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransportProfile {
    /// What the transport offers the first layer.
    pub unit: DataUnit,
    /// The largest datagram the transport carries, if bounded.
    pub max_datagram: Option<usize>,
    /// What the transport guarantees the first layer: a byte stream is
    /// reliable and ordered, datagrams are neither unless the transport
    /// says so ([`with_guarantees`](Self::with_guarantees)).
    pub guarantees: Guarantees,
}

impl TransportProfile {
    /// A byte stream (TCP, TLS, a Unix stream socket, a pipe).
    pub const fn byte_stream() -> Self {
        Self {
            unit: DataUnit::ByteStream,
            max_datagram: None,
            guarantees: Guarantees::RELIABLE_ORDERED,
        }
    }

    /// Datagrams of at most `max` bytes (`None`: unbounded).
    pub const fn datagrams(max: Option<usize>) -> Self {
        Self {
            unit: DataUnit::Message,
            max_datagram: max,
            guarantees: Guarantees::NONE,
        }
    }

    /// This profile with `guarantees` (a message transport that is
    /// reliable and ordered itself, such as QUIC's streams).
    pub const fn with_guarantees(mut self, guarantees: Guarantees) -> Self {
        self.guarantees = guarantees;
        self
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
    /// No transport is registered under the spec's first word.
    #[error("unknown transport `{name}` (registered: {registered})")]
    UnknownTransport {
        /// The name as written.
        name: String,
        /// The registered transports' names, comma-separated.
        registered: String,
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
    /// The spec is for another transport than the one it is used with.
    #[error("the stack spec `{spec}` is for transport `{transport}`, not `{used_with}`")]
    WrongTransport {
        /// The spec.
        spec: String,
        /// Its first word.
        transport: String,
        /// The transport it was used with.
        used_with: String,
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
    /// What the layer needs below.
    pub(crate) needs: DataUnit,
    pub(crate) factory: LayerFactory,
    /// How the layer changes the guarantees below it.
    pub(crate) effect: GuaranteeEffect,
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
///
/// Parsing checks the layers against each other; the first word names the
/// transport, which this crate does not know: [`fit`](Self::fit) checks the
/// spec against the transport's [`TransportProfile`] (the first layer
/// needs what the transport offers; a spec without layers needs a message
/// transport), as every transport does before it builds a stack.
#[derive(Debug, Clone)]
pub struct StackSpec {
    transport: Arc<str>,
    /// Set by [`fit`](Self::fit).
    profile: Option<TransportProfile>,
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
        let (transport, topts) = parse_token(pos, first)?;
        if !topts.is_empty() {
            return Err(SpecError::Syntax {
                position: pos,
                reason: "transports take no options",
            });
        }
        // What the layer below offers; the transport's is known at `fit`.
        let mut below: Option<(String, DataUnit)> = None;
        let mut layers = Vec::new();
        for (pos, token) in tokens {
            let (name, options) = parse_token(pos, token)?;
            let constructor = registry.get(name).ok_or_else(|| SpecError::UnknownLayer {
                name: name.to_owned(),
            })?;
            let Interface { needs, offers } = constructor.interface();
            if let Some((below, offered)) = below.take() {
                if needs != offered {
                    return Err(SpecError::Mismatch {
                        layer: name.to_owned(),
                        needs,
                        below,
                        offers: offered,
                    });
                }
            }
            let factory = constructor
                .configure(&options)
                .map_err(|source| SpecError::Option {
                    layer: name.to_owned(),
                    source,
                })?;
            let effect = constructor.guarantees(&options);
            layers.push(LayerSpec {
                name: name.to_owned(),
                options,
                needs,
                factory,
                effect,
            });
            below = Some((name.to_owned(), offers));
        }
        if let Some((top, DataUnit::ByteStream)) = below {
            return Err(SpecError::TopNotMessage { top });
        }
        Ok(Self {
            transport: transport.into(),
            profile: None,
            layers: layers.into(),
        })
    }

    /// The transport's name: the spec's first word.
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// What the first layer needs of the transport (`None` without layers:
    /// the transport must offer messages itself).
    pub fn needs(&self) -> DataUnit {
        self.layers.first().map_or(DataUnit::Message, |l| l.needs)
    }

    /// This spec checked against `transport` (named `name`, with `profile`):
    /// the copy builds stacks that know the transport's datagram limit.
    ///
    /// # Errors
    ///
    /// [`SpecError::WrongTransport`] if the spec names another transport;
    /// [`SpecError::Mismatch`] if the first layer needs another unit than
    /// the transport offers; [`SpecError::TopNotMessage`] for a byte-stream
    /// transport without layers.
    pub fn fit(&self, name: &str, profile: TransportProfile) -> Result<Self, SpecError> {
        if *self.transport != *name {
            return Err(SpecError::WrongTransport {
                spec: self.to_string(),
                transport: self.transport.to_string(),
                used_with: name.to_owned(),
            });
        }
        match self.layers.first() {
            Some(first) if first.needs != profile.unit => {
                return Err(SpecError::Mismatch {
                    layer: first.name.clone(),
                    needs: first.needs,
                    below: name.to_owned(),
                    offers: profile.unit,
                })
            }
            None if profile.unit != DataUnit::Message => {
                return Err(SpecError::TopNotMessage {
                    top: name.to_owned(),
                })
            }
            _ => {}
        }
        Ok(Self {
            profile: Some(profile),
            ..self.clone()
        })
    }

    /// The profile the spec was [`fit`](Self::fit) to, if any.
    pub fn profile(&self) -> Option<TransportProfile> {
        self.profile
    }

    /// What stacks of this spec guarantee their messages: the transport's
    /// guarantees changed by each layer, bottom to top. `None` before the
    /// spec is [`fit`](Self::fit) to a transport.
    pub fn guarantees(&self) -> Option<Guarantees> {
        let profile = self.profile?;
        Some(
            self.layers
                .iter()
                .fold(profile.guarantees, |below, layer| layer.effect.apply(below)),
        )
    }

    /// Layer names, bottom to top.
    pub fn layer_names(&self) -> impl Iterator<Item = &str> {
        self.layers.iter().map(|l| l.name.as_str())
    }

    /// Builds a stack instance for link 0 created at `now`.
    pub fn build(&self, now: Instant) -> Stack {
        self.build_link(LinkContext { now, link_id: 0 })
    }

    /// Builds the layer instances for the link described by `link`, bottom
    /// to top, for a transport that puts a layer of its own below them
    /// (see [`Stack::new`]).
    pub fn build_layers(&self, link: LinkContext) -> Vec<Box<dyn crate::Layer>> {
        self.layers.iter().map(|l| (l.factory)(&link)).collect()
    }

    /// Builds a stack instance for the link described by `link`.
    pub fn build_link(&self, link: LinkContext) -> Stack {
        let layers = self.layers.iter().map(|l| (l.factory)(&link)).collect();
        Stack::new(self.profile.and_then(|p| p.max_datagram), layers)
    }
}

impl fmt::Display for StackSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.transport)?;
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
        assert_eq!(spec.transport(), "udp");
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
            parse("udp / framing").expect("parses").fit("udp", TransportProfile::datagrams(None)),
            Err(SpecError::Mismatch { ref layer, needs: DataUnit::ByteStream, .. }) if layer == "framing"
        ));
    }

    #[test]
    fn message_layer_directly_on_a_stream_is_rejected_when_fit() {
        let spec = parse("tcp / slicing").expect("the layers fit together");
        assert!(matches!(
            spec.fit("tcp", TransportProfile::byte_stream()),
            Err(SpecError::Mismatch { ref below, ref layer, .. }) if below == "tcp" && layer == "slicing"
        ));
        assert!(spec.fit("tcp", TransportProfile::datagrams(None)).is_ok());
    }

    #[test]
    fn stream_without_framing_is_rejected_when_fit() {
        assert_eq!(
            parse("tcp")
                .expect("no layers to check")
                .fit("tcp", TransportProfile::byte_stream())
                .unwrap_err(),
            SpecError::TopNotMessage { top: "tcp".into() }
        );
        assert_eq!(
            parse("tcp / framing / framing").unwrap_err(),
            SpecError::Mismatch {
                layer: "framing".into(),
                needs: DataUnit::ByteStream,
                below: "framing".into(),
                offers: DataUnit::Message
            }
        );
    }

    #[test]
    fn a_spec_fits_only_its_own_transport() {
        let spec = parse("carrier-pigeon / framing").expect("any transport name parses");
        assert_eq!(spec.transport(), "carrier-pigeon");
        assert!(matches!(
            spec.fit("tcp", TransportProfile::byte_stream()),
            Err(SpecError::WrongTransport { ref transport, ref used_with, .. })
                if transport == "carrier-pigeon" && used_with == "tcp"
        ));
        let fitted = parse("udp")
            .expect("valid")
            .fit("udp", TransportProfile::datagrams(Some(1200)))
            .expect("fits");
        assert_eq!(fitted.build(Instant::now()).max_message_len(), Some(1200));
    }

    #[test]
    fn unknown_names_are_rejected() {
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
