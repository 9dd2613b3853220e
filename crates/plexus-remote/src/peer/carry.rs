//! What a step of the peer's session produced, carried out by the peer:
//! the session runs under the driver's locked form
//! ([`Locked`](crate::driver::Locked)), and this is its [`Carry`]. Replies
//! go out on the control lane, events reach local actors and waiters, the
//! phase is mirrored for the lock-free send path, and the superseded wait's
//! timer is a tokio sleep. Everything but the mirror runs with the
//! session's lock let go, so an event may step the session again (answer a
//! resolve, record a monitor) and nothing waits on a queue under it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use plexus_core::remote::{self, Control, Signal, Watcher};
use plexus_core::{Down, Exit, ExitReason};

use super::dispatch::Reading;
use super::session::{Route, SessionEvent};
use super::{LiveSession, Peer};
use crate::driver::Carry;
use crate::node::NodeInner;

impl Carry<LiveSession> for Arc<Peer> {
    fn transmit(&self, to: Route, packet: Bytes) {
        let _ = self.send_frame(to.carrier, to.strand, packet);
    }

    fn event(&self, event: SessionEvent<super::Live>) {
        if let Some(inner) = self.inner.upgrade() {
            self.carry_out(&inner, event);
        }
    }

    fn stepped(&self, session: &mut LiveSession) {
        if session.take_moved() {
            self.mirror(session);
        }
    }

    fn wake_at(&self, deadline: Instant) {
        let peer = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
            peer.session.timeout(&peer);
        });
    }
}

impl Peer {
    /// Carries out one of the session's events.
    fn carry_out(self: &Arc<Self>, inner: &Arc<NodeInner>, event: SessionEvent<super::Live>) {
        match event {
            SessionEvent::Receipt { waiter, outcome } => {
                let _ = waiter.send(outcome);
            }
            SessionEvent::Reply { id, payload } => {
                if let Some(pending) = inner.take_reply(id) {
                    remote::with_context(self.context(), || pending.deliver(payload));
                }
            }
            SessionEvent::Resolve {
                request,
                type_id,
                name,
            } => {
                let resolution = inner.resolve_name(&name, type_id);
                self.step(|st, _| st.answer_resolve(request, resolution));
            }
            SessionEvent::Resolved { waiter, resolution } => {
                let _ = waiter.send(Ok(resolution));
            }
            SessionEvent::Monitor { target, token } => {
                let Some(control) = inner.control(target) else {
                    self.step(|st, _| st.refuse_monitor(token, no_such_actor(inner)));
                    return;
                };
                let peer = Arc::downgrade(self);
                let watch = control.watch(Watcher::Callback(Box::new(move |down: Down| {
                    if let Some(p) = peer.upgrade() {
                        p.step(|st, _| st.actor_down(token, down.reason));
                    }
                })));
                if watch.is_some() {
                    self.step(|st, _| st.monitored(token, control, watch));
                }
            }
            SessionEvent::Unwatch { local, watch } => local.unwatch(watch),
            SessionEvent::Down {
                watcher,
                id,
                reason,
            } => watcher.notify(Down { id, reason }),
            SessionEvent::Link { remote, local } => {
                let proxy: Arc<dyn Control> = inner.proxy(remote, self, None);
                let refused = match inner.control(local) {
                    Some(control) => match control.add_link(proxy) {
                        Ok(()) => {
                            let local_id = control.id();
                            self.step(|st, _| st.linked(local_id, control, remote));
                            return;
                        }
                        Err(reason) => reason,
                    },
                    None => no_such_actor(inner),
                };
                self.step(|st, _| st.refuse_link(remote, local, refused));
            }
            SessionEvent::Unlink { remote, local } => {
                if let Some(control) = inner.control(local) {
                    control.remove_link(remote);
                }
            }
            SessionEvent::Exit {
                remote,
                local,
                reason,
            } => {
                if let Some(control) = inner.control(local) {
                    control.remove_link(remote);
                    control.signal(Signal::Exit(Exit {
                        from: remote,
                        reason,
                    }));
                }
            }
            SessionEvent::Stop { target, kill } => {
                if let Some(c) = inner.control(target) {
                    if kill {
                        c.kill();
                    } else {
                        c.signal(Signal::Stop(ExitReason::Stopped));
                    }
                }
            }
            SessionEvent::GaveUp(abandoned) => self.give_up(inner, abandoned),
            // The node's readers sort messages out and take a link's end
            // from `handle_frame` themselves; a frame handed to the
            // session's `handle_packet` by other code is carried out the
            // same way.
            SessionEvent::Message(frame) => {
                if let Some(remote) = self.remote() {
                    let mut bytes = bytes::BytesMut::new();
                    frame.encode_into(&mut bytes);
                    let _ = self.dispatch(inner, remote, bytes.freeze(), &mut Reading::default());
                }
            }
            SessionEvent::Closed(cause) => {
                tracing::warn!(target: "plexus::remote", peer = %self.dial_uri(), "closing the link: {cause}");
                if let Some(links) = self.session.read(|st| st.sender().cloned()) {
                    links.close();
                }
            }
        }
    }
}

fn no_such_actor(inner: &NodeInner) -> ExitReason {
    ExitReason::Failed(format!("no such actor on node {}", inner.id))
}
