//! Accepting connections that need a handshake before they are links (a
//! TLS handshake, a WebSocket upgrade, a protocol of one's own): the
//! listening socket is read in a background task and each connection's
//! handshake runs in a task of its own, at most a fixed number at once, so
//! a slow or silent peer holds one slot (for as long as the handshake's own
//! timeout allows) and never the accepts of the others. Finished
//! handshakes, links or refusals, wait for [`Handshakes::accept`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::AbortHandle;

use crate::error::AcceptError;
use crate::link::Link;

/// Finished handshakes waiting for [`Handshakes::accept`].
const ACCEPT_QUEUE: usize = 16;

/// What a handshake made of a connection.
#[derive(Debug)]
pub enum Handshaken {
    /// A link.
    Link(Link),
    /// A refusal (logged by the listener and returned by `accept`; the
    /// listener goes on).
    Refused(AcceptError),
    /// Nothing for the listener: the handshake handed the connection to
    /// someone else (a web server on the same port).
    HandedOver,
}

/// A listening socket whose connections are handshaken in tasks of their
/// own; see the [module docs](self). Dropping it stops accepting and
/// aborts the accepting task (handshakes in progress finish on their own).
#[derive(Debug)]
pub struct Handshakes {
    local: SocketAddr,
    url: String,
    incoming: tokio::sync::Mutex<mpsc::Receiver<Result<Link, AcceptError>>>,
    task: AbortHandle,
}

impl Drop for Handshakes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Handshakes {
    /// Accepts on `listener` (named `url` in errors, e.g. `wss://0.0.0.0:443`)
    /// and runs `handshake(socket, peer, link_id)` for each connection, at
    /// most `max_at_once` at a time. The handshake must bound its own time.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the accepting task is spawned).
    pub fn start<H, F>(
        listener: tokio::net::TcpListener,
        url: String,
        max_at_once: usize,
        handshake: H,
    ) -> Self
    where
        H: Fn(TcpStream, SocketAddr, u64) -> F + Send + Sync + 'static,
        F: Future<Output = Handshaken> + Send + 'static,
    {
        // A listener's address is known once bound; `url` names it anyway.
        let local = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        let task = tokio::spawn(accept_loop(
            listener,
            url.clone(),
            max_at_once,
            Arc::new(handshake),
            tx,
        ))
        .abort_handle();
        Self {
            local,
            url,
            incoming: tokio::sync::Mutex::new(rx),
            task,
        }
    }

    /// The address the listening socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits for the next connection whose handshake finished: its link, or
    /// why it was refused (the listener stays usable: call `accept` again).
    ///
    /// # Errors
    ///
    /// The handshake's refusal, [`AcceptError::Io`] if accepting failed,
    /// [`AcceptError::Closed`] if the accepting task ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no connection is lost if the future is dropped.
    pub async fn accept(&self) -> Result<Link, AcceptError> {
        let mut incoming = self.incoming.lock().await;
        incoming.recv().await.unwrap_or_else(|| {
            Err(AcceptError::Closed {
                addr: self.url.clone(),
            })
        })
    }
}

async fn accept_loop<H, F>(
    listener: tokio::net::TcpListener,
    url: String,
    max_at_once: usize,
    handshake: Arc<H>,
    tx: mpsc::Sender<Result<Link, AcceptError>>,
) where
    H: Fn(TcpStream, SocketAddr, u64) -> F + Send + Sync + 'static,
    F: Future<Output = Handshaken> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(max_at_once));
    let mut next_link = 0u64;
    loop {
        // The semaphore is never closed.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            () = tx.closed() => return,
            r = listener.accept() => r,
        };
        let (socket, peer) = match accepted {
            Ok(a) => a,
            Err(source) => {
                let error = AcceptError::Io {
                    addr: url.clone(),
                    source,
                };
                tracing::warn!(target: "plexus::transport", %error, "accept failed");
                if tx.send(Err(error)).await.is_err() {
                    return;
                }
                continue;
            }
        };
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(target: "plexus::transport", %peer, %error, "set_nodelay failed");
        }
        let link_id = next_link;
        next_link += 1;
        let opened = handshake(socket, peer, link_id);
        let tx = tx.clone();
        tokio::spawn(async move {
            let opened = opened.await;
            drop(slot);
            let result = match opened {
                Handshaken::Link(link) => Ok(link),
                Handshaken::Refused(error) => {
                    tracing::warn!(target: "plexus::transport", %error, "peer refused");
                    Err(error)
                }
                Handshaken::HandedOver => return,
            };
            let _ = tx.send(result).await;
        });
    }
}
