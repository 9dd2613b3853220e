//! A link's life once it is connected: the handshake, attaching the link
//! to the node's peer for that node and scheme (settling duplicate links),
//! and the reader that dispatches its frames until it goes down.

use super::adaptive::AdaptiveLane;
use super::links::{BoundLink, LaneLink, LaneRoute};
use super::session::Attached;
use super::*;

/// How long a refused link may take to deliver its REJECT.
const REJECT_LINGER: Duration = Duration::from_secs(1);

/// Runs the handshake on a fresh link.
pub(super) async fn handshake_on(
    inner: &Arc<NodeInner>,
    link: &mut Link,
) -> Result<handshake::Verified, LinkError> {
    let mut nonce = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut nonce);
    let mut hs = Handshake::new(inner.id, &inner.config.cookie, nonce, inner.listen_uris());
    let certified = crate::identity::certified_peer(link.peer_identity())
        .map_err(|e| LinkError::Handshake(e.into()))?;
    if let Some(certified) = certified {
        hs = hs.certified_peer(NodeId::from_u64(certified));
    }
    link.send(hs.hello().encode()).await?;
    loop {
        let bytes = link.recv_message().await?;
        let frame = match WireFrame::decode(bytes) {
            Ok(f) => f,
            Err(e) => {
                let err = handshake::HandshakeError::from(handshake::HandshakeViolation::from(e));
                if let Some(r) = err.reject_frame() {
                    let _ = link.send(r.encode()).await;
                }
                return Err(err.into());
            }
        };
        match hs.handle_frame(frame) {
            Ok((reply, done)) => {
                if let Some(r) = reply {
                    link.send(r.encode()).await?;
                }
                if let Some(peer) = done {
                    return Ok(peer);
                }
            }
            Err(e) => {
                if let Some(r) = e.reject_frame() {
                    let _ = link.send(r.encode()).await;
                }
                // A graceful close sends the REJECT before the link ends;
                // a peer that does not take it costs at most the linger.
                link.close();
                let _ = tokio::time::timeout(REJECT_LINGER, link.closed()).await;
                return Err(e.into());
            }
        }
    }
}

/// Serves an accepted link: handshake, then as a peer.
pub(crate) async fn accept(inner: Arc<NodeInner>, scheme: String, mut link: Link) {
    let timeout = inner.config.connect_timeout;
    let hs = match tokio::time::timeout(timeout, handshake_on(&inner, &mut link)).await {
        Ok(Ok(hs)) => hs,
        Ok(Err(e)) => {
            tracing::warn!(target: "plexus::remote", peer = %link.peer(), "refused a connection: handshake failed: {e}");
            link.close();
            return;
        }
        Err(_) => {
            tracing::warn!(target: "plexus::remote", peer = %link.peer(), "refused a connection: no handshake within {timeout:?}");
            link.close();
            return;
        }
    };
    // The dialler's first frame says what the link is: a session's
    // primary link (`LANES`, once its lane connections are bound) or a
    // lane connection (`BIND`). The dialler binds its lane connections
    // within a connect timeout after its handshake, then sends `LANES`:
    // wait twice that, for the handshakes' skew and the way here.
    bind::start_binding(&inner, &hs);
    let first_within = 2 * timeout;
    let first = tokio::time::timeout(first_within, link.recv_message()).await;
    let mut lanes = bind::take_bound(&inner, hs.session);
    let refuse = |lanes: Vec<BoundLink>, link: &Link, why: &str| {
        tracing::warn!(target: "plexus::remote", peer = %link.peer(), node = %hs.node, "refused a connection: {why}");
        link.close();
        for l in lanes {
            l.link.close();
        }
    };
    match first.map(|r| r.map(WireFrame::decode)) {
        Ok(Ok(Ok(WireFrame::Lanes { bound }))) => {
            // Exactly the connections the dialler says it bound.
            let expected = |l: &BoundLink| bound.contains(&(l.lane.index() as u8, l.candidate));
            let (kept, extra): (Vec<_>, Vec<_>) = lanes.drain(..).partition(expected);
            for l in extra {
                l.link.close();
            }
            if kept.len() != bound.len() {
                return refuse(
                    kept,
                    &link,
                    "LANES names lane connections that were not bound",
                );
            }
            lanes = kept;
        }
        Ok(Ok(Ok(WireFrame::Bind {
            session,
            lane,
            candidate,
        }))) => {
            refuse_all(lanes);
            bind::accept_lane(inner, scheme, link, hs, (session, lane, candidate)).await;
            return;
        }
        Ok(Ok(Ok(other))) => {
            return refuse(
                lanes,
                &link,
                &format!("expected LANES or BIND, got {other:?}"),
            )
        }
        Ok(Ok(Err(e))) => return refuse(lanes, &link, &format!("protocol error: {e}")),
        Ok(Err(closed)) => return refuse(lanes, &link, &closed.to_string()),
        Err(_) => {
            return refuse(
                lanes,
                &link,
                &format!("no LANES or BIND within {first_within:?}"),
            )
        }
    }
    let dial = hs
        .listen
        .iter()
        .find_map(|u| u.strip_prefix(&format!("{scheme}://")).map(str::to_owned));
    let peer = {
        let mut peers = lock(&inner.peers);
        peers
            .by_node
            .entry((hs.node, scheme.clone()))
            .or_insert_with(|| Peer::new(&inner, &scheme, dial.clone()))
            .clone()
    };
    if lock(&peer.dial).is_none() {
        *lock(&peer.dial) = dial;
    }
    let dialer = hs.node;
    established(&inner, Some(peer), link, lanes, hs, dialer);
}

