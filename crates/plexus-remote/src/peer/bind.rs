//! Binding lane connections to a session (see `docs/PROTOCOL.md`,
//! "Lanes").
//!
//! The node that dials a peer runs the handshake on the primary link (the
//! URI's scheme), then, for every lane its configuration maps and all at
//! once, dials the peer's listener of that scheme, runs the handshake
//! there too (the cookie proof and, on TLS, the certificate's identity,
//! for each connection) and sends `BIND(session, lane, candidate)`, where the
//! session is the one both sides derived from the primary handshake's
//! nonces. The peer echoes `BIND` once it has attached the connection to
//! that session, or refuses it with `REJECT(Session)`: a session that does
//! not exist (or is no longer being set up), or one with another node. When
//! every lane is bound, the dialler sends `LANES` on the primary link, and
//! both sides bring the session up with all its links at once, so no lane's
//! frames ever change links mid-stream.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use plexus_core::Lane;
use plexus_transport::Link;
use tokio::time::Instant;

use super::links::BoundLink;
use super::shell::handshake_on;
use crate::error::LinkError;
use crate::handshake::{HandshakeError, HandshakeViolation, Verified};
use crate::node::{lock, Binding, NodeInner};
use crate::wire::{RejectCode, WireFrame, MAX_BOUND, MAX_CANDIDATES};

/// Dials and binds the lane connections this node's configuration maps,
/// to the peer `hs` verified on the primary link. A lane whose scheme the
/// peer does not listen on rides the primary link.
///
/// The lane connections do not depend on each other, so they are set up
/// at once, each (connect, handshake, `BIND` and its echo) within the
/// connect timeout of its own: a session with many lane connections on a
/// long path takes the time of its slowest one, not of their sum. The
/// first to fail fails them all (the others are dropped, which closes
/// them).
pub(super) async fn dial_lanes(
    inner: &Arc<NodeInner>,
    hs: &Verified,
) -> Result<Vec<BoundLink>, LinkError> {
    let timeout = inner.config.connect_timeout;
    let mut pending = Vec::new();
    for lane in Lane::ALL {
        for (candidate, scheme) in inner.lanes.candidates(lane).iter().enumerate() {
            let prefix = format!("{scheme}://");
            let Some(addr) = hs.listen.iter().find_map(|u| u.strip_prefix(&prefix)) else {
                tracing::debug!(target: "plexus::remote", peer = %hs.node, %lane, %scheme, "the peer does not listen on the lane's scheme; the lane rides the primary link");
                continue;
            };
            let candidate = candidate as u8;
            pending.push(Box::pin(async move {
                let bound = tokio::time::timeout(
                    timeout,
                    bind_one(inner, hs, lane, candidate, scheme, addr),
                )
                .await;
                let link = match bound {
                    Ok(bound) => bound?,
                    Err(_) => {
                        return Err(LinkError::Lane {
                            lane,
                            scheme: scheme.clone(),
                            source: Box::new(LinkError::Timeout(timeout)),
                        })
                    }
                };
                Ok(BoundLink {
                    lane,
                    candidate,
                    scheme: scheme.clone(),
                    link,
                })
            }));
        }
    }
    try_join_all(pending).await
}

