//! The [`Transport`] trait (what a node needs of a transport: listen, dial,
//! the unit it carries, its name) and the [`TransportRegistry`] that finds
//! a spec's transport by the spec's first word.
//!
//! The built-in transports implement the trait like any other
//! ([`builtin`](crate::builtin)); a transport written outside this crate
//! registers itself the same way and gets the same treatment: its links are
//! [`Link`]s driven through the stack (a byte stream of one's own runs on
//! the stream driver: [`Link::over_stream`]).
//!
//! ```
//! use plexus_transport::TransportRegistry;
//!
//! let registry = TransportRegistry::default();
//! let spec = "udp / slicing / delivery".parse().unwrap();
//! let (transport, spec) = registry.fit(&spec).unwrap();
//! assert_eq!(transport.name(), "udp");
//! assert_eq!(spec.profile().unwrap().max_datagram, Some(65_507));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use plexus_net::{SpecError, StackSpec, TransportProfile};

use crate::error::{AcceptError, BindError, ConnectError};
use crate::link::{Link, LinkConfig};

/// A boxed future, as the object-safe methods of [`Transport`],
/// [`Listener`] and [`Dialer`] return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A way to carry a stack's frames between two processes (or two places
/// in one): TCP, UDP, a pipe.
///
/// `spec` arguments are fit to the transport ([`TransportRegistry::fit`]):
/// they name it, their first layer takes what it carries, and the stacks
/// they build know its datagram limit.
pub trait Transport: Send + Sync + 'static {
    /// The first word of the transport's stack specs (`tcp`), and the URI
    /// scheme of its [`default_stack`](Self::default_stack).
    fn name(&self) -> &str;

    /// What the transport carries.
    fn profile(&self) -> TransportProfile;

    /// The stack a URI scheme named after the transport uses unless
    /// configured otherwise, e.g. `tcp / framing`.
    fn default_stack(&self) -> &str;

    /// Listens on `addr` (written as after `name://` in a URI), building
    /// each accepted link's stack from `spec`, with `link`'s buffers.
    fn listen<'a>(
        &'a self,
        spec: &'a StackSpec,
        addr: &'a str,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Box<dyn Listener>, BindError>>;

    /// A dialer for a process that does not listen on this transport (an
    /// ephemeral UDP socket, a QUIC endpoint that accepts nothing, or just
    /// the spec for TCP).
    fn dialer<'a>(
        &'a self,
        spec: &'a StackSpec,
        link: LinkConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn Dialer>, BindError>>;
}

/// A bound transport accepting links.
pub trait Listener: Send + Sync + 'static {
    /// The address bound (port 0 resolved), as written after `name://`.
    fn local_addr(&self) -> String;

    /// The next accepted link, its driver started.
    ///
    /// A peer refused during a security handshake is
    /// [`AcceptError::Handshake`]: only that connection is lost, and the
    /// listener stays usable.
    fn accept(&self) -> BoxFuture<'_, Result<Link, AcceptError>>;

    /// Dials through this listener's socket where the transport shares one
    /// between listening and dialling (UDP, QUIC: one socket for every
    /// peer), or as the transport's plain dialer.
    fn dialer(&self) -> Arc<dyn Dialer>;
}

/// Connects links of one spec.
pub trait Dialer: Send + Sync + 'static {
    /// A link to `addr` (written as after `name://` in a URI), its driver
    /// started.
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<Link, ConnectError>>;
}

/// Why a transport could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// Another transport is registered under the name.
    #[error(
        "transport `{name}` is registered twice: by {registered} and by {new}; \
         give one of them another name"
    )]
    Duplicate {
        /// The name.
        name: String,
        /// The type of the transport registered first.
        registered: &'static str,
        /// The type of the one refused.
        new: &'static str,
    },
}

struct Entry {
    transport: Arc<dyn Transport>,
    type_name: &'static str,
}

/// The transports specs may name, by name. [`Default`] holds the built-in
/// ones that need no configuration (`tcp`, `uds`, `udp`, `mem`); `tls` and
/// `quic` need a certificate and are registered with it
/// ([`TlsTransport`](crate::builtin::TlsTransport),
/// [`QuicTransport`](crate::builtin::QuicTransport)).
#[derive(Clone)]
pub struct TransportRegistry {
    by_name: BTreeMap<String, Arc<Entry>>,
}

impl fmt::Debug for TransportRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.by_name.iter().map(|(k, e)| (k, e.type_name)))
            .finish()
    }
}

impl Default for TransportRegistry {
    fn default() -> Self {
        use crate::builtin::{MemTransport, TcpTransport, UdpTransport, UdsTransport};
        let mut registry = Self::empty();
        for result in [
            registry.register(TcpTransport),
            registry.register(UdsTransport),
            registry.register(UdpTransport::default()),
            registry.register(MemTransport::default()),
        ] {
            debug_assert!(result.is_ok(), "built-in transports have distinct names");
        }
        registry
    }
}

impl TransportRegistry {
    /// A registry without any transport.
    pub fn empty() -> Self {
        Self {
            by_name: BTreeMap::new(),
        }
    }

    /// Adds `transport` under its [`name`](Transport::name).
    ///
    /// # Errors
    ///
    /// [`RegisterError::Duplicate`], naming both, if the name is taken.
    pub fn register<T: Transport>(&mut self, transport: T) -> Result<(), RegisterError> {
        let name = transport.name().to_owned();
        if let Some(existing) = self.by_name.get(&name) {
            return Err(RegisterError::Duplicate {
                name,
                registered: existing.type_name,
                new: std::any::type_name::<T>(),
            });
        }
        let entry = Entry {
            transport: Arc::new(transport),
            type_name: std::any::type_name::<T>(),
        };
        self.by_name.insert(name, Arc::new(entry));
        Ok(())
    }

    /// The transport registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Transport>> {
        self.by_name.get(name).map(|e| &e.transport)
    }

    /// The registered transports, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Transport>> {
        self.by_name.values().map(|e| &e.transport)
    }

    /// `spec`'s transport, and the spec [fit](StackSpec::fit) to it.
    ///
    /// # Errors
    ///
    /// [`SpecError::UnknownTransport`] if no transport has the spec's
    /// first word as its name (listing the registered ones); the errors of
    /// [`StackSpec::fit`] if the spec's layers do not take what the
    /// transport carries.
    pub fn fit(&self, spec: &StackSpec) -> Result<(Arc<dyn Transport>, StackSpec), SpecError> {
        let transport = self
            .get(spec.transport())
            .ok_or_else(|| SpecError::UnknownTransport {
                name: spec.transport().to_owned(),
                registered: self.by_name.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        let fitted = spec.fit(transport.name(), transport.profile())?;
        Ok((transport.clone(), fitted))
    }
}
