//! [`Strand`]: the ordering unit of a link.

/// A strand of a link: messages on one strand arrive in the order they were
/// queued; messages on different strands may overtake each other (on the
/// transports that have several streams per link, i.e. [`quic`](crate::quic)).
/// There are [`Strand::COUNT`] strands, `0` to `COUNT - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Strand(u8);

impl Strand {
    /// Strands per link.
    pub const COUNT: usize = 64;
    /// Strand 0: what [`LinkSender::send`](crate::LinkSender::send) uses.
    pub const ZERO: Strand = Strand(0);

    /// Strand `index`, if below [`Strand::COUNT`].
    pub const fn new(index: u8) -> Option<Strand> {
        if (index as usize) < Self::COUNT {
            Some(Strand(index))
        } else {
            None
        }
    }

    /// One of the strands `1..COUNT` chosen by `key` (e.g. a hash of a pair of
    /// actors): equal keys give equal strands, and strand 0 is left for traffic
    /// that belongs to no key.
    pub const fn for_key(key: u64) -> Strand {
        // Fibonacci hashing spreads sequential keys over the strands.
        let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        Strand(1 + (mixed % (Self::COUNT as u64 - 1)) as u8)
    }

    /// The strand's number, `0..COUNT`.
    pub const fn index(self) -> u8 {
        self.0
    }
}

impl std::fmt::Display for Strand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "strand {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strands_for_keys_stay_in_range_and_spare_strand_zero() {
        let mut used = [false; Strand::COUNT];
        for key in (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63]) {
            let strand = Strand::for_key(key);
            assert!(strand.index() >= 1 && usize::from(strand.index()) < Strand::COUNT);
            assert_eq!(strand, Strand::for_key(key), "same key, same strand");
            used[usize::from(strand.index())] = true;
        }
        assert!(
            used[1..].iter().all(|&u| u),
            "sequential keys reach every strand"
        );
        assert_eq!(Strand::new(63).map(Strand::index), Some(63));
        assert_eq!(Strand::new(64), None);
    }

    #[test]
    fn the_outbound_queue_slot_stays_small() {
        // The strand rides next to the message in the queue: no allocation,
        // one slot of at most 40 bytes.
        assert!(std::mem::size_of::<(Strand, bytes::Bytes)>() <= 40);
    }
}
