//! [`Lane`]: the ordering unit of a link.

/// A lane of a link: messages on one lane arrive in the order they were
/// queued; messages on different lanes may overtake each other (on the
/// transports that have several streams per link, i.e. [`quic`](crate::quic)).
/// There are [`Lane::COUNT`] lanes, `0` to `COUNT - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Lane(u8);

impl Lane {
    /// Lanes per link.
    pub const COUNT: usize = 64;
    /// Lane 0: what [`LinkSender::send`](crate::LinkSender::send) uses.
    pub const ZERO: Lane = Lane(0);

    /// Lane `index`, if below [`Lane::COUNT`].
    pub const fn new(index: u8) -> Option<Lane> {
        if (index as usize) < Self::COUNT {
            Some(Lane(index))
        } else {
            None
        }
    }

    /// One of the lanes `1..COUNT` chosen by `key` (e.g. a hash of a pair of
    /// actors): equal keys give equal lanes, and lane 0 is left for traffic
    /// that belongs to no key.
    pub const fn for_key(key: u64) -> Lane {
        // Fibonacci hashing spreads sequential keys over the lanes.
        let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        Lane(1 + (mixed % (Self::COUNT as u64 - 1)) as u8)
    }

    /// The lane's number, `0..COUNT`.
    pub const fn index(self) -> u8 {
        self.0
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lane {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_for_keys_stay_in_range_and_spare_lane_zero() {
        let mut used = [false; Lane::COUNT];
        for key in (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63]) {
            let lane = Lane::for_key(key);
            assert!(lane.index() >= 1 && usize::from(lane.index()) < Lane::COUNT);
            assert_eq!(lane, Lane::for_key(key), "same key, same lane");
            used[usize::from(lane.index())] = true;
        }
        assert!(
            used[1..].iter().all(|&u| u),
            "sequential keys reach every lane"
        );
        assert_eq!(Lane::new(63).map(Lane::index), Some(63));
        assert_eq!(Lane::new(64), None);
    }

    #[test]
    fn the_outbound_queue_slot_stays_small() {
        // The lane rides next to the message in the queue: no allocation,
        // one slot of at most 40 bytes.
        assert!(std::mem::size_of::<(Lane, bytes::Bytes)>() <= 40);
    }
}
