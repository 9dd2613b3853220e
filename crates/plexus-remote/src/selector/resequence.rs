//! Restoring one sender's order at the receiver of an adaptive lane.
//!
//! The sender numbers its messages on the lane (`u64`, from 0) and the
//! selector spreads them over candidates with different delays, so they
//! arrive out of order. A [`Resequencer`] holds the early ones until the
//! gap before them is filled and hands them out in order, each number
//! once.
//!
//! Bounded: at most `max_items` items and `max_bytes` bytes wait out of
//! order, and no number at or beyond `next + window` is taken. A peer that
//! leaves a gap while the buffer fills, or sends too far ahead, gets a
//! [`ResequenceError`] and nothing is stored; the link is meant to be
//! closed with it (a correct sender never gets that far ahead: its
//! candidates carry every message eventually, and the window covers what
//! is in flight).

use std::collections::{BTreeMap, VecDeque};

use thiserror::Error;

/// Bounds of a [`Resequencer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResequencerConfig {
    /// Items waiting out of order, at most. Default 4,096.
    pub max_items: usize,
    /// Bytes waiting out of order, at most (as given to
    /// [`push`](Resequencer::push)). Default 64 MiB.
    pub max_bytes: usize,
    /// How far ahead of the next expected number a number may be.
    /// Default 65,536.
    pub window: u64,
}

impl Default for ResequencerConfig {
    fn default() -> Self {
        Self {
            max_items: 4096,
            max_bytes: 64 << 20,
            window: 65_536,
        }
    }
}

/// A push the [`Resequencer`] refused. Nothing was stored; the peer broke
/// the lane's bounds, so close its link with this.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ResequenceError {
    /// The number is at or beyond `next + window`.
    #[error("sequence {seq} is beyond the window ({window} from {next})")]
    BeyondWindow {
        /// The number pushed.
        seq: u64,
        /// The next number expected.
        next: u64,
        /// The window.
        window: u64,
    },
    /// Storing it would exceed the buffer while `next` has not come.
    #[error(
        "resequencing buffer full waiting for {next}: {items} items / {bytes} bytes held, \
         {size} more would exceed {max_items} / {max_bytes}"
    )]
    Full {
        /// The next number expected (the gap).
        next: u64,
        /// Items held out of order.
        items: usize,
        /// Bytes held out of order.
        bytes: usize,
        /// Size of the refused item.
        size: usize,
        /// The item bound.
        max_items: usize,
        /// The byte bound.
        max_bytes: usize,
    },
}

/// What [`Resequencer::push`] did with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Pushed {
    /// It was the next one: it and any that waited behind it are ready
    /// for [`pop`](Resequencer::pop).
    Ready,
    /// It waits out of order.
    Buffered,
    /// Its number was delivered or is already waiting: dropped.
    Duplicate,
}

/// Puts one sender's numbered items back in order (see the module docs).
///
/// Call [`pop`](Self::pop) until `None` after each
/// [`push`](Self::push); ready items are the consumer's, outside the
/// bounds, so they are only as many as one push released.
#[derive(Debug, Clone)]
pub struct Resequencer<T> {
    config: ResequencerConfig,
    next: u64,
    waiting: BTreeMap<u64, (T, usize)>,
    waiting_bytes: usize,
    ready: VecDeque<T>,
}

impl<T> Resequencer<T> {
    /// A resequencer expecting number 0 first.
    pub fn new(config: ResequencerConfig) -> Self {
        Self::starting_at(0, config)
    }

    /// A resequencer expecting `next` first.
    pub fn starting_at(next: u64, config: ResequencerConfig) -> Self {
        Self {
            config,
            next,
            waiting: BTreeMap::new(),
            waiting_bytes: 0,
            ready: VecDeque::new(),
        }
    }

    /// Takes item number `seq` of `size` bytes (the size counts against
    /// `max_bytes`).
    ///
    /// # Errors
    ///
    /// [`ResequenceError::BeyondWindow`] if `seq >= next + window`,
    /// [`ResequenceError::Full`] if it would wait out of order beyond the
    /// bounds. Nothing is stored either way.
    pub fn push(&mut self, seq: u64, item: T, size: usize) -> Result<Pushed, ResequenceError> {
        if seq < self.next || self.waiting.contains_key(&seq) {
            return Ok(Pushed::Duplicate);
        }
        if seq - self.next >= self.config.window {
            return Err(ResequenceError::BeyondWindow {
                seq,
                next: self.next,
                window: self.config.window,
            });
        }
        if seq == self.next {
            self.ready.push_back(item);
            self.next += 1;
            while let Some((item, size)) = self.waiting.remove(&self.next) {
                self.waiting_bytes -= size;
                self.ready.push_back(item);
                self.next += 1;
            }
            return Ok(Pushed::Ready);
        }
        if self.waiting.len() >= self.config.max_items
            || self.waiting_bytes.saturating_add(size) > self.config.max_bytes
        {
            return Err(ResequenceError::Full {
                next: self.next,
                items: self.waiting.len(),
                bytes: self.waiting_bytes,
                size,
                max_items: self.config.max_items,
                max_bytes: self.config.max_bytes,
            });
        }
        self.waiting_bytes += size;
        self.waiting.insert(seq, (item, size));
        Ok(Pushed::Buffered)
    }

