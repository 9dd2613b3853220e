//! [`LinkReceiver`]: the receiving half of a link, which takes what the
//! driver queued in one batch per lock, and [`DriverReceive`], a handler
//! that takes what arrives on the driver's own task while the receiver
//! waits (one task hand-off less per message).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;

use super::{lock, Received, Shared};
use crate::error::LinkClosed;

/// Handles received items on the link's driver task, as they arrive,
/// instead of the receiver's task being woken for them
/// ([`LinkReceiver::receive_on_driver`]).
///
/// The driver offers what it received only while the receiver waits with
/// nothing in hand and nothing is queued for it, so items keep their order:
/// whatever the handler leaves goes to the receiver, behind what the
/// handler took. It runs on the driver's task, holding none of the link's
/// locks: it must not block or wait (it delays the link's reading, and on
/// UDP every link of the endpoint), and may send on the link.
pub trait DriverReceive: Send {
    /// Takes the items it handles from the front of `batch`, stopping at
    /// the first it leaves to the receiver (a message that needs waiting,
    /// an event, a batch too large to handle here).
    fn receive(&mut self, batch: &mut VecDeque<Received>);
}

/// The receiving half of a link.
pub struct LinkReceiver {
    pub(super) shared: Arc<Shared>,
    /// A batch taken from the shared queue in one lock.
    local: VecDeque<Received>,
}

impl LinkReceiver {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            local: VecDeque::with_capacity(super::INITIAL_QUEUE),
        }
    }

    /// The peer address, with its scheme.
    pub fn peer(&self) -> &str {
        &self.shared.peer
    }

    /// Installs `handler` to take arriving items on the driver's task while
    /// this receiver waits (see [`DriverReceive`]); it replaces any handler
    /// installed before. What the handler leaves arrives here as usual.
    /// The handler is dropped with the receiver.
    pub fn receive_on_driver(&mut self, handler: Box<dyn DriverReceive>) {
        let old = lock(&self.shared.inb).handler.replace(handler);
        drop(old);
    }

    /// The next message or event, waiting until one arrives.
    ///
    /// # Errors
    ///
    /// [`LinkClosed`] once the link is closed and everything that arrived
    /// before has been received; every later call returns it again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is lost if the future is dropped.
    pub async fn recv(&mut self) -> Result<Received, LinkClosed> {
        // A hand-written poll keeps the future a pointer wide (the caller
        // moves it on every call).
        poll_fn(|cx| loop {
            if let Some(item) = self.local.pop_front() {
                return Poll::Ready(Ok(item));
            }
            if let Err(closed) = ready!(self.poll_refill(cx, true)) {
                return Poll::Ready(Err(closed));
            }
        })
        .await
    }

    /// Waits until something arrived, then moves everything received so far
    /// (messages and events, in order) to the back of `batch`: for a reader
    /// that handles consecutive messages together.
    ///
    /// # Errors
    ///
    /// As [`recv`](LinkReceiver::recv): only once nothing is left.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is lost if the future is dropped.
    pub async fn recv_batch(&mut self, batch: &mut VecDeque<Received>) -> Result<(), LinkClosed> {
        poll_fn(|cx| {
            if self.local.is_empty() {
                if let Err(closed) = ready!(self.poll_refill(cx, batch.is_empty())) {
                    return Poll::Ready(Err(closed));
                }
            }
            if batch.is_empty() {
                std::mem::swap(batch, &mut self.local);
            } else {
                batch.append(&mut self.local);
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Takes the shared queue's batch into `local`: `Ready(Ok)` once
    /// `local` is non-empty, `Ready(Err)` once the link is closed and
    /// drained, `Pending` (waker registered) otherwise. `idle`: the caller
    /// holds no items it took before, so while it waits the driver-side handler
    /// may take new ones.
    fn poll_refill(&mut self, cx: &mut Context<'_>, idle: bool) -> Poll<Result<(), LinkClosed>> {
        let wake_driver = {
            let mut inb = lock(&self.shared.inb);
            std::mem::swap(&mut inb.queue, &mut self.local);
            inb.bytes = 0;
            inb.receiver_busy = !(idle && self.local.is_empty());
            if self.local.is_empty() {
                if let Some(closed) = inb.closed.as_ref().filter(|_| !inb.handler_running) {
                    return Poll::Ready(Err(closed.clone()));
                }
                // Registered under the lock the driver pushes under: no
                // push can slip between the check and the registration.
                match &mut inb.receiver {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
            }
            std::mem::take(&mut inb.driver_waiting)
        };
        if wake_driver {
            (self.shared.wake_driver)();
        }
        if self.local.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }

    /// The next message, skipping events (each skipped event is logged at
    /// debug level). For applications that do not watch link events.
    ///
    /// # Errors
    ///
    /// As [`recv`](LinkReceiver::recv).
    pub async fn recv_message(&mut self) -> Result<Bytes, LinkClosed> {
        poll_fn(|cx| loop {
            match self.local.pop_front() {
                Some(Received::Message(m)) => return Poll::Ready(Ok(m)),
                Some(Received::Event(event)) => {
                    tracing::debug!(target: "plexus::transport", peer = %self.shared.peer, ?event, "link event skipped");
                }
                None => {
                    if let Err(closed) = ready!(self.poll_refill(cx, true)) {
                        return Poll::Ready(Err(closed));
                    }
                }
            }
        })
        .await
    }
}

impl Drop for LinkReceiver {
    fn drop(&mut self) {
        let handler = {
            let mut inb = lock(&self.shared.inb);
            inb.receiver_alive = false;
            inb.queue.clear();
            inb.bytes = 0;
            inb.handler.take()
        };
        // After the lock: the handler may own handles of this link.
        drop(handler);
        (self.shared.wake_driver)();
    }
}

impl std::fmt::Debug for LinkReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkReceiver")
            .field("peer", &self.shared.peer)
            .finish()
    }
}
