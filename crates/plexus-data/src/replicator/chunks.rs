//! Reassembly of packets cut into [`Body::Chunk`](super::wire::Body::Chunk)s,
//! within bounds: a transfer is at most `max_transfer` bytes, a peer has at
//! most [`MAX_TRANSFERS_PER_PEER`] transfers open and `max_transfer` bytes
//! buffered, and a transfer not complete by its deadline is dropped (its
//! sender's retransmission or the next anti-entropy round sends it again).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::crdt::ReplicaId;

/// Transfers one peer may have open at once.
pub const MAX_TRANSFERS_PER_PEER: usize = 8;

/// Why a chunk was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// Index and count do not make sense.
    #[error("chunk {index} of {count} is not a piece of a transfer")]
    BadIndex {
        /// The piece's index.
        index: u32,
        /// The piece count claimed.
        count: u32,
    },
    /// The transfer would exceed the byte limit.
    #[error("a transfer over the limit of {limit} bytes was refused")]
    TooLarge {
        /// The configured `max_transfer`.
        limit: usize,
    },
    /// The peer has too many transfers open.
    #[error("the peer has {MAX_TRANSFERS_PER_PEER} transfers open already")]
    TooManyTransfers,
}

#[derive(Debug)]
struct Partial {
    pieces: Vec<Option<Bytes>>,
    got: u32,
    bytes: usize,
    deadline: Instant,
}

/// The open transfers of every peer. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Reassembly {
    open: HashMap<(ReplicaId, u64), Partial>,
    max_transfer: usize,
    timeout: Duration,
}

impl Reassembly {
    pub(crate) fn new(max_transfer: usize, timeout: Duration) -> Self {
        Self {
            open: HashMap::new(),
            max_transfer,
            timeout,
        }
    }

    /// Adds a piece; returns the whole packet when it was the last one.
    pub(crate) fn add(
        &mut self,
        now: Instant,
        from: ReplicaId,
        transfer: u64,
        index: u32,
        count: u32,
        bytes: Bytes,
    ) -> Result<Option<Vec<u8>>, ChunkError> {
        if count < 2 || index >= count {
            return Err(ChunkError::BadIndex { index, count });
        }
        // Each piece carries at least one byte, so a count over the limit
        // can never complete within it.
        if count as usize > self.max_transfer {
            return Err(ChunkError::TooLarge {
                limit: self.max_transfer,
            });
        }
        let key = (from, transfer);
        if !self.open.contains_key(&key) {
            let (transfers, buffered) = self.peer_load(from);
            if transfers >= MAX_TRANSFERS_PER_PEER {
                return Err(ChunkError::TooManyTransfers);
            }
            if buffered + bytes.len() > self.max_transfer {
                return Err(ChunkError::TooLarge {
                    limit: self.max_transfer,
                });
            }
            self.open.insert(
                key,
                Partial {
                    pieces: vec![None; count as usize],
                    got: 0,
                    bytes: 0,
                    deadline: now + self.timeout,
                },
            );
        }
        let (_, buffered) = self.peer_load(from);
        let partial = self.open.get_mut(&key).expect("inserted above");
        if partial.pieces.len() != count as usize {
            self.open.remove(&key);
            return Err(ChunkError::BadIndex { index, count });
        }
        if partial.pieces[index as usize].is_some() {
            return Ok(None);
        }
        if buffered + bytes.len() > self.max_transfer {
            self.open.remove(&key);
            return Err(ChunkError::TooLarge {
                limit: self.max_transfer,
            });
        }
        partial.bytes += bytes.len();
        partial.got += 1;
        partial.pieces[index as usize] = Some(bytes);
        if partial.got < count {
            return Ok(None);
        }
        let partial = self.open.remove(&key).expect("present");
        let mut whole = Vec::with_capacity(partial.bytes);
        for piece in partial.pieces.into_iter().flatten() {
            whole.extend_from_slice(&piece);
        }
        Ok(Some(whole))
    }

    fn peer_load(&self, peer: ReplicaId) -> (usize, usize) {
        self.open
            .iter()
            .filter(|((p, _), _)| *p == peer)
            .fold((0, 0), |(n, b), (_, t)| (n + 1, b + t.bytes))
    }

    /// Drops transfers past their deadline; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let before = self.open.len();
        self.open.retain(|_, p| p.deadline > now);
        before - self.open.len()
    }

    /// Drops a departed peer's transfers.
    pub(crate) fn forget(&mut self, peer: ReplicaId) {
        self.open.retain(|(p, _), _| *p != peer);
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.open.values().map(|p| p.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_in_any_order_and_bounds_what_it_buffers() {
        let now = Instant::now();
        let mut r = Reassembly::new(100, Duration::from_secs(1));
        let peer = ReplicaId(1);
        let piece = |b: &'static [u8]| Bytes::from_static(b);
        assert_eq!(r.add(now, peer, 1, 1, 2, piece(b"cd")), Ok(None));
        assert_eq!(r.add(now, peer, 1, 1, 2, piece(b"cd")), Ok(None));
        assert_eq!(
            r.add(now, peer, 1, 0, 2, piece(b"ab")),
            Ok(Some(b"abcd".to_vec()))
        );
        assert_eq!(
            r.add(now, peer, 2, 2, 2, piece(b"x")),
            Err(ChunkError::BadIndex { index: 2, count: 2 })
        );
        assert_eq!(
            r.add(now, peer, 3, 0, 2, Bytes::from(vec![0; 101])),
            Err(ChunkError::TooLarge { limit: 100 })
        );
        for t in 10..10 + MAX_TRANSFERS_PER_PEER as u64 {
            assert_eq!(r.add(now, peer, t, 0, 3, piece(b"a")), Ok(None));
        }
        assert_eq!(
            r.add(now, peer, 99, 0, 3, piece(b"a")),
            Err(ChunkError::TooManyTransfers)
        );
        assert_eq!(r.add(now, ReplicaId(2), 99, 0, 3, piece(b"a")), Ok(None));
        assert_eq!(r.next_deadline(), Some(now + Duration::from_secs(1)));
        assert_eq!(r.expire(now + Duration::from_secs(1)), 9);
    }
}