/// The session's links: the primary one and each lane's (one, or several
/// candidates of an adaptive lane, in candidate order).
fn session_links(
    inner: &NodeInner,
    primary: plexus_transport::LinkSender,
    mut lanes: Vec<BoundLink>,
) -> (SessionLinks, Vec<plexus_transport::LinkReceiver>) {
    let mut links = SessionLinks::new(primary);
    let mut receivers = Vec::with_capacity(lanes.len());
    let mut by_lane: [Vec<LaneLink>; Lane::COUNT] = Default::default();
    lanes.sort_by_key(|l| (l.lane, l.candidate));
    for bound in lanes {
        let (tx, rx) = bound.link.split();
        let guarantees = inner.scheme_guarantees(&bound.scheme);
        by_lane[bound.lane.index()].push(LaneLink {
            scheme: bound.scheme,
            sender: tx,
            guarantees,
        });
        receivers.push(rx);
    }
    for (lane, mut candidates) in Lane::ALL.into_iter().zip(by_lane) {
        let route = match candidates.len() {
            0 => continue,
            1 => LaneRoute::Own(candidates.remove(0)),
            _ => LaneRoute::Adaptive(AdaptiveLane::new(
                lane,
                candidates,
                std::time::Instant::now(),
            )),
        };
        links = links.with_lane(lane, route);
    }
    (links, receivers)
}

/// Feeds the session's adaptive lanes' selectors every
/// [`SAMPLE_EVERY`](super::adaptive::SAMPLE_EVERY) until the session's
/// primary link closes.
fn spawn_sampler(links: &SessionLinks) {
    let adaptive: Vec<_> = links.adaptive().cloned().collect();
    if adaptive.is_empty() {
        return;
    }
    let primary = links.primary().clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(super::adaptive::SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = primary.closed() => return,
                _ = tick.tick() => {
                    let now = std::time::Instant::now();
                    for lane in &adaptive {
                        lane.sample(now);
                    }
                }
            }
        }
    });
}

