//! The handshake: protocol version, node ids, the cluster cookie, and
//! capabilities, as a sans-IO state machine.
//!
//! Both sides send [`Hello`] at once. On the peer's `HELLO` a side checks
//! the version and node id and answers with `AUTH`: a keyed BLAKE3 hash of
//! the peer's fresh nonce and both node ids, keyed by the hash of the
//! cookie. The cookie itself never crosses the wire, a proof cannot be
//! replayed to another connection (fresh nonce), and proofs are compared in
//! constant time (`blake3::Hash` equality). A failure is sent to the peer as
//! `REJECT` with the reason, so both sides report what did not match.
//!
//! On links whose transport authenticates the peer (TLS), the node id in
//! the peer's `HELLO` must also be the one its certificate certifies
//! ([`Handshake::certified_peer`]); otherwise the handshake fails with
//! [`HandshakeError::IdentityMismatch`] and `REJECT` code `Identity`.
//!
//! Driver order: send [`Handshake::hello`], then feed every received frame
//! to [`Handshake::handle_frame`], send what it returns, until it reports
//! the peer (done) or an error (send the `REJECT` it gives, then close).

use plexus_core::NodeId;

use crate::wire::{capabilities, Hello, RejectCode, WireError, WireFrame, PROTOCOL_VERSION};

/// The peer as the handshake verified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The peer's node id, proven by its cookie proof.
    pub node: NodeId,
    /// Capabilities both sides offer.
    pub capabilities: u64,
    /// URIs the peer listens on.
    pub listen: Vec<String>,
    /// The session both sides name in `BIND` to attach lane connections to
    /// this link: a hash of both fresh nonces, the same on both sides and
    /// new with every handshake.
    pub session: u64,
}

