//! Unix domain stream sockets: the same driver as TCP (one task per
//! connection, vectored writes, large reads) on a filesystem path.
//!
//! The listener does not remove the socket file when dropped; bind in a
//! fresh directory (or remove a stale file first).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use plexus_net::{LinkContext, StackSpec, TransportProfile};

use crate::conn::now;
use crate::error::{AcceptError, BindError, ConnectError};
use crate::link::{Link, LinkConfig};
use crate::stream;

/// The transport's name: the first word of its stack specs.
pub const NAME: &str = "uds";

/// What the transport carries.
pub const PROFILE: TransportProfile = TransportProfile::byte_stream();

fn url(path: &Path) -> String {
    format!("uds://{}", path.display())
}

/// Accepts Unix socket connections, each becoming a [`Link`] with its own
/// stack built from the listener's spec.
#[derive(Debug)]
pub struct UdsListener {
    inner: tokio::net::UnixListener,
    spec: StackSpec,
    config: LinkConfig,
    path: PathBuf,
    next_link: AtomicU64,
}

impl UdsListener {
    /// Listens on `path` with links built from `spec` (a `uds / ...` spec)
    /// and default buffers.
    ///
    /// # Errors
    ///
    /// [`BindError`] if the spec is not for Unix sockets or the OS refuses
    /// the path (e.g. it exists already).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn bind(spec: &StackSpec, path: impl AsRef<Path>) -> Result<Self, BindError> {
        Self::bind_with(spec, path, LinkConfig::default())
    }

    /// As [`bind`](UdsListener::bind), with `config` for every accepted link.
    ///
    /// # Errors
    ///
    /// As [`bind`](UdsListener::bind).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn bind_with(
        spec: &StackSpec,
        path: impl AsRef<Path>,
        config: LinkConfig,
    ) -> Result<Self, BindError> {
        let path = path.as_ref();
        let spec = &BindError::fit(spec, NAME, PROFILE, || url(path))?;
        let inner = tokio::net::UnixListener::bind(path).map_err(|source| BindError::Io {
            addr: url(path),
            source,
        })?;
        Ok(Self {
            inner,
            spec: spec.clone(),
            config,
            path: path.to_owned(),
            next_link: AtomicU64::new(0),
        })
    }

    /// The path the listener is bound to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next connection and starts its driver.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Io`] if accepting failed; the listener stays usable.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        let (socket, _) = self
            .inner
            .accept()
            .await
            .map_err(|source| AcceptError::Io {
                addr: url(&self.path),
                source,
            })?;
        let link_id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let stack = self.spec.build_link(LinkContext {
            now: now(),
            link_id,
        });
        // Unix peers are usually unnamed: the link is named after the
        // listening path, with the link number.
        let peer = format!("{}#{link_id}", url(&self.path));
        Ok(stream::spawn(
            stream::UnixSocket::new(socket),
            stack,
            peer.into(),
            self.config,
        ))
    }
}

/// Connects to the Unix socket at `path` with a stack built from `spec` (a
/// `uds / ...` spec) and default buffers.
///
/// # Errors
///
/// [`ConnectError`] if the spec is not for Unix sockets or the connection
/// fails (no such file, connection refused).
///
/// # Panics
///
/// Outside a tokio runtime.
pub async fn connect(spec: &StackSpec, path: impl AsRef<Path>) -> Result<Link, ConnectError> {
    connect_with(spec, path, LinkConfig::default()).await
}

/// As [`connect`], with `config` for the link.
///
/// # Errors
///
/// As [`connect`].
///
/// # Panics
///
/// Outside a tokio runtime.
pub async fn connect_with(
    spec: &StackSpec,
    path: impl AsRef<Path>,
    config: LinkConfig,
) -> Result<Link, ConnectError> {
    let path = path.as_ref();
    let spec = &ConnectError::fit(spec, NAME, PROFILE, || url(path))?;
    let socket = tokio::net::UnixStream::connect(path)
        .await
        .map_err(|source| ConnectError::Io {
            addr: url(path),
            source,
        })?;
    let stack = spec.build(now());
    Ok(stream::spawn(
        stream::UnixSocket::new(socket),
        stack,
        url(path).into(),
        config,
    ))
}
