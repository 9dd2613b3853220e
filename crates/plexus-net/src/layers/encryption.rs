//! `encryption`: authenticated encryption per datagram ("object security").
//!
//! **Guarantee.** A message handed up was sent by a holder of the pre-shared
//! key, in this session, and is handed up at most once: a datagram that
//! fails authentication (tampered, forged, wrong key) or repeats a nonce
//! (replayed, duplicated by the network) or is older than the replay window
//! is dropped, counted ([`StackStats::dropped`](crate::StackStats::dropped)
//! and [`EncryptionStats`]) and logged at debug, never handed up. Loss and
//! reordering do not break decryption: each datagram carries its own nonce.
//! The layer adds no reliability: put `delivery` (and `ordering`) above it,
//! as in `udp / slicing / encryption(psk=...) / delivery / ordering`.
//!
//! **Handshake.** `Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s` (Noise rev. 34,
//! sec. 9: a PSK mixed in before the first message, so the responder
//! authenticates the initiator's first message before keeping any state)
//! with the prologue [`PROLOGUE`]. Its `Split()` (sec. 5.2) gives one key per
//! direction. The handshake messages are datagrams of this layer, sent down
//! like data:
//!
//! * The side that sends first initiates. Messages sent before the session
//!   is up wait in a bounded queue (`pending` messages, `pending_bytes`);
//!   beyond it [`Layer::can_send`] is false and the stack refuses sends with
//!   `WouldBlock`, then raises `SendReady` once the session is up.
//! * The initiator retransmits its first message, byte for byte, every
//!   `handshake_rto` (doubling, at most 2 s) until answered; after
//!   `handshake_timeout` it closes the link with
//!   [`EncryptionError::HandshakeTimeout`] (unreachable peer, or a peer whose
//!   key differs: a responder silently drops first messages that fail
//!   authentication, as it cannot tell a wrong key from a forgery).
//! * The responder answers a repeated first message with its cached answer,
//!   so a lost answer costs one retransmission and no new keys.
//! * Both sides initiating at once: the initiation with the lower ephemeral
//!   public key (bytewise) wins; the other side drops its own and answers.
//!   Each side sees both keys, so both pick the same winner.
//! * Once up, a session stays up: a first message that is not a repeat of
//!   the one that made the session is dropped
//!   ([`EncryptionError::UnexpectedHandshake`]), so a replayed old
//!   handshake cannot reset a link. No rekeying: a restarted peer needs a
//!   new link.
//!
//! **Data.** ChaCha20-Poly1305 (RFC 8439) under the direction's key, with
//! the 96-bit nonce `0^32 || le64(n)` of Noise sec. 12.3 and the 9-byte
//! header as associated data. `n` counts datagrams per direction from 0 and
//! is never reused. At `n = 2^64 - 1` (reserved by Noise sec. 5.1) the
//! session is used up: the link closes with
//! [`EncryptionError::NonceExhausted`] (at a million datagrams a second, after
//! 584 000 years).
//!
//! **Replay protection.** A sliding window of [`REPLAY_WINDOW`] nonces below
//! the highest accepted one (RFC 4303 sec. 3.4.3, bitmap ring of RFC 6479):
//! a nonce already accepted, or below the window, is dropped before
//! decryption; the window only moves after a datagram authenticated.
//!
//! **Wire format** (all integers big-endian):
//!
//! ```text
//!  handshake, initiator -> responder   49 bytes
//!  ┌──────┬───────────────────────┬────────────────┐
//!  │ 0x01 │ ephemeral key (32)    │ tag (16)       │   Noise message 1: psk, e
//!  └──────┴───────────────────────┴────────────────┘
//!  handshake, responder -> initiator   49 bytes
//!  ┌──────┬───────────────────────┬────────────────┐
//!  │ 0x02 │ ephemeral key (32)    │ tag (16)       │   Noise message 2: e, ee
//!  └──────┴───────────────────────┴────────────────┘
//!  data                                25 bytes + message
//!  ┌──────┬──────────────┬───────────────────────────┬──────────┐
//!  │ 0x03 │ nonce n (u64)│ ciphertext (message len)  │ tag (16) │
//!  └──────┴──────────────┴───────────────────────────┴──────────┘
//!    associated data = the first 9 bytes
//! ```
//!
//! **Memory.** Per link: the pending queue (bounded above), the replay
//! bitmap (256 bytes), two cached handshake messages (98 bytes) and the
//! keys. Refused input allocates nothing that outlives the call.
//!
//! **Spec options.** `encryption(psk=<64 hex digits>, psk_env=NAME,
//! handshake_rto=200ms, handshake_timeout=10s, pending=256,
//! pending_bytes=4MiB, danger_seed=N)`. Exactly one of `psk` and `psk_env`
//! is required: a stack spec without a key does not parse. The spec grammar
//! allows no `/` in values, so a key file is read by the program and passed
//! as an environment variable or through [`EncryptionConfig::with_psk`].

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
// Per-datagram sealing uses ring's ChaCha20-Poly1305 (assembly back ends):
// about 3× faster per small datagram here than the `chacha20poly1305`
// crate, whose AVX2 code is not inlined without `-C target-feature=+avx2`.
// The handshake (snow) keeps its own cipher.
use rand::{RngCore, SeedableRng};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

