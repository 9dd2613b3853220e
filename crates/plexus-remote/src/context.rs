//! The wire context of one peer: how refs and reply handles inside messages
//! to or from that peer are exported and imported.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use plexus_core::remote::{
    ActorPath, Inbound, PendingReply, RemoteEndpoint, RemoteReply, ReplyPath, WireContext,
};
use plexus_core::ActorId;

use crate::node::NodeInner;
use crate::peer::Peer;
use crate::wire::WireFrame;

pub(crate) struct PeerContext {
    inner: Weak<NodeInner>,
    peer: Weak<Peer>,
}

impl PeerContext {
    pub(crate) fn new(inner: Weak<NodeInner>, peer: Weak<Peer>) -> Self {
        Self { inner, peer }
    }

    fn parts(&self) -> Option<(Arc<NodeInner>, Arc<Peer>)> {
        Some((self.inner.upgrade()?, self.peer.upgrade()?))
    }
}

impl WireContext for PeerContext {
    fn extension(&self, key: std::any::TypeId) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let inner = self.inner.upgrade()?;
        let extensions = inner
            .extensions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        extensions.get(&key).cloned()
    }

    fn export(
        &self,
        id: ActorId,
        type_id: u64,
        inbound: &dyn Fn() -> Arc<dyn Inbound>,
    ) -> ActorPath {
        let Some((inner, peer)) = self.parts() else {
            return ActorPath {
                id,
                addr: String::new(),
            };
        };
        inner.export(id, type_id, inbound);
        ActorPath {
            id,
            addr: inner.listen_uri_for(&peer.scheme),
        }
    }

    fn import_local(&self, path: &ActorPath, type_id: u64) -> Option<Arc<dyn Inbound>> {
        let inner = self.inner.upgrade()?;
        if path.id.node() != inner.id {
            return None;
        }
        inner.inbound(path.id.serial(), type_id)
    }

    fn import_remote(&self, path: &ActorPath) -> Arc<dyn RemoteEndpoint> {
        // Upgrades cannot fail while a frame of this peer is being decoded:
        // the reader holds both.
        let (inner, peer) = self
            .parts()
            .expect("context used while its node and peer live");
        let via = if path.id.node() == inner.id {
            // A ref to one of our own actors that is no longer exported:
            // it has stopped. A proxy through this peer reports it dead.
            peer
        } else if peer.is_node(path.id.node()) {
            // Nearly always: a ref to an actor of the node that sent it,
            // often the same as last time (a request–response exchange).
            if let Some(proxy) = peer.recent_import(path.id) {
                return proxy;
            }
            let proxy = inner.proxy(path.id, &peer, Some(path.addr.clone()));
            peer.keep_import(&proxy);
            return proxy;
        } else {
            inner
                .peer_for(path.id.node(), &peer.scheme, &path.addr)
                .unwrap_or(peer)
        };
        let proxy = inner.proxy(path.id, &via, Some(path.addr.clone()));
        if path.id.node() == inner.id {
            proxy.mark_dead();
        }
        proxy
    }

    fn export_reply(&self, pending: Box<dyn PendingReply>) -> ReplyPath {
        let (inner, peer) = self
            .parts()
            .expect("context used while its node and peer live");
        let waiting_on = peer.remote().unwrap_or(inner.id);
        let id = inner.add_reply(waiting_on, pending);
        ReplyPath {
            node: inner.id,
            id,
            addr: inner.listen_uri_for(&peer.scheme),
        }
    }

    fn import_reply(&self, path: &ReplyPath) -> Arc<dyn RemoteReply> {
        let (inner, peer) = self
            .parts()
            .expect("context used while its node and peer live");
        if path.node == inner.id {
            return Arc::new(LocalReply {
                inner: Arc::downgrade(&inner),
            });
        }
        let via = inner
            .peer_for(path.node, &peer.scheme, &path.addr)
            .unwrap_or(peer);
        Arc::new(PeerReply { peer: via })
    }
}

/// A reply for an ask made on another node: sent back over the link.
struct PeerReply {
    peer: Arc<Peer>,
}

impl RemoteReply for PeerReply {
    fn send_reply(&self, id: u64, payload: Bytes) {
        if let Err(why) = self.peer.send(&WireFrame::Reply { id, payload }) {
            self.peer.dead_letter("reply", why);
        }
    }
}

/// A reply handle that came back to the node that made it.
struct LocalReply {
    inner: Weak<NodeInner>,
}

impl RemoteReply for LocalReply {
    fn send_reply(&self, id: u64, payload: Bytes) {
        if let Some(pending) = self.inner.upgrade().and_then(|i| i.take_reply(id)) {
            pending.deliver(payload);
        }
    }
}