/// The next item `rx` received: from `batch`, refilled when empty.
async fn next_received(
    rx: &mut plexus_transport::LinkReceiver,
    batch: &mut VecDeque<Received>,
) -> Result<Received, CloseCause> {
    loop {
        if let Some(item) = batch.pop_front() {
            return Ok(item);
        }
        rx.recv_batch(batch)
            .await
            .map_err(|closed| match closed.reason {
                plexus_transport::CloseReason::IdleTimeout(after) => CloseCause::Idle(after),
                reason => CloseCause::Transport(reason),
            })?;
    }
}

/// Closes lane connections bound to a link that turned out not to be a
/// session's primary one (none are, in a well-behaved peer).
fn refuse_all(lanes: Vec<BoundLink>) {
    for l in lanes {
        l.link.close();
    }
}

/// A handshake completed on `link` (dialled by `dialed_by`): attach it to
/// the node's peer for that node and scheme, and start reading.
pub(super) fn established(
    inner: &Arc<NodeInner>,
    via: Option<Arc<Peer>>,
    link: Link,
    lanes: Vec<BoundLink>,
    hs: handshake::Verified,
    dialed_by: NodeId,
) {
    let via = via.expect("established is called with the peer that made the link");
    let scheme = via.scheme.clone();
    // Find or become the canonical peer for this node and scheme.
    let canonical = {
        let mut peers = lock(&inner.peers);
        let key = (hs.node, scheme.clone());
        match peers.by_node.get(&key) {
            Some(p) if !Arc::ptr_eq(p, &via) => p.clone(),
            _ => {
                peers.by_node.insert(key, via.clone());
                via.clone()
            }
        }
    };
    if !Arc::ptr_eq(&canonical, &via) {
        // Hand what waited on `via` to the canonical peer. One lock at a
        // time: `via`'s state moves through a fresh one.
        let mut moving = Session::new(inner.id, Peer::backoff(inner));
        via.step(|st, _| st.forward_into(&mut moving));
        let _ = via.forward.set(canonical.clone());
        canonical.step(|st, _| moving.forward_into(st));
        if lock(&canonical.dial).is_none() {
            *lock(&canonical.dial) = lock(&via.dial).clone();
        }
    }
    canonical.attach(inner, link, lanes, hs, dialed_by);
}