use crate::error::{LinkError, ReceiveError, StackSendError};
use crate::frame::Frame;
use crate::layer::{Interface, Layer, LinkContext, Output};
use crate::options::{LayerOptions, OptionError};
use crate::registry::LayerConfig;

mod replay;

pub use replay::{ReplayWindow, Verdict, REPLAY_WINDOW};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// The Noise prologue: binds the handshake to this layer and wire version.
pub const PROLOGUE: &[u8] = b"plexus-net encryption v1";
/// First byte of the initiator's handshake message.
pub const KIND_INIT: u8 = 0x01;
/// First byte of the responder's handshake message.
pub const KIND_RESP: u8 = 0x02;
/// First byte of a data datagram.
pub const KIND_DATA: u8 = 0x03;
/// Length of a handshake datagram (kind, ephemeral key, tag).
pub const HANDSHAKE_LEN: usize = 1 + 32 + TAG_LEN;
/// Length of the data header (kind, nonce), the associated data.
pub const DATA_HEADER_LEN: usize = 1 + 8;
/// Length of the Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Bytes a data datagram adds to its message.
pub const OVERHEAD: usize = DATA_HEADER_LEN + TAG_LEN;
/// Nonces a session may use: `0 ..= MAX_NONCE` (Noise sec. 5.1 reserves
/// `2^64 - 1`).
pub const MAX_NONCE: u64 = u64::MAX - 1;
/// Longest handshake retransmission interval.
const MAX_HANDSHAKE_RTO: Duration = Duration::from_secs(2);

/// Configuration of the `encryption` layer. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptionConfig {
    /// The 32-byte pre-shared key. Options `psk=<64 hex digits>` or
    /// `psk_env=NAME` (the variable holds 64 hex digits); required.
    pub psk: [u8; 32],
    /// First handshake retransmission interval, doubling up to 2 s. Option
    /// `handshake_rto`; default 200 ms.
    pub handshake_rto: Duration,
    /// How long the initiator waits for an answer before closing the link.
    /// Option `handshake_timeout`; default 10 s.
    pub handshake_timeout: Duration,
    /// Messages held while the handshake runs. Option `pending`; default 256.
    pub pending: usize,
    /// Bytes held while the handshake runs (soft: the last message accepted
    /// may overshoot). Option `pending_bytes`; default 4 MiB.
    pub pending_bytes: usize,
    /// **Danger**: seeds the ephemeral keys from this number (mixed with the
    /// link id) instead of the OS RNG, so a simulation replays exactly. Makes
    /// the keys predictable: tests only. Option `danger_seed`; default none.
    pub danger_seed: Option<u64>,
}

impl fmt::Debug for EncryptionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionConfig")
            .field("psk", &"<redacted>")
            .field("handshake_rto", &self.handshake_rto)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("pending", &self.pending)
            .field("pending_bytes", &self.pending_bytes)
            .field("danger_seed", &self.danger_seed)
            .finish()
    }
}

impl EncryptionConfig {
    /// The defaults with pre-shared key `psk`.
    pub fn with_psk(psk: [u8; 32]) -> Self {
        Self {
            psk,
            handshake_rto: Duration::from_millis(200),
            handshake_timeout: Duration::from_secs(10),
            pending: 256,
            pending_bytes: 4 << 20,
            danger_seed: None,
        }
    }
}