    /// The next item in order, if it has arrived.
    pub fn pop(&mut self) -> Option<T> {
        self.ready.pop_front()
    }

    /// The next number expected.
    pub fn next_expected(&self) -> u64 {
        self.next
    }

    /// Items waiting out of order.
    pub fn waiting_items(&self) -> usize {
        self.waiting.len()
    }

    /// Bytes waiting out of order.
    pub fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(max_items: usize, max_bytes: usize, window: u64) -> ResequencerConfig {
        ResequencerConfig {
            max_items,
            max_bytes,
            window,
        }
    }

    #[test]
    fn a_gap_holds_later_items_until_it_is_filled() {
        let mut r = Resequencer::new(ResequencerConfig::default());
        assert_eq!(r.push(1, 'b', 1), Ok(Pushed::Buffered));
        assert_eq!(r.push(2, 'c', 1), Ok(Pushed::Buffered));
        assert_eq!(r.pop(), None);
        assert_eq!(r.push(0, 'a', 1), Ok(Pushed::Ready));
        assert_eq!(std::iter::from_fn(|| r.pop()).collect::<String>(), "abc");
        assert_eq!(r.push(1, 'x', 1), Ok(Pushed::Duplicate));
        assert_eq!(
            (r.next_expected(), r.waiting_items(), r.waiting_bytes()),
            (3, 0, 0)
        );
    }

    #[test]
    fn a_peer_that_never_fills_the_gap_is_refused_at_the_bound() {
        let mut r = Resequencer::new(config(3, 1000, 100));
        for seq in 1..=3 {
            assert_eq!(r.push(seq, seq, 10), Ok(Pushed::Buffered));
        }
        assert!(matches!(
            r.push(4, 4, 10),
            Err(ResequenceError::Full {
                next: 0,
                items: 3,
                ..
            })
        ));
        // The gap itself is still taken and releases everything.
        assert_eq!(r.push(0, 0, 10), Ok(Pushed::Ready));
        assert_eq!(
            std::iter::from_fn(|| r.pop()).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
    }

    #[test]
    fn bytes_are_bounded_too_and_far_ahead_is_refused() {
        let mut r = Resequencer::new(config(100, 25, 10));
        assert_eq!(r.push(1, (), 20), Ok(Pushed::Buffered));
        assert!(matches!(
            r.push(2, (), 6),
            Err(ResequenceError::Full { .. })
        ));
        assert_eq!(
            r.push(10, (), 1),
            Err(ResequenceError::BeyondWindow {
                seq: 10,
                next: 0,
                window: 10
            })
        );
        assert_eq!(r.push(9, (), 5), Ok(Pushed::Buffered));
    }

    /// A permutation of `0..n` with some numbers repeated later on.
    fn shuffled_with_duplicates() -> impl Strategy<Value = (u64, Vec<u64>)> {
        (1u64..300)
            .prop_flat_map(|n| {
                let seqs: Vec<u64> = (0..n).collect();
                (
                    Just(n),
                    Just(seqs).prop_shuffle(),
                    prop::collection::vec((0..n, 0usize..1000), 0..50),
                )
            })
            .prop_map(|(n, mut seqs, dups)| {
                for (seq, at) in dups {
                    let at = at % (seqs.len() + 1);
                    seqs.insert(at, seq);
                }
                (n, seqs)
            })
    }

    proptest! {
        #[test]
        fn any_order_with_duplicates_comes_out_once_in_order((n, seqs) in shuffled_with_duplicates()) {
            let mut r = Resequencer::new(config(n as usize, usize::MAX, n));
            let mut out = Vec::new();
            for seq in seqs {
                let pushed = r.push(seq, seq, 8);
                prop_assert!(pushed.is_ok(), "{:?}", pushed);
                out.extend(std::iter::from_fn(|| r.pop()));
            }
            prop_assert_eq!(out, (0..n).collect::<Vec<_>>());
            prop_assert_eq!(r.waiting_items(), 0);
        }

        #[test]
        fn overfill_is_refused_never_grows_never_panics(
            max_items in 1usize..20,
            max_bytes in 1usize..200,
            window in 1u64..64,
            pushes in prop::collection::vec((0u64..80, 0usize..40), 0..300),
        ) {
            let mut r = Resequencer::new(config(max_items, max_bytes, window));
            for (seq, size) in pushes {
                let before = (r.waiting_items(), r.waiting_bytes(), r.next_expected());
                match r.push(seq, seq, size) {
                    Ok(_) => {}
                    Err(ResequenceError::Full { .. }) => {
                        prop_assert!(seq > before.2);
                        prop_assert_eq!((r.waiting_items(), r.waiting_bytes(), r.next_expected()), before);
                    }
                    Err(ResequenceError::BeyondWindow { .. }) => {
                        prop_assert!(seq >= before.2 + window);
                        prop_assert_eq!((r.waiting_items(), r.waiting_bytes(), r.next_expected()), before);
                    }
                }
                prop_assert!(r.waiting_items() <= max_items);
                prop_assert!(r.waiting_bytes() <= max_bytes);
                let mut expect = r.next_expected() - r.ready.len() as u64;
                while let Some(got) = r.pop() {
                    prop_assert_eq!(got, expect);
                    expect += 1;
                }
            }
        }
    }
}