impl Peer {
    fn attach(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        link: Link,
        lanes: Vec<BoundLink>,
        hs: handshake::Verified,
        dialed_by: NodeId,
    ) {
        let (primary, receiver) = link.split();
        let (sender, lane_receivers) = session_links(inner, primary, lanes);
        let sender = Arc::new(sender);
        // Under the session's lock: the frames held for the link go out on
        // it before the step's mirror publishes it for the lock-free sends,
        // so nothing sent meanwhile overtakes them.
        let attached = self.step(|st, _| {
            let before = st.remote;
            let attached = st.attach(sender.clone(), hs.node, dialed_by);
            match attached {
                Attached::Duplicate {
                    refused,
                    draining_epoch,
                    pending,
                    waiters,
                } => {
                    // Keep the link dialled by the lower node id. What
                    // waited for a link (handed over from a forwarding
                    // peer) goes out on the kept one.
                    if let Some(kept) = st.sender() {
                        flush(inner, kept, pending, hs.node);
                    }
                    Err((refused, draining_epoch, waiters))
                }
                Attached::Up {
                    epoch,
                    pending,
                    waiters,
                    replaced,
                    node_changed,
                } => {
                    self.remote_node.store(hs.node.as_u64(), Ordering::Release);
                    if node_changed {
                        tracing::info!(target: "plexus::remote", new = %hs.node, "a different node answers at this address");
                        // Asks of the old node cannot be answered: their
                        // requests, if still held, are not sent to the new
                        // one. After the store above: an asker woken here
                        // sees the old node's refs dead.
                        if let Some(old) = before {
                            inner.fail_replies_of(
                                old,
                                &LinkCause::new(LinkError::Restarted { old, new: hs.node }),
                            );
                        }
                    }
                    flush(inner, &sender, pending, hs.node);
                    Ok((epoch, waiters, replaced))
                }
            }
        });
        let (epoch, waiters) = match attached {
            Err((refused, draining_epoch, waiters)) => {
                // The peer may have sent on the refused link already: keep
                // reading it until the peer, told by GOODBYE, closes it.
                for w in waiters {
                    let _ = w.send(Ok(hs.node));
                }
                let _ = refused.try_send(
                    WireFrame::Goodbye {
                        code: GoodbyeCode::Duplicate,
                    }
                    .encode(),
                );
                drop(refused);
                self.spawn_lane_readers(inner, lane_receivers, &sender, draining_epoch, hs.node);
                let peer = self.clone();
                let inner = inner.clone();
                tokio::spawn(async move {
                    peer.read(inner, receiver, sender, draining_epoch, hs.node)
                        .await
                });
                return;
            }
            Ok((epoch, waiters, replaced)) => {
                // A replaced link is retired like a refused one:
                // GOODBYE(duplicate) tells the peer, which may still use
                // it, that the other link is coming (a silent close would
                // look like a lost node there). Our reader keeps draining
                // what the peer sent on it.
                // As the links' last frame: a send racing this on the old
                // links (taken before the new ones were published) gets
                // its frame back and goes out on the new ones, instead of
                // being queued behind a GOODBYE the peer closes on.
                if let Some(old) = replaced {
                    let _ = old.try_send_last(
                        WireFrame::Goodbye {
                            code: GoodbyeCode::Duplicate,
                        }
                        .encode(),
                    );
                }
                (epoch, waiters)
            }
        };
        for w in waiters {
            let _ = w.send(Ok(hs.node));
        }
        tracing::debug!(target: "plexus::remote", node = %inner.id, peer = %hs.node, scheme = %self.scheme, "link up");
        spawn_sampler(&sender);
        let mut receiver = receiver;
        receiver.receive_on_driver(Box::new(self.driver_dispatch(inner, hs.node)));
        self.spawn_lane_readers(inner, lane_receivers, &sender, epoch, hs.node);
        let peer = self.clone();
        let inner = inner.clone();
        tokio::spawn(async move { peer.read(inner, receiver, sender, epoch, hs.node).await });
    }

    fn driver_dispatch(self: &Arc<Self>, inner: &Arc<NodeInner>, remote: NodeId) -> DriverDispatch {
        DriverDispatch {
            peer: self.clone(),
            inner: inner.clone(),
            remote,
            reading: Reading::default(),
            flooded: None,
        }
    }

    /// Starts reading the lane connections of a session: their frames are
    /// dispatched like the primary link's; when one ends, the session ends
    /// (its links are closed, and the primary link's reader reports why).
    fn spawn_lane_readers(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        receivers: Vec<plexus_transport::LinkReceiver>,
        links: &SessionLinks,
        epoch: u64,
        remote: NodeId,
    ) {
        for mut rx in receivers {
            rx.receive_on_driver(Box::new(self.driver_dispatch(inner, remote)));
            let peer = self.clone();
            let inner = inner.clone();
            let links = links.clone();
            tokio::spawn(async move {
                let cause = peer.read_lane(&inner, rx, remote).await;
                tracing::info!(target: "plexus::remote", peer = %remote, epoch, "a lane connection ended ({cause}); closing the session");
                links.close();
            });
        }
    }

    /// Reads a lane connection until it ends; returns why.
    async fn read_lane(
        self: &Arc<Self>,
        inner: &Arc<NodeInner>,
        mut rx: plexus_transport::LinkReceiver,
        remote: NodeId,
    ) -> CloseCause {
        let mut reading = Reading::default();
        let mut batch = VecDeque::with_capacity(256);
        loop {
            let item = match next_received(&mut rx, &mut batch).await {
                Ok(item) => item,
                Err(cause) => return cause,
            };
            match item {
                Received::Message(bytes) => {
                    match self.dispatch_run(inner, remote, bytes, &mut batch, &mut reading) {
                        Ok(taken) => {
                            if let Some(target) = reading.flooded_after(taken) {
                                wait_drained(&target).await;
                            }
                        }
                        Err(cause) => return cause,
                    }
                }
                Received::Event(LinkEvent::Unreachable { phi }) => {
                    return CloseCause::Unreachable { phi }
                }
                Received::Event(_) => {}
            }
        }
    }