/// Runs `futures` at once in the calling task; their outputs in order, or
/// the first error (the others are dropped then).
async fn try_join_all<T, F>(mut futures: Vec<Pin<Box<F>>>) -> Result<Vec<T>, LinkError>
where
    F: Future<Output = Result<T, LinkError>>,
{
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut ready = true;
        for (future, out) in futures.iter_mut().zip(done.iter_mut()) {
            if out.is_some() {
                continue;
            }
            match future.as_mut().poll(cx) {
                Poll::Ready(Ok(value)) => *out = Some(value),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => ready = false,
            }
        }
        if ready {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await?;
    Ok(done.into_iter().flatten().collect())
}

async fn bind_one(
    inner: &Arc<NodeInner>,
    hs: &Verified,
    lane: Lane,
    candidate: u8,
    scheme: &str,
    addr: &str,
) -> Result<Link, LinkError> {
    let lane_error = |e: LinkError| LinkError::Lane {
        lane,
        scheme: scheme.to_owned(),
        source: Box::new(e),
    };
    let dialer = inner.dialer(scheme).await.map_err(lane_error)?;
    let mut link = dialer
        .connect(addr)
        .await
        .map_err(|e| lane_error(e.into()))?;
    let lhs = handshake_on(inner, &mut link).await.map_err(lane_error)?;
    if lhs.node != hs.node {
        link.close();
        return Err(lane_error(LinkError::Handshake(
            HandshakeViolation::LaneOfAnotherNode {
                uri: format!("{scheme}://{addr}"),
                found: lhs.node,
                expected: hs.node,
            }
            .into(),
        )));
    }
    let bind = WireFrame::Bind {
        session: hs.session,
        lane: lane.index() as u8,
        candidate,
    };
    link.send(bind.encode())
        .await
        .map_err(|e| lane_error(e.into()))?;
    let answer = link
        .recv_message()
        .await
        .map_err(|e| lane_error(e.into()))?;
    match WireFrame::decode(answer) {
        Ok(echo) if echo == bind => Ok(link),
        Ok(WireFrame::Reject { code, detail }) => {
            Err(lane_error(LinkError::Handshake(HandshakeError::Rejected {
                code,
                detail,
            })))
        }
        Ok(other) => Err(lane_error(LinkError::Handshake(
            HandshakeViolation::Unexpected {
                frame: other.name(),
                expected: "waiting for the BIND echo",
            }
            .into(),
        ))),
        Err(e) => Err(lane_error(LinkError::Handshake(
            HandshakeViolation::Malformed(e).into(),
        ))),
    }
}

/// Registers the session of a link accepted and verified as `hs`, so its
/// lane connections can bind to it until [`take_bound`].
pub(super) fn start_binding(inner: &NodeInner, hs: &Verified) {
    lock(&inner.binding).insert(
        hs.session,
        Binding {
            node: hs.node,
            links: Vec::new(),
        },
    );
    inner.binding_started.notify_waiters();
}

/// Ends the binding of session `session` (its `LANES` came, or its link
/// failed): the lane connections bound to it.
pub(super) fn take_bound(inner: &NodeInner, session: u64) -> Vec<BoundLink> {
    lock(&inner.binding)
        .remove(&session)
        .map(|b| b.links)
        .unwrap_or_default()
}

/// Why an accepted lane connection was refused.
#[derive(Debug, thiserror::Error)]
enum BindRefused {
    #[error("no session {0:016x} is being set up")]
    NoSession(u64),
    #[error("session {session:016x} is with node {owner}, not {claimed}")]
    OtherNode {
        session: u64,
        owner: plexus_core::NodeId,
        claimed: plexus_core::NodeId,
    },
    #[error("lane {lane} candidate {candidate} is not a lane connection this session may bind")]
    BadLane { lane: u8, candidate: u8 },
}

/// Serves a connection accepted on `scheme` whose first frame after the
/// handshake (`hs`) was `BIND`: attaches it to its session, or refuses it.
pub(super) async fn accept_lane(
    inner: Arc<NodeInner>,
    scheme: String,
    link: Link,
    hs: Verified,
    (session, lane, candidate): (u64, u8, u8),
) {
    let deadline = Instant::now() + inner.config.connect_timeout;
    let outcome = wait_for_session(&inner, session, hs.node, deadline).await;
    let outcome = outcome.and_then(|()| match Lane::from_index(lane.into()) {
        Some(l) if usize::from(candidate) < MAX_CANDIDATES => Ok(l),
        _ => Err(BindRefused::BadLane { lane, candidate }),
    });
    let lane_of = match outcome {
        Ok(l) => l,
        Err(why) => {
            tracing::warn!(target: "plexus::remote", peer = %link.peer(), node = %hs.node, "refused a lane connection: {why}");
            let reject = WireFrame::Reject {
                code: RejectCode::Session,
                detail: why.to_string(),
            };
            let _ = link.send(reject.encode()).await;
            link.close();
            let _ = tokio::time::timeout(Duration::from_secs(1), link.closed()).await;
            return;
        }
    };
    let echo = WireFrame::Bind {
        session,
        lane,
        candidate,
    };
    // Attached before the echo leaves, under the binding's lock: the
    // dialler sends `LANES` once every echo came, and the primary link's
    // task, taking the bound connections under the same lock, must find
    // this one there.
    let mut binding = lock(&inner.binding);
    let refused = match binding.get_mut(&session) {
        Some(b)
            if b.links.len() < MAX_BOUND
                && !b
                    .links
                    .iter()
                    .any(|l| (l.lane, l.candidate) == (lane_of, candidate)) =>
        {
            // A fresh link's queue has room; it fails only once closed.
            if link.try_send(echo.encode()).is_err() {
                return;
            }
            b.links.push(BoundLink {
                lane: lane_of,
                candidate,
                scheme,
                link,
            });
            return;
        }
        _ => link,
    };
    drop(binding);
    tracing::warn!(target: "plexus::remote", peer = %refused.peer(), node = %hs.node, "refused a lane connection: its session ended, or it bound the same lane twice");
    refused.close();
}

/// Waits until session `session` is being set up (its primary link's
/// handshake may finish after the lane's), and checks it is `node`'s.
async fn wait_for_session(
    inner: &NodeInner,
    session: u64,
    node: plexus_core::NodeId,
    deadline: Instant,
) -> Result<(), BindRefused> {
    loop {
        let started = inner.binding_started.notified();
        tokio::pin!(started);
        started.as_mut().enable();
        if let Some(b) = lock(&inner.binding).get(&session) {
            return if b.node == node {
                Ok(())
            } else {
                Err(BindRefused::OtherNode {
                    session,
                    owner: b.node,
                    claimed: node,
                })
            };
        }
        if tokio::time::timeout_at(deadline, started).await.is_err() {
            return Err(BindRefused::NoSession(session));
        }
    }
}
