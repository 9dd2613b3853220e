//! Pluggable congestion control for `delivery`: the sans-IO controller
//! trait, the events the layer feeds it, and the `cc=` spec option.
//!
//! The layer owns one controller per link (built once, with the link; no
//! allocation per message) and calls it in this order:
//!
//! 1. [`on_sent`](CongestionControl::on_sent) for every transmission,
//!    new or repeated;
//! 2. [`on_ack`](CongestionControl::on_ack) once per received ack that
//!    delivered new data or moved the cumulative ack;
//! 3. [`on_loss`](CongestionControl::on_loss) when a message is found lost,
//!    by fast retransmit or by the retransmission timeout.
//!
//! Between events it reads [`window`](CongestionControl::window) (bytes
//! allowed in the network: sent and neither acked nor SACKed) and
//! [`pacing`](CongestionControl::pacing). A controller that paces is
//! honoured through the layer's timer: a message that may not leave yet
//! waits for the instant [`Layer::poll_timeout`](crate::Layer::poll_timeout)
//! reports, as acks and retransmissions do.
//!
//! Controllers: [`CongestionWindow`] (`cc=newreno`, the default: AIMD, every
//! loss read as congestion) and [`Bbr`] (`cc=bbr`: a model of the path's
//! bandwidth and round-trip time; random loss does not shrink it).

use std::fmt::Debug;
use std::time::{Duration, Instant};

use super::bbr::Bbr;
use super::cwnd::CongestionWindow;
use crate::options::{LayerOption, OptionError};

/// What a received ack told the sender. Bytes are counted as the window
/// counts them: payload plus [`MESSAGE_CHARGE`](super::MESSAGE_CHARGE) per
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckEvent {
    /// Bytes delivered by this ack and not before: messages newly SACKed,
    /// and messages the cumulative ack newly covers that were not SACKed.
    pub delivered: usize,
    /// Bytes the cumulative ack took out of flight (messages below it that
    /// were still counted in flight).
    pub cum_acked: usize,
    /// The cumulative ack moved.
    pub advanced: bool,
    /// The cumulative ack: every sequence number below it was received.
    pub cumulative: u64,
    /// The highest sequence number this ack newly delivered, if any.
    pub largest_delivered: Option<u64>,
    /// A round-trip sample from a message sent once (Karn's rule).
    pub rtt: Option<Duration>,
    /// Bytes in flight before the ack.
    pub flight_before: usize,
    /// Bytes still in the network after the ack (sent, not acked, not
    /// SACKed, not given up for lost).
    pub pipe: usize,
    /// Nothing was waiting to be sent when the ack arrived: the sender,
    /// not the path, set the pace, so a low delivery rate says nothing
    /// about the path.
    pub app_limited: bool,
}

/// How a loss was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// Duplicate acks or SACKs above a hole (RFC 5681 sec. 3.2, RFC 6675):
    /// the path still delivers.
    FastRetransmit,
    /// The retransmission timer fired (RFC 6298): nothing came back for an
    /// RTO.
    Timeout,
}

/// A loss the sender detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossEvent {
    /// How it was detected.
    pub kind: LossKind,
    /// Bytes in flight when it was detected.
    pub flight: usize,
    /// The next sequence number to be sent (recovery episodes end when the
    /// cumulative ack reaches it).
    pub next_seq: u64,
}

/// How fast a pacing controller lets data leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Bytes per second.
    pub rate: u64,
    /// Bytes that may leave at once after an idle spell (or a late timer):
    /// the depth of the token bucket.
    pub burst: usize,
}

/// A sans-IO congestion controller for the `delivery` layer. See the
/// [module docs](self) for the order of calls.
pub trait CongestionControl: Send + Debug {
    /// The controller's name as the `cc=` option spells it.
    fn name(&self) -> &'static str;

    /// A message of `bytes` (window-counted) left at `now` with sequence
    /// number `seq`; `pipe` is the bytes in the network after it.
    fn on_sent(&mut self, now: Instant, seq: u64, bytes: usize, pipe: usize);

    /// An ack arrived at `now`.
    fn on_ack(&mut self, now: Instant, ack: &AckEvent);

    /// A loss was detected at `now`.
    fn on_loss(&mut self, now: Instant, loss: &LossEvent);

    /// Bytes allowed in the network. One message may always be in flight,
    /// whatever its size.
    fn window(&self) -> usize;

    /// The pacing the layer must honour, if the controller paces.
    fn pacing(&self) -> Option<Pacing> {
        None
    }

    /// Whether a loss is being recovered from.
    fn in_recovery(&self) -> bool {
        false
    }
}

/// The controller a `delivery` layer uses: option `cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CcKind {
    /// `newreno`: NewReno AIMD in bytes ([`CongestionWindow`]).
    #[default]
    NewReno,
    /// `bbr`: bandwidth and round-trip model, loss tolerant ([`Bbr`]).
    Bbr,
}

impl CcKind {
    /// The values the `cc` option accepts, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["newreno", "bbr"];

    /// Parses the value of the `cc` option.
    ///
    /// # Errors
    ///
    /// [`OptionError::Invalid`] naming the option and the accepted values.
    pub fn from_option(o: &LayerOption<'_>) -> Result<Self, OptionError> {
        Ok([Self::NewReno, Self::Bbr][o.word(&Self::NAMES, "newreno or bbr")?])
    }

    /// The option value naming this controller.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// A controller of this kind for one link, starting at `initial` bytes
    /// and never allowing more than `max`.
    pub fn build(self, now: Instant, initial: usize, max: usize) -> Box<dyn CongestionControl> {
        match self {
            Self::NewReno => Box::new(CongestionWindow::new(initial, max)),
            Self::Bbr => Box::new(Bbr::new(now, initial, max)),
        }
    }
}
