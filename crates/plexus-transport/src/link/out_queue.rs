//! A link's send queue: messages with their strands, in order, waiting for
//! the driver to hand them to the stack.
//!
//! A message arrives as a [`Frame`] (a `Bytes` payload, handed over without
//! a copy) or, if it is small and the sender copies it anyway, as bytes
//! appended to a *pack*: small messages end to end in one buffer, with
//! where each ends. Consecutive small messages on one strand share the
//! pack at the back of the queue, up to [`PACK_MESSAGES`] messages or
//! [`PACK_BYTES`] bytes, so a stream of them costs a copy of their bytes
//! each, not a 128-byte frame each to build, queue and move; the driver
//! hands a pack to the stack whole ([`plexus_net::Stack::handle_send_packed`]),
//! and the top layer copies each message from it into what it builds.
//!
//! Guarantees: messages leave in the order they were queued, frames and
//! packed ones alike, each with its strand; [`OutQueue::len`] counts
//! messages (a pack counts those it holds).

use std::collections::VecDeque;

use plexus_net::{Frame, Packed};

use crate::strand::Strand;

/// The longest message a sender packs rather than queueing as a frame of
/// its own (it is copied either way; above this a frame with its own
/// buffer is as cheap).
pub(crate) const PACK_MESSAGE_MAX: usize = 1024;
/// The most messages in one pack: as many as a driver hands its stack in
/// one run.
pub(crate) const PACK_MESSAGES: usize = 64;
/// The most bytes in one pack.
pub(crate) const PACK_BYTES: usize = 16 << 10;
/// Emptied packs kept for reuse (their buffers).
const SPARE_PACKS: usize = 4;

/// Messages with their strands, in order.
///
/// Frames and their places are kept in queues of their own rather than one
/// of `(Strand, Frame)`: a 128-byte frame moves with two inline 64-byte
/// stores, a 136-byte pair through a `memmove` call, on every push and pop.
/// A pack takes one place, holding an empty frame, and its bytes wait in
/// `packs`.
#[derive(Default)]
pub(crate) struct OutQueue {
    frames: VecDeque<Frame>,
    places: VecDeque<Place>,
    packs: VecDeque<Pack>,
    /// Messages queued, a pack counting those it holds.
    messages: usize,
    spare: Vec<Pack>,
}

/// One place in the queue: a frame, or a pack, on a strand.
#[derive(Clone, Copy)]
struct Place {
    strand: Strand,
    pack: bool,
}

/// Small messages end to end in one buffer; `taken` of them already left.
#[derive(Default)]
pub(crate) struct Pack {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    taken: usize,
}

impl Pack {
    /// The messages not yet taken.
    pub(crate) fn messages(&self) -> Packed<'_> {
        let mut packed = Packed::new(&self.bytes, &self.ends);
        for _ in 0..self.taken {
            packed.next();
        }
        packed
    }

    fn has_room(&self, messages: usize, bytes: usize) -> bool {
        self.ends.len() + messages <= PACK_MESSAGES && self.bytes.len() + bytes <= PACK_BYTES
    }
}

