//! Anti-replay sliding window over 64-bit nonces (RFC 4303 sec. 3.4.3, with
//! the block ring of RFC 6479).

/// Width of the window in nonces: a nonce more than this far below the
/// highest one accepted is refused as stale.
pub const REPLAY_WINDOW: u64 = 1024;

/// 64-bit blocks in the ring: a power of two of at least
/// `REPLAY_WINDOW / 64 + 1`, so the block being advanced into never holds a
/// bit still inside the window (RFC 6479 sec. 2). 256 bytes.
const BLOCKS: usize = 32;

/// What [`ReplayWindow::check`] says about a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not seen and inside (or above) the window: decrypt, then
    /// [`mark`](ReplayWindow::mark) it.
    Fresh,
    /// Already accepted once.
    Replayed,
    /// Older than the window; it cannot be told apart from a replay.
    Stale,
}

/// The nonces accepted so far: the highest, and a bitmap of the
/// [`REPLAY_WINDOW`] below it.
///
/// Invariant: for every `n` with `top - REPLAY_WINDOW < n <= top`, bit `n` of
/// the ring is set iff `n` was marked. Memory is fixed (256 bytes), whatever
/// the input.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Highest nonce marked; meaningless while `empty`.
    top: u64,
    empty: bool,
    ring: [u64; BLOCKS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayWindow {
    /// An empty window: every nonce is fresh.
    pub const fn new() -> Self {
        Self {
            top: 0,
            empty: true,
            ring: [0; BLOCKS],
        }
    }

    /// The highest nonce marked, if any.
    pub fn highest(&self) -> Option<u64> {
        (!self.empty).then_some(self.top)
    }

    fn bit(nonce: u64) -> (usize, u64) {
        (((nonce >> 6) as usize) & (BLOCKS - 1), 1 << (nonce & 63))
    }

    /// Classifies `nonce` without changing anything (called before the
    /// AEAD check, so that a forged datagram costs no decryption).
    pub fn check(&self, nonce: u64) -> Verdict {
        if self.empty || nonce > self.top {
            return Verdict::Fresh;
        }
        if self.top - nonce >= REPLAY_WINDOW {
            return Verdict::Stale;
        }
        let (block, mask) = Self::bit(nonce);
        if self.ring[block] & mask != 0 {
            Verdict::Replayed
        } else {
            Verdict::Fresh
        }
    }

    /// Records `nonce` as accepted. Called only after the datagram
    /// authenticated (RFC 4303 sec. 3.4.3: the window moves only on
    /// verified packets, so forgeries cannot advance it), and only for a
    /// nonce [`check`](Self::check) found fresh.
    pub fn mark(&mut self, nonce: u64) {
        if self.empty || nonce > self.top {
            // nonce > top, so the block index does not decrease.
            let (old, new) = (self.top >> 6, nonce >> 6);
            if self.empty || new - old >= BLOCKS as u64 {
                self.ring = [0; BLOCKS];
            } else {
                // Clear the blocks the top moves into (RFC 6479 sec. 2).
                for b in old + 1..=new {
                    self.ring[(b as usize) & (BLOCKS - 1)] = 0;
                }
            }
            self.top = nonce;
            self.empty = false;
        }
        let (block, mask) = Self::bit(nonce);
        self.ring[block] |= mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_nonce_is_accepted_once_in_any_order() {
        let mut w = ReplayWindow::new();
        for n in [5u64, 3, 9, 4, 0, 1000, 8] {
            assert_eq!(w.check(n), Verdict::Fresh, "{n}");
            w.mark(n);
            assert_eq!(w.check(n), Verdict::Replayed, "{n}");
        }
        assert_eq!(w.check(7), Verdict::Fresh);
    }

    #[test]
    fn nonce_a_full_window_below_the_top_is_stale() {
        let mut w = ReplayWindow::new();
        w.mark(5000);
        assert_eq!(w.check(5000 - REPLAY_WINDOW), Verdict::Stale);
        assert_eq!(w.check(5000 - REPLAY_WINDOW + 1), Verdict::Fresh);
    }

    #[test]
    fn advancing_the_top_forgets_bits_that_left_the_window() {
        let mut w = ReplayWindow::new();
        w.mark(10);
        // Far jump: every block recycled.
        w.mark(10 + 64 * BLOCKS as u64);
        assert_eq!(w.check(10 + 64), Verdict::Stale);
        // Short jump: bits still inside the window survive.
        let top = 10 + 64 * BLOCKS as u64;
        w.mark(top - 100);
        w.mark(top + 200);
        assert_eq!(w.check(top - 100), Verdict::Replayed);
        assert_eq!(w.check(top + 199), Verdict::Fresh);
    }

    #[test]
    fn window_matches_a_set_model_over_random_marks() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let mut w = ReplayWindow::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut top = 0u64;
        for _ in 0..20_000 {
            let n = (top + rng.gen_range(0..200)).saturating_sub(rng.gen_range(0..1200));
            let expect = if !seen.is_empty() && top - n.min(top) >= REPLAY_WINDOW && n <= top {
                Verdict::Stale
            } else if seen.contains(&n) {
                Verdict::Replayed
            } else {
                Verdict::Fresh
            };
            assert_eq!(w.check(n), expect, "nonce {n}, top {top}");
            if expect == Verdict::Fresh {
                w.mark(n);
                seen.insert(n);
                top = top.max(n);
            }
        }
    }
}