/// Parses 64 hex digits into a key.
fn parse_psk(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut key = [0; 32];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        key[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(key)
}

const KEY_EXPECTED: &str = "a 32-byte key as 64 hex digits";

impl LayerConfig for EncryptionConfig {
    const NAME: &'static str = "encryption";
    const INTERFACE: Interface = Interface::MESSAGE;

    fn from_options(options: &LayerOptions) -> Result<Self, OptionError> {
        let mut c = Self::with_psk([0; 32]);
        let mut keyed = false;
        for o in options.iter() {
            let invalid = |expected| OptionError::Invalid {
                key: o.key().to_owned(),
                value: if o.key() == "psk" {
                    "<redacted>".to_owned()
                } else {
                    o.value().to_owned()
                },
                expected,
            };
            match o.key() {
                "psk" if !keyed => {
                    c.psk = parse_psk(o.value()).ok_or_else(|| invalid(KEY_EXPECTED))?;
                    keyed = true;
                }
                "psk_env" if !keyed => {
                    let value = std::env::var(o.value()).unwrap_or_default();
                    c.psk = parse_psk(&value).ok_or_else(|| {
                        invalid("the name of a set environment variable holding 64 hex digits")
                    })?;
                    keyed = true;
                }
                "psk" | "psk_env" => return Err(invalid("given once: one of psk and psk_env")),
                "handshake_rto" => {
                    c.handshake_rto = o.duration()?.max(Duration::from_millis(1));
                }
                "handshake_timeout" => c.handshake_timeout = o.duration()?,
                "pending" => c.pending = o.count_usize()?.max(1),
                "pending_bytes" => c.pending_bytes = o.size()?.max(1),
                "danger_seed" => c.danger_seed = Some(o.count()?),
                _ => return Err(o.unknown()),
            }
        }
        if !keyed || c.psk == [0; 32] {
            // A missing or all-zero key is a configuration error, found when
            // the spec is parsed, before any link exists.
            return Err(OptionError::Invalid {
                key: "psk".to_owned(),
                value: String::new(),
                expected: "a 32-byte key (psk=<64 hex digits> or psk_env=NAME), not empty or zero",
            });
        }
        Ok(c)
    }

    fn build(&self, link: &LinkContext) -> Box<dyn Layer> {
        Box::new(Encryption::new(self.clone(), link))
    }
}

/// Input the encryption layer refuses, and why it closes a link. Dropped
/// input changes no state (the replay window moves only on authentic data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncryptionError {
    /// Shorter than its kind requires (or a handshake of the wrong length).
    /// Dropped.
    #[error("malformed datagram of {len} bytes")]
    Malformed {
        /// Received length.
        len: usize,
    },
    /// Unknown kind byte. Dropped.
    #[error("unknown datagram kind {kind:#04x}")]
    UnknownKind {
        /// The kind byte.
        kind: u8,
    },
    /// The tag did not verify: tampered, forged, or sealed with another key.
    /// Dropped.
    #[error("datagram {nonce} failed authentication (tampered or wrong key)")]
    BadTag {
        /// The nonce it claimed.
        nonce: u64,
    },
    /// The nonce was accepted before: a replay or a network duplicate.
    /// Dropped.
    #[error("datagram {nonce} replayed")]
    Replayed {
        /// The repeated nonce.
        nonce: u64,
    },
    /// The nonce is older than the replay window. Dropped.
    #[error("datagram {nonce} is stale: older than the replay window below {highest}")]
    Stale {
        /// The nonce.
        nonce: u64,
        /// The highest nonce accepted.
        highest: u64,
    },
    /// Data arrived before the session was up (the peer's handshake answer
    /// is still on its way, or was lost). Dropped; reliability above
    /// retransmits it.
    #[error("data before the handshake completed")]
    NotEstablished,
    /// A handshake message failed authentication: the peer's pre-shared key
    /// differs, or the message was tampered with. Dropped; no state kept.
    #[error("handshake message failed authentication: wrong pre-shared key or tampered")]
    HandshakeRejected,
    /// A first handshake message after the session is up that does not
    /// repeat the one that made it (an old one replayed, or a restarted
    /// peer). Dropped.
    #[error("handshake after the session was established")]
    UnexpectedHandshake,
    /// The initiator got no valid answer within `handshake_timeout`. Closes
    /// the link.
    #[error(
        "handshake not answered after {attempts} attempts in {waited_ms} ms: \
         peer unreachable or its pre-shared key differs"
    )]
    HandshakeTimeout {
        /// First messages sent.
        attempts: u32,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
        /// Answers received that failed authentication.
        rejected: u32,
    },
    /// Every nonce of the session was used (`2^64 - 1` datagrams). Closes
    /// the link; messages still queued are lost.
    #[error("nonce space of the session exhausted: the link must be re-established")]
    NonceExhausted,
    /// The crypto provider failed (e.g. the OS RNG). Closes the link.
    #[error("crypto failure: {reason}")]
    Crypto {
        /// The provider's message.
        reason: String,
    },
}