impl OutQueue {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            frames: VecDeque::with_capacity(n),
            places: VecDeque::with_capacity(n),
            ..Self::default()
        }
    }

    /// Queues a frame on `strand`.
    pub(crate) fn push_back(&mut self, (strand, frame): (Strand, Frame)) {
        self.frames.push_back(frame);
        self.places.push_back(Place {
            strand,
            pack: false,
        });
        self.messages += 1;
    }

    /// Queues copies of small messages on `strand`: they lie end to end in
    /// `bytes`, message `i` ending at `ends[i]`. They join the pack at the
    /// back if it is on `strand` and has room for all of them.
    pub(crate) fn push_packed(&mut self, strand: Strand, bytes: &[u8], ends: &[u32]) {
        let joins = matches!(self.places.back(), Some(p) if p.pack && p.strand == strand)
            && self
                .packs
                .back()
                .is_some_and(|p| p.has_room(ends.len(), bytes.len()));
        if !joins {
            let pack = self.spare.pop().unwrap_or_default();
            self.packs.push_back(pack);
            self.frames.push_back(Frame::new());
            self.places.push_back(Place { strand, pack: true });
        }
        let pack = self.packs.back_mut().expect("a pack at the back");
        let base = pack.bytes.len() as u32;
        pack.bytes.extend_from_slice(bytes);
        pack.ends.extend(ends.iter().map(|&end| base + end));
        self.messages += ends.len();
    }

    /// The pack at the front, if the front is one.
    pub(crate) fn front_pack(&self) -> Option<&Pack> {
        match self.places.front() {
            Some(p) if p.pack => self.packs.front(),
            _ => None,
        }
    }

    /// Marks `n` messages of the front pack as gone; an emptied pack leaves
    /// the queue.
    pub(crate) fn take_from_front_pack(&mut self, n: usize) {
        let Some(pack) = self.packs.front_mut() else {
            return;
        };
        pack.taken += n;
        self.messages -= n;
        if pack.taken >= pack.ends.len() {
            self.frames.pop_front();
            self.places.pop_front();
            let mut pack = self.packs.pop_front().expect("the front pack");
            if self.spare.len() < SPARE_PACKS {
                pack.bytes.clear();
                pack.ends.clear();
                pack.taken = 0;
                self.spare.push(pack);
            }
        }
    }

    /// How many frames (not packs) lead the queue, counting at most `most`.
    pub(crate) fn leading_frames(&self, most: usize) -> usize {
        self.places
            .iter()
            .take(most)
            .take_while(|p| !p.pack)
            .count()
    }

    /// The queued frames; the caller takes from the front only the frames
    /// that lead the queue ([`leading_frames`](OutQueue::leading_frames))
    /// and then says how many it took ([`took_frames`](OutQueue::took_frames)).
    pub(crate) fn frames_mut(&mut self) -> &mut VecDeque<Frame> {
        &mut self.frames
    }

    /// `n` frames were taken from the front of [`frames_mut`](OutQueue::frames_mut).
    pub(crate) fn took_frames(&mut self, n: usize) {
        self.places.drain(..n);
        self.messages -= n;
    }

    /// The next message with its strand, a packed one copied into a frame
    /// of its own (quic carries each strand apart).
    #[cfg(feature = "quic")]
    pub(crate) fn pop_front(&mut self) -> Option<(Strand, Frame)> {
        let place = *self.places.front()?;
        if !place.pack {
            self.places.pop_front();
            self.messages -= 1;
            return Some((place.strand, self.frames.pop_front()?));
        }
        let frame = Frame::copy_from_slice(self.front_pack()?.messages().next()?);
        self.take_from_front_pack(1);
        Some((place.strand, frame))
    }

    /// The strands of the queued frames and packs, in order.
    #[cfg(feature = "quic")]
    pub(crate) fn strands(&self) -> impl Iterator<Item = Strand> + '_ {
        self.places.iter().map(|p| p.strand)
    }

    /// Messages queued (a pack counts those it holds).
    pub(crate) fn len(&self) -> usize {
        self.messages
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.places.clear();
        while let Some(mut pack) = self.packs.pop_front() {
            if self.spare.len() < SPARE_PACKS {
                pack.bytes.clear();
                pack.ends.clear();
                pack.taken = 0;
                self.spare.push(pack);
            }
        }
        self.messages = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strand(i: u8) -> Strand {
        Strand::new(i).expect("a strand")
    }

    #[test]
    fn packed_messages_join_the_back_pack_of_their_strand_only() {
        let mut q = OutQueue::default();
        q.push_packed(strand(0), b"ab", &[1, 2]);
        q.push_packed(strand(0), b"c", &[1]);
        q.push_packed(strand(1), b"d", &[1]);
        q.push_back((strand(0), Frame::copy_from_slice(b"e")));
        q.push_packed(strand(0), b"f", &[1]);
        assert_eq!(q.len(), 6);
        let pack = q.front_pack().expect("a pack in front");
        assert_eq!(pack.messages().collect::<Vec<_>>(), [b"a", b"b", b"c"]);
        q.take_from_front_pack(2);
        assert_eq!(q.len(), 4);
        let rest: Vec<&[u8]> = q.front_pack().expect("still there").messages().collect();
        assert_eq!(rest, [b"c"]);
        q.take_from_front_pack(1);
        assert_eq!(q.leading_frames(8), 0, "the strand 1 pack leads");
        q.take_from_front_pack(1);
        assert_eq!(q.leading_frames(8), 1);
        q.frames_mut().pop_front();
        q.took_frames(1);
        assert_eq!(q.front_pack().expect("the last pack").messages().count(), 1);
        q.take_from_front_pack(1);
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_full_pack_starts_another() {
        let mut q = OutQueue::default();
        for _ in 0..PACK_MESSAGES + 1 {
            q.push_packed(Strand::ZERO, b"x", &[1]);
        }
        assert_eq!(
            q.front_pack().expect("a pack").messages().count(),
            PACK_MESSAGES
        );
        q.take_from_front_pack(PACK_MESSAGES);
        assert_eq!(q.len(), 1);
    }
}