/// Why a handshake failed. Both sides of a failed handshake report it: the
/// side that found the mismatch directly, the other as [`Rejected`].
///
/// [`Rejected`]: HandshakeError::Rejected
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: we speak {ours}, the peer speaks {theirs}")]
    VersionMismatch {
        /// Ours.
        ours: u16,
        /// Theirs.
        theirs: u16,
    },
    /// The peer's proof does not match our cookie.
    #[error("cluster cookie mismatch")]
    CookieMismatch,
    /// The peer claims our own node id (a node connected to itself, or a
    /// clone).
    #[error("the peer claims our own node id {0}")]
    SameNode(NodeId),
    /// The node id the peer claims in `HELLO` is not the one its
    /// certificate certifies (the link's transport authenticated the
    /// certificate): a node impersonating another, or one whose actor
    /// system was not created with its certificate's id.
    #[error(
        "node identity mismatch: the peer claims node id {claimed}, but its certificate certifies {certified} (the first 12 hex digits; the last 4 are the incarnation)"
    )]
    IdentityMismatch {
        /// The id in the peer's `HELLO`.
        claimed: NodeId,
        /// The id part derived from the peer's certificate (incarnation
        /// bits 0).
        certified: NodeId,
    },
    /// The certificate the link's transport authenticated certifies no
    /// node id (it does not parse).
    #[error("the peer's certificate: {0}")]
    Certificate(#[from] crate::identity::IdentityError),
    /// The peer refused the handshake.
    #[error("refused by the peer: {detail}")]
    Rejected {
        /// The peer's reason code.
        code: RejectCode,
        /// The peer's words.
        detail: String,
    },
    /// The peer sent something other than the next handshake frame.
    #[error("protocol violation: {0}")]
    Protocol(#[from] HandshakeViolation),
}

/// How a peer broke the handshake's protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeViolation {
    /// A frame did not decode.
    #[error(transparent)]
    Malformed(#[from] WireError),
    /// A frame out of turn.
    #[error("unexpected {frame} while {expected}")]
    Unexpected {
        /// The frame's kind.
        frame: &'static str,
        /// What the handshake was waiting for.
        expected: &'static str,
    },
    /// A lane connection's listener is another node than the session's.
    #[error("the lane's listener {uri} is node {found}, not {expected}")]
    LaneOfAnotherNode {
        /// The listener's URI.
        uri: String,
        /// The node that answered there.
        found: NodeId,
        /// The session's node.
        expected: NodeId,
    },
}

impl HandshakeError {
    /// The `REJECT` frame that tells the peer about this failure, if it is
    /// ours to send.
    pub fn reject_frame(&self) -> Option<WireFrame> {
        let code = match self {
            Self::VersionMismatch { .. } => RejectCode::Version,
            Self::CookieMismatch => RejectCode::Cookie,
            Self::SameNode(_) => RejectCode::SameNode,
            Self::IdentityMismatch { .. } | Self::Certificate(_) => RejectCode::Identity,
            Self::Protocol(_) => RejectCode::Protocol,
            Self::Rejected { .. } => return None,
        };
        Some(WireFrame::Reject {
            code,
            detail: self.to_string(),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitAuth,
    Done,
    Failed,
}

/// One side of a handshake.
#[derive(Debug)]
pub struct Handshake {
    hello: Hello,
    key: [u8; 32],
    state: State,
    peer: Option<Hello>,
    certified: Option<NodeId>,
}

impl Handshake {
    /// Starts a handshake for `node` with a fresh random `nonce`.
    pub fn new(node: NodeId, cookie: &str, nonce: [u8; 16], listen: Vec<String>) -> Self {
        Self {
            hello: Hello {
                version: PROTOCOL_VERSION,
                node,
                nonce,
                capabilities: capabilities::ALL,
                listen,
            },
            key: *blake3::hash(cookie.as_bytes()).as_bytes(),
            state: State::AwaitHello,
            peer: None,
            certified: None,
        }
    }

    /// The node id the link's transport certified for the peer (from its
    /// TLS certificate; incarnation bits 0): the peer's `HELLO` must claim
    /// an id with this certified part (any incarnation), or the handshake
    /// fails with [`HandshakeError::IdentityMismatch`].
    /// Without it (tcp, udp, ...), the claimed id is taken on the cookie
    /// proof alone.
    pub fn certified_peer(mut self, node: NodeId) -> Self {
        self.certified = Some(node);
        self
    }

    /// Our `HELLO`, to send first.
    pub fn hello(&self) -> WireFrame {
        WireFrame::Hello(self.hello.clone())
    }

    /// Handles one received frame. Returns the frame to send in answer (if
    /// any) and, once the peer is proven, the peer.
    ///
    /// # Errors
    ///
    /// [`HandshakeError`]; send its [`reject_frame`](HandshakeError::reject_frame)
    /// and close the link.
    pub fn handle_frame(
        &mut self,
        frame: WireFrame,
    ) -> Result<(Option<WireFrame>, Option<Verified>), HandshakeError> {
        let result = self.step(frame);
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    fn step(
        &mut self,
        frame: WireFrame,
    ) -> Result<(Option<WireFrame>, Option<Verified>), HandshakeError> {
        match (self.state, frame) {
            (_, WireFrame::Reject { code, detail }) => {
                Err(HandshakeError::Rejected { code, detail })
            }
            (State::AwaitHello, WireFrame::Hello(peer)) => {
                if peer.version != PROTOCOL_VERSION {
                    return Err(HandshakeError::VersionMismatch {
                        ours: PROTOCOL_VERSION,
                        theirs: peer.version,
                    });
                }
                if let Some(certified) = self.certified {
                    let certifies =
                        crate::identity::certifies(certified.as_u64(), peer.node.as_u64());
                    if !certifies {
                        return Err(HandshakeError::IdentityMismatch {
                            claimed: peer.node,
                            certified,
                        });
                    }
                }
                if peer.node == self.hello.node {
                    return Err(HandshakeError::SameNode(peer.node));
                }
                let proof = self.proof(&peer.nonce, self.hello.node, peer.node);
                self.peer = Some(peer);
                self.state = State::AwaitAuth;
                Ok((Some(WireFrame::Auth { proof }), None))
            }
            (State::AwaitAuth, WireFrame::Auth { proof }) => {
                let Some(peer) = self.peer.take() else {
                    return Err(HandshakeViolation::Unexpected {
                        frame: "AUTH",
                        expected: "waiting for HELLO",
                    }
                    .into());
                };
                let expected =
                    blake3::Hash::from(self.proof(&self.hello.nonce, peer.node, self.hello.node));
                // `blake3::Hash` compares in constant time.
                if expected != blake3::Hash::from(proof) {
                    return Err(HandshakeError::CookieMismatch);
                }
                self.state = State::Done;
                let session = session_of(&self.hello.nonce, &peer.nonce);
                Ok((
                    None,
                    Some(Verified {
                        node: peer.node,
                        capabilities: peer.capabilities & self.hello.capabilities,
                        listen: peer.listen,
                        session,
                    }),
                ))
            }
            (state, frame) => Err(HandshakeViolation::Unexpected {
                frame: frame.name(),
                expected: match state {
                    State::AwaitHello => "waiting for HELLO",
                    State::AwaitAuth => "waiting for AUTH",
                    State::Done => "already connected",
                    State::Failed => "already failed",
                },
            }
            .into()),
        }
    }

    /// Proof that `prover` knows the cookie, for `verifier`'s `nonce`.
    fn proof(&self, nonce: &[u8; 16], prover: NodeId, verifier: NodeId) -> [u8; 32] {
        let mut data = [0u8; 32];
        data[..16].copy_from_slice(nonce);
        data[16..24].copy_from_slice(&prover.as_u64().to_le_bytes());
        data[24..].copy_from_slice(&verifier.as_u64().to_le_bytes());
        *blake3::keyed_hash(&self.key, &data).as_bytes()
    }
}

/// The session of a handshake with nonces `a` and `b` (in either order).
fn session_of(a: &[u8; 16], b: &[u8; 16]) -> u64 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = blake3::Hasher::new();
    h.update(b"plexus session");
    h.update(lo);
    h.update(hi);
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cookie_a: &str, cookie_b: &str) -> (Handshake, Handshake) {
        (
            Handshake::new(
                NodeId::from_u64(1),
                cookie_a,
                [1; 16],
                vec!["tcp://a".into()],
            ),
            Handshake::new(NodeId::from_u64(2), cookie_b, [2; 16], vec![]),
        )
    }

    /// Runs both sides to the end; returns each side's outcome.
    fn run(
        a: &mut Handshake,
        b: &mut Handshake,
    ) -> (
        Result<Verified, HandshakeError>,
        Result<Verified, HandshakeError>,
    ) {
        let mut to_a = vec![b.hello()];
        let mut to_b = vec![a.hello()];
        let (mut ra, mut rb) = (None, None);
        while ra.is_none() || rb.is_none() {
            let mut progressed = false;
            for f in std::mem::take(&mut to_a) {
                progressed = true;
                if ra.is_some() {
                    continue;
                }
                match a.handle_frame(f) {
                    Ok((reply, done)) => {
                        to_b.extend(reply);
                        ra = done.map(Ok);
                    }
                    Err(e) => {
                        to_b.extend(e.reject_frame());
                        ra = Some(Err(e));
                    }
                }
            }
            for f in std::mem::take(&mut to_b) {
                progressed = true;
                if rb.is_some() {
                    continue;
                }
                match b.handle_frame(f) {
                    Ok((reply, done)) => {
                        to_a.extend(reply);
                        rb = done.map(Ok);
                    }
                    Err(e) => {
                        to_a.extend(e.reject_frame());
                        rb = Some(Err(e));
                    }
                }
            }
            assert!(progressed, "handshake stalled");
        }
        (ra.unwrap(), rb.unwrap())
    }

    #[test]
    fn same_cookie_connects_and_learns_the_peer() {
        let (mut a, mut b) = pair("secret", "secret");
        let (ra, rb) = run(&mut a, &mut b);
        let pa = ra.unwrap();
        assert_eq!(pa.node, NodeId::from_u64(2));
        let pb = rb.unwrap();
        assert_eq!(pa.session, pb.session, "both sides name one session");
        assert_eq!(pb.node, NodeId::from_u64(1));
        assert_eq!(pb.listen, vec!["tcp://a".to_string()]);
    }

    #[test]
    fn cookie_mismatch_is_reported_on_both_sides() {
        let (mut a, mut b) = pair("secret", "other");
        let (ra, rb) = run(&mut a, &mut b);
        for r in [ra, rb] {
            let e = r.unwrap_err();
            assert!(e.to_string().contains("cluster cookie mismatch"), "{e}");
        }
    }

    #[test]
    fn version_mismatch_names_both_versions() {
        let (mut a, _) = pair("s", "s");
        let mut hello = match a.hello() {
            WireFrame::Hello(h) => h,
            _ => unreachable!(),
        };
        hello.version = 99;
        hello.node = NodeId::from_u64(5);
        let e = a.handle_frame(WireFrame::Hello(hello)).unwrap_err();
        assert_eq!(
            e,
            HandshakeError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: 99
            }
        );
        assert!(matches!(
            e.reject_frame(),
            Some(WireFrame::Reject {
                code: RejectCode::Version,
                ..
            })
        ));
    }

    #[test]
    fn a_replayed_proof_from_another_connection_fails() {
        // Record b's proof for nonce [1; 16]; replay it against a handshake
        // with a fresh nonce.
        let (mut a, mut b) = pair("secret", "secret");
        let (auth_from_b, _) = b.handle_frame(a.hello()).unwrap();
        let mut a2 = Handshake::new(NodeId::from_u64(1), "secret", [9; 16], vec![]);
        a2.handle_frame(b.hello()).unwrap();
        assert_eq!(
            a2.handle_frame(auth_from_b.unwrap()).unwrap_err(),
            HandshakeError::CookieMismatch
        );
        let _ = a.handle_frame(b.hello());
    }

    #[test]
    fn a_claimed_id_other_than_the_certified_one_is_refused_on_both_sides() {
        // b claims node 2, but its certificate certifies the ids
        // 0000000000070000 to ...7ffff (another certified part).
        let (a, mut b) = pair("secret", "secret");
        let mut a = a.certified_peer(NodeId::from_u64(0x7_0000));
        let (ra, rb) = run(&mut a, &mut b);
        let mismatch = HandshakeError::IdentityMismatch {
            claimed: NodeId::from_u64(2),
            certified: NodeId::from_u64(0x7_0000),
        };
        assert_eq!(ra.unwrap_err(), mismatch);
        match rb.unwrap_err() {
            HandshakeError::Rejected { code, detail } => {
                assert_eq!(code, RejectCode::Identity);
                assert!(detail.contains("node identity mismatch"), "{detail}");
                assert!(detail.contains("0000000000070000"), "{detail}");
            }
            e => panic!("expected Rejected, got {e:?}"),
        }
    }

    #[test]
    fn the_certified_part_with_any_incarnation_connects() {
        // Nodes 1 and 2: certified part 0, incarnations 1 and 2.
        let (a, b) = pair("secret", "secret");
        let mut a = a.certified_peer(NodeId::from_u64(0));
        let mut b = b.certified_peer(NodeId::from_u64(0));
        let (ra, rb) = run(&mut a, &mut b);
        assert_eq!(ra.unwrap().node, NodeId::from_u64(2));
        assert_eq!(rb.unwrap().node, NodeId::from_u64(1));
    }

    #[test]
    fn messages_before_the_handshake_and_self_connections_are_refused() {
        let (mut a, _) = pair("s", "s");
        let e = a
            .handle_frame(WireFrame::Goodbye {
                code: crate::wire::GoodbyeCode::Shutdown,
            })
            .unwrap_err();
        assert!(matches!(e, HandshakeError::Protocol(_)), "{e}");
        let (mut a, _) = pair("s", "s");
        let own = a.hello();
        assert_eq!(
            a.handle_frame(own).unwrap_err(),
            HandshakeError::SameNode(NodeId::from_u64(1))
        );
    }
}
