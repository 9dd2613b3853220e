//! [`LinkStats`]: what a link's stack dropped, readable from the link's
//! handles while the driver owns the stack.

use plexus_net::layers::encryption::{Encryption, EncryptionStats};
use plexus_net::Stack;

/// Counters of one link's stack, for tests and operators: how many inbound
/// frames it dropped, and why when the stack says (the `encryption`
/// layer's counters: bad tags, replays, stale nonces...).
///
/// The driver refreshes the snapshot whenever the stack drops an inbound
/// frame (and not otherwise, to keep the hot path free of it): the drop
/// counters are current, the other counters in
/// [`encryption`](LinkStats::encryption) (`sealed`, `opened`) are as of the
/// last drop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Inbound frames the stack dropped without closing the link (garbage,
    /// duplicates, frames failing authentication...). See
    /// [`StackStats::dropped`](plexus_net::StackStats::dropped).
    pub dropped: u64,
    /// The counters of the stack's `encryption` layer, if it has one.
    pub encryption: Option<EncryptionStats>,
}

impl LinkStats {
    pub(crate) fn of(stack: &Stack) -> Self {
        Self {
            dropped: stack.stats().dropped,
            encryption: stack.layer::<Encryption>().map(Encryption::stats),
        }
    }
}