impl EncryptionError {
    /// Whether the link must be closed. Nothing received is fatal: a
    /// forgery must not be able to close a link.
    pub fn is_fatal(&self) -> bool {
        false
    }
}

/// Counters of one [`Encryption`] instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncryptionStats {
    /// Data datagrams sealed.
    pub sealed: u64,
    /// Data datagrams opened and handed up.
    pub opened: u64,
    /// Handshake messages sent (first sends, retransmissions, re-answers).
    pub handshake_sent: u64,
    /// Data dropped for a bad tag.
    pub bad_tag: u64,
    /// Data dropped as replayed.
    pub replayed: u64,
    /// Data dropped as older than the window.
    pub stale: u64,
    /// Datagrams dropped as malformed or of unknown kind.
    pub malformed: u64,
    /// Data dropped because the session was not up yet.
    pub not_established: u64,
    /// Handshake messages dropped: failed authentication or unexpected.
    pub handshake_rejected: u64,
}

/// A [`CryptoResolver`] that is snow's default one except for the RNG,
/// which is seeded (for `danger_seed`).
struct SeededResolver(u64);

struct SeededRng(rand::rngs::StdRng);

impl Random for SeededRng {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRng(rand::rngs::StdRng::seed_from_u64(
            self.0,
        ))))
    }
    fn resolve_dh(&self, choice: &snow::params::DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &snow::params::HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &snow::params::CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// The keys of an established session.
struct Session {
    seal: LessSafeKey,
    open: LessSafeKey,
    next_nonce: u64,
    window: ReplayWindow,
    /// The handshake exchange that made the session (first message, answer),
    /// to recognise repeats: a responder re-sends the answer, an initiator
    /// ignores a repeated answer.
    exchange: (Bytes, Bytes),
}

impl Session {
    /// Seals `frame` under the next nonce and pushes it down. Returns
    /// whether that was the last nonce of the session.
    fn seal(&mut self, frame: Frame, out: &mut Output) -> bool {
        let nonce = self.next_nonce;
        let mut buf = BytesMut::with_capacity(OVERHEAD + frame.len());
        buf.put_u8(KIND_DATA);
        buf.put_u64(nonce);
        frame.extend_into(&mut buf);
        let (header, body) = buf.split_at_mut(DATA_HEADER_LEN);
        // ChaCha20-Poly1305 refuses only messages over 256 GiB (RFC 8439
        // sec. 2.8), far beyond any frame.
        let tag = self
            .seal
            .seal_in_place_separate_tag(aead_nonce(nonce), Aad::from(&*header), body)
            .expect("frame within the AEAD length limit");
        buf.extend_from_slice(tag.as_ref());
        out.push_down(Frame::from_payload(buf.freeze()));
        self.next_nonce = nonce.saturating_add(1);
        nonce == MAX_NONCE
    }
}

enum State {
    /// Nothing sent or received yet.
    Idle,
    /// We sent the first message and wait for the answer.
    Initiating {
        handshake: Box<snow::HandshakeState>,
        message: Bytes,
        started: Instant,
        next_retry: Instant,
        rto: Duration,
        attempts: u32,
        rejected: u32,
    },
    Established(Box<Session>),
    Closed,
}

/// The Noise nonce of ChaChaPoly (Noise sec. 12.3): 32 zero bits, then the
/// counter little-endian.
fn aead_nonce(n: u64) -> Nonce {
    let mut bytes = [0; 12];
    bytes[4..].copy_from_slice(&n.to_le_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// A ChaCha20-Poly1305 key for one direction of a session.
fn aead_key(key: [u8; 32]) -> LessSafeKey {
    LessSafeKey::new(
        UnboundKey::new(&CHACHA20_POLY1305, &key).expect("ChaCha20-Poly1305 takes 32-byte keys"),
    )
}

/// The `encryption` layer. See the [module docs](self).
///
/// Driven like every [`Layer`]: `handle_send` seals (or queues while the
/// handshake runs), `handle_receive` opens or advances the handshake,
/// `handle_timeout` retransmits the first handshake message, `poll_timeout`
/// is the next retransmission.
pub struct Encryption {
    config: EncryptionConfig,
    /// Seed of the next ephemeral key when `danger_seed` is set.
    seed: Option<u64>,
    state: State,
    pending: VecDeque<Frame>,
    pending_len: usize,
    stats: EncryptionStats,
}

impl fmt::Debug for Encryption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle => "idle",
            State::Initiating { .. } => "initiating",
            State::Established(_) => "established",
            State::Closed => "closed",
        };
        f.debug_struct("Encryption")
            .field("state", &state)
            .field("pending", &self.pending.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Encryption {
    /// An encryption layer for one link.
    pub fn new(config: EncryptionConfig, link: &LinkContext) -> Self {
        let seed = config.danger_seed.map(|s| {
            s ^ link
                .link_id
                .wrapping_add(1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
        Self {
            config,
            seed,
            state: State::Idle,
            pending: VecDeque::new(),
            pending_len: 0,
            stats: EncryptionStats::default(),
        }
    }

    /// Counters of this instance.
    pub fn stats(&self) -> EncryptionStats {
        self.stats
    }

    /// Whether the session is up (data is sealed at once).
    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Established(_))
    }

    /// Messages waiting for the handshake.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn builder(&mut self) -> Result<snow::Builder<'_>, snow::Error> {
        let resolver: snow::resolvers::BoxedCryptoResolver = match &mut self.seed {
            Some(seed) => {
                *seed = seed.wrapping_add(1);
                Box::new(SeededResolver(*seed))
            }
            None => Box::new(DefaultResolver),
        };
        // A constant protocol name of primitives the enabled features provide.
        let params = NOISE_PARAMS.parse().expect("valid Noise protocol name");
        snow::Builder::with_resolver(params, resolver)
            .prologue(PROLOGUE)?
            .psk(0, &self.config.psk)
    }

    fn close(&mut self, error: EncryptionError, out: &mut Output) {
        tracing::debug!(target: "plexus::net", %error, "encryption closes the link");
        out.close(LinkError::Encryption(error));
        self.state = State::Closed;
        self.pending.clear();
        self.pending_len = 0;
    }

    /// Sends the first handshake message (we send first: we initiate).
    fn initiate(&mut self, now: Instant, out: &mut Output) {
        let started = self
            .builder()
            .and_then(|b| b.build_initiator())
            .and_then(|mut hs| {
                let mut message = [0; HANDSHAKE_LEN];
                message[0] = KIND_INIT;
                hs.write_message(&[], &mut message[1..])?;
                Ok((hs, message))
            });
        match started {
            Ok((handshake, message)) => {
                let message = Bytes::copy_from_slice(&message);
                out.push_down(Frame::from_payload(message.clone()));
                self.stats.handshake_sent += 1;
                self.state = State::Initiating {
                    handshake: Box::new(handshake),
                    message,
                    started: now,
                    next_retry: now + self.config.handshake_rto,
                    rto: self.config.handshake_rto,
                    attempts: 1,
                    rejected: 0,
                };
            }
            Err(e) => self.close(
                EncryptionError::Crypto {
                    reason: e.to_string(),
                },
                out,
            ),
        }
    }

    fn establish(
        &mut self,
        seal: [u8; 32],
        open: [u8; 32],
        exchange: (Bytes, Bytes),
        out: &mut Output,
    ) {
        let mut session = Session {
            seal: aead_key(seal),
            open: aead_key(open),
            next_nonce: 0,
            window: ReplayWindow::new(),
            exchange,
        };
        self.pending_len = 0;
        // At most `pending` datagrams from nonce 0: far from exhaustion.
        for frame in self.pending.drain(..) {
            session.seal(frame, out);
            self.stats.sealed += 1;
        }
        self.state = State::Established(Box::new(session));
    }

    fn on_init(&mut self, msg: Bytes, out: &mut Output) -> Result<(), EncryptionError> {
        match &self.state {
            State::Established(s) if s.exchange.0 == msg && s.exchange.1[0] == KIND_RESP => {
                // Our answer was lost: send it again, same keys.
                out.push_down(Frame::from_payload(s.exchange.1.clone()));
                self.stats.handshake_sent += 1;
                return Ok(());
            }
            State::Established(_) => return Err(EncryptionError::UnexpectedHandshake),
            State::Closed => return Ok(()),
            State::Initiating { message, .. } => {
                // Simultaneous initiation: the lower ephemeral key wins.
                if message[1..33] <= msg[1..33] {
                    tracing::trace!(target: "plexus::net", "simultaneous handshake: ours wins, theirs ignored");
                    return Ok(());
                }
            }
            State::Idle => {}
        }
        let answered = self
            .builder()
            .and_then(|b| b.build_responder())
            .and_then(|mut hs| {
                hs.read_message(&msg[1..], &mut [])?;
                let mut reply = [0; HANDSHAKE_LEN];
                reply[0] = KIND_RESP;
                hs.write_message(&[], &mut reply[1..])?;
                Ok((hs, reply))
            });
        let (mut hs, reply) = match answered {
            Ok(done) => done,
            Err(snow::Error::Decrypt) => return Err(EncryptionError::HandshakeRejected),
            Err(e) => {
                return Err(EncryptionError::Crypto {
                    reason: e.to_string(),
                })
            }
        };
        let reply = Bytes::copy_from_slice(&reply);
        out.push_down(Frame::from_payload(reply.clone()));
        self.stats.handshake_sent += 1;
        // Split(): the first key seals initiator -> responder.
        let (i2r, r2i) = hs.dangerously_get_raw_split();
        self.establish(r2i, i2r, (msg, reply), out);
        Ok(())
    }

    fn on_resp(&mut self, msg: Bytes, out: &mut Output) -> Result<(), EncryptionError> {
        let State::Initiating {
            handshake,
            message,
            rejected,
            ..
        } = &mut self.state
        else {
            return match &self.state {
                // A network duplicate or a re-answer of our retransmission.
                State::Established(s) if s.exchange.1 == msg => Ok(()),
                State::Closed => Ok(()),
                _ => Err(EncryptionError::UnexpectedHandshake),
            };
        };
        // A failed read leaves the handshake as it was (snow restores it),
        // so a forged answer does not spoil the genuine one.
        if let Err(e) = handshake.read_message(&msg[1..], &mut []) {
            *rejected += 1;
            return Err(match e {
                snow::Error::Decrypt | snow::Error::Dh => EncryptionError::HandshakeRejected,
                e => EncryptionError::Crypto {
                    reason: e.to_string(),
                },
            });
        }
        let (i2r, r2i) = handshake.dangerously_get_raw_split();
        let exchange = (message.clone(), msg);
        self.establish(i2r, r2i, exchange, out);
        Ok(())
    }

    fn on_data(&mut self, data: Bytes, out: &mut Output) -> Result<(), EncryptionError> {
        let State::Established(session) = &mut self.state else {
            return Err(EncryptionError::NotEstablished);
        };
        // The caller checked the length.
        let nonce = u64::from_be_bytes(data[1..9].try_into().expect("8 bytes"));
        match session.window.check(nonce) {
            Verdict::Fresh if nonce <= MAX_NONCE => {}
            Verdict::Fresh => return Err(EncryptionError::BadTag { nonce }),
            Verdict::Replayed => return Err(EncryptionError::Replayed { nonce }),
            Verdict::Stale => {
                return Err(EncryptionError::Stale {
                    nonce,
                    highest: session.window.highest().unwrap_or(0),
                })
            }
        }
        // Decrypt in place when we hold the only reference (a datagram just
        // read), otherwise into a copy.
        let mut buf = data
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        let body_end = buf.len() - TAG_LEN;
        let (header, sealed) = buf.split_at_mut(DATA_HEADER_LEN);
        if session
            .open
            .open_in_place(aead_nonce(nonce), Aad::from(&*header), sealed)
            .is_err()
        {
            return Err(EncryptionError::BadTag { nonce });
        }
        session.window.mark(nonce);
        buf.truncate(body_end);
        let mut plain = buf.freeze();
        let _ = plain.split_to(DATA_HEADER_LEN);
        out.push_up(Frame::from_payload(plain));
        self.stats.opened += 1;
        Ok(())
    }

    fn count(&mut self, error: &EncryptionError) {
        let s = &mut self.stats;
        match error {
            EncryptionError::Malformed { .. } | EncryptionError::UnknownKind { .. } => {
                s.malformed += 1
            }
            EncryptionError::BadTag { .. } => s.bad_tag += 1,
            EncryptionError::Replayed { .. } => s.replayed += 1,
            EncryptionError::Stale { .. } => s.stale += 1,
            EncryptionError::NotEstablished => s.not_established += 1,
            EncryptionError::HandshakeRejected | EncryptionError::UnexpectedHandshake => {
                s.handshake_rejected += 1
            }
            _ => {}
        }
    }
}

impl Layer for Encryption {
    fn name(&self) -> &'static str {
        EncryptionConfig::NAME
    }

    fn flushes(&self) -> bool {
        false
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn max_frame_len(&self, below: Option<usize>) -> Option<usize> {
        below.map(|b| b.saturating_sub(OVERHEAD))
    }

    fn can_send(&self) -> bool {
        match self.state {
            State::Established(_) => true,
            State::Closed => false,
            State::Idle | State::Initiating { .. } => {
                self.pending.len() < self.config.pending
                    && self.pending_len < self.config.pending_bytes
            }
        }
    }

    fn handle_send(
        &mut self,
        now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), StackSendError> {
        match &mut self.state {
            State::Established(session) => {
                let exhausted = session.seal(frame, out);
                self.stats.sealed += 1;
                if exhausted {
                    self.close(EncryptionError::NonceExhausted, out);
                }
                Ok(())
            }
            State::Closed => Err(StackSendError::Closed(frame)),
            State::Idle | State::Initiating { .. } => {
                if !self.can_send() {
                    return Err(StackSendError::WouldBlock(frame));
                }
                self.pending_len += frame.len();
                self.pending.push_back(frame);
                if matches!(self.state, State::Idle) {
                    self.initiate(now, out);
                }
                Ok(())
            }
        }
    }

    fn handle_receive(
        &mut self,
        _now: Instant,
        frame: Frame,
        out: &mut Output,
    ) -> Result<(), ReceiveError> {
        let data = frame.into_bytes();
        let result = match data.first().copied() {
            None => Err(EncryptionError::Malformed { len: 0 }),
            Some(KIND_DATA) if data.len() >= OVERHEAD => self.on_data(data, out),
            Some(KIND_INIT) if data.len() == HANDSHAKE_LEN => self.on_init(data, out),
            Some(KIND_RESP) if data.len() == HANDSHAKE_LEN => self.on_resp(data, out),
            Some(KIND_DATA | KIND_INIT | KIND_RESP) => {
                Err(EncryptionError::Malformed { len: data.len() })
            }
            Some(kind) => Err(EncryptionError::UnknownKind { kind }),
        };
        if let Err(error) = &result {
            self.count(error);
            tracing::debug!(target: "plexus::net", %error, "encryption dropped a datagram");
        }
        Ok(result?)
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Output) {
        let State::Initiating {
            message,
            started,
            next_retry,
            rto,
            attempts,
            rejected,
            ..
        } = &mut self.state
        else {
            return;
        };
        if *next_retry > now {
            return;
        }
        let waited = now.saturating_duration_since(*started);
        if waited >= self.config.handshake_timeout {
            let error = EncryptionError::HandshakeTimeout {
                attempts: *attempts,
                waited_ms: waited.as_millis() as u64,
                rejected: *rejected,
            };
            self.close(error, out);
            return;
        }
        out.push_down(Frame::from_payload(message.clone()));
        *attempts += 1;
        *rto = (*rto * 2).min(MAX_HANDSHAKE_RTO);
        *next_retry = (now + *rto).min(*started + self.config.handshake_timeout);
        self.stats.handshake_sent += 1;
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Initiating { next_retry, .. } => Some(*next_retry),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