    async fn read(
        self: Arc<Self>,
        inner: Arc<NodeInner>,
        mut rx: plexus_transport::LinkReceiver,
        links: Arc<SessionLinks>,
        epoch: u64,
        remote: NodeId,
    ) {
        let _release = ImportRelease(self.clone());
        let mut reading = Reading::default();
        // Everything received so far, taken in one go: consecutive messages
        // to one actor are delivered together (`dispatch_run`).
        let mut batch = VecDeque::with_capacity(256);
        let cause = 'read: loop {
            let item = match next_received(&mut rx, &mut batch).await {
                Ok(item) => item,
                Err(cause) => break cause,
            };
            match item {
                Received::Message(bytes) => {
                    let taken = self.dispatch_run(&inner, remote, bytes, &mut batch, &mut reading);
                    if let Err(cause) = taken {
                        // A goodbye is the peer's orderly leave; anything
                        // else it sent that ends the link is a fault.
                        if matches!(cause, CloseCause::Goodbye(_)) {
                            tracing::info!(target: "plexus::remote", peer = %remote, "closing the link: {cause}");
                        } else {
                            tracing::warn!(target: "plexus::remote", peer = %remote, "closing the link: {cause}");
                        }
                        self.close_link(epoch);
                        if matches!(cause, CloseCause::Goodbye(_)) {
                            // On a link with several strands (quic), frames
                            // sent before the GOODBYE may still be on their
                            // way on other strands: take them until the peer
                            // closes.
                            let drain = async {
                                loop {
                                    while let Some(r) = batch.pop_front() {
                                        if let Received::Message(bytes) = r {
                                            let _ =
                                                self.dispatch(&inner, remote, bytes, &mut reading);
                                        }
                                    }
                                    if rx.recv_batch(&mut batch).await.is_err() {
                                        break;
                                    }
                                }
                            };
                            let _ = tokio::time::timeout(inner.config.connect_timeout, drain).await;
                        }
                        break 'read cause;
                    }
                    if let Some(target) = reading.flooded_after(taken.unwrap_or(1)) {
                        wait_drained(&target).await;
                    }
                }
                Received::Event(LinkEvent::Unreachable { phi }) => {
                    self.close_link(epoch);
                    break CloseCause::Unreachable { phi };
                }
                Received::Event(event) => {
                    tracing::debug!(target: "plexus::remote", peer = %remote, ?event, "link event");
                }
            }
        };
        // With the receiver goes its driver-side handler: nothing of this link
        // reaches an actor after it is declared down. The session's lane
        // connections end with it.
        drop(rx);
        links.close();
        if cause.is_duplicate() {
            self.superseded(&inner, epoch);
        } else {
            self.link_down(epoch, &cause);
        }
    }

    /// The peer closed our current link as the duplicate of one it dialled:
    /// that link is about to come up here. Hold what is sent meanwhile (as
    /// while connecting) and keep every pending request, which the peer
    /// answers over the surviving link; give up if it never comes.
    fn superseded(self: &Arc<Self>, inner: &Arc<NodeInner>, epoch: u64) {
        // The wait's deadline is the session's timer: the driver's step
        // arms it, and its timeout gives up (`SessionEvent::GaveUp`).
        let timeout = inner.config.connect_timeout;
        self.step(|st, now| st.superseded(epoch, now, timeout));
    }

    fn close_link(&self, epoch: u64) {
        self.session.read(|st| {
            if let Phase::Up {
                sender, epoch: e, ..
            } = &st.phase
            {
                if *e == epoch {
                    sender.close();
                }
            }
        });
    }
}
