//! [`Packed`]: small messages end to end in one buffer, handed to a stack
//! as one run ([`Stack::handle_send_packed`](crate::Stack::handle_send_packed)).
//!
//! A sender that gathers many small messages (a remote actor's turn, a
//! link's send queue) writes them into one buffer and notes where each
//! ends. Handed over packed, a message costs the stack a copy of its bytes
//! into whatever the top layer builds (`framing`'s run of prefixed frames,
//! `batching`'s batch), and no [`Frame`](crate::Frame) of its own to build,
//! queue and move; a layer without a packed form gets a frame per message
//! ([`Layer::handle_send_packed`](crate::Layer::handle_send_packed)'s
//! default), the same as if they had been sent one by one.
//!
//! ```
//! use plexus_net::Packed;
//!
//! let bytes = b"onetwothree";
//! let ends = [3, 6, 11];
//! let mut messages = Packed::new(bytes, &ends);
//! assert_eq!(messages.next(), Some(&b"one"[..]));
//! assert_eq!(messages.len(), 2);
//! assert_eq!(messages.collect::<Vec<_>>(), [&b"two"[..], &b"three"[..]]);
//! ```

/// Messages end to end in one buffer, taken from the front: message `i` is
/// `bytes[ends[i - 1]..ends[i]]` (the first starts at 0). An iterator over
/// the messages not yet taken.
#[derive(Debug, Clone)]
pub struct Packed<'a> {
    bytes: &'a [u8],
    ends: &'a [u32],
    /// Messages taken so far.
    taken: usize,
    /// Where the next message starts.
    start: usize,
}

impl<'a> Packed<'a> {
    /// The messages of `bytes` ending at `ends`.
    ///
    /// # Panics
    ///
    /// If `ends` is not ascending or its last end lies beyond `bytes`.
    pub fn new(bytes: &'a [u8], ends: &'a [u32]) -> Self {
        let mut last = 0;
        for &end in ends {
            assert!(
                end >= last && end as usize <= bytes.len(),
                "message ends ascending within the buffer"
            );
            last = end;
        }
        Self {
            bytes,
            ends,
            taken: 0,
            start: 0,
        }
    }

    /// Messages not yet taken.
    pub fn len(&self) -> usize {
        self.ends.len() - self.taken
    }

    /// Whether every message was taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages taken so far.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// The next message, not taken.
    pub fn front(&self) -> Option<&'a [u8]> {
        let end = *self.ends.get(self.taken)? as usize;
        Some(&self.bytes[self.start..end])
    }

    /// The longest message not yet taken (0 when none is left).
    pub fn longest(&self) -> usize {
        let mut start = self.start;
        let mut longest = 0;
        for &end in &self.ends[self.taken..] {
            longest = longest.max(end as usize - start);
            start = end as usize;
        }
        longest
    }

    /// The leading messages whose bytes add up to at most `max_bytes` (at
    /// least one, if any is left), as a pack of their own; none is taken
    /// from this one ([`advance`](Packed::advance) does that).
    pub(crate) fn leading(&self, max_bytes: usize) -> Packed<'a> {
        let rest = &self.ends[self.taken..];
        let fit = rest.partition_point(|&end| end as usize - self.start <= max_bytes);
        Packed {
            bytes: self.bytes,
            ends: &rest[..fit.max(1).min(rest.len())],
            taken: 0,
            start: self.start,
        }
    }

    /// Takes the next `n` messages (fewer if fewer are left) unread.
    pub(crate) fn advance(&mut self, n: usize) {
        let n = n.min(self.len());
        if n > 0 {
            self.taken += n;
            self.start = self.ends[self.taken - 1] as usize;
        }
    }
}

impl<'a> Iterator for Packed<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let message = self.front()?;
        self.start += message.len();
        self.taken += 1;
        Some(message)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len(), Some(self.len()))
    }
}

impl ExactSizeIterator for Packed<'_> {}

/// Messages a layer pushed down packed ([`Output::push_down_packed`](crate::Output::push_down_packed)),
/// copied end to end, waiting for the layer below.
#[derive(Debug, Default)]
pub(crate) struct PackBuf {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl PackBuf {
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends copies of the messages left in `messages`, taking them.
    pub(crate) fn push(&mut self, messages: &mut Packed<'_>) {
        for message in messages {
            self.bytes.extend_from_slice(message);
            self.ends.push(self.bytes.len() as u32);
        }
    }

    pub(crate) fn messages(&self) -> Packed<'_> {
        Packed::new(&self.bytes, &self.ends)
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Moves the messages into `frames`, a frame each, after those there.
    pub(crate) fn unpack_into(&mut self, frames: &mut std::collections::VecDeque<crate::Frame>) {
        frames.extend(self.messages().map(crate::Frame::copy_from_slice));
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_out_in_order_and_empty_ones_too() {
        let ends = [0, 2, 2, 5];
        let mut p = Packed::new(b"abcde", &ends);
        assert_eq!(p.longest(), 3);
        let one = p.leading(0);
        assert_eq!(one.collect::<Vec<_>>(), [&b""[..]]);
        assert_eq!(p.taken(), 0, "leading takes nothing");
        p.advance(1);
        assert_eq!(p.taken(), 1);
        assert_eq!(p.front(), Some(&b"ab"[..]));
        assert_eq!(p.collect::<Vec<_>>(), [&b"ab"[..], &b""[..], &b"cde"[..]]);
    }

    #[test]
    fn leading_messages_fit_the_bytes_asked_for_and_at_least_one() {
        let ends = [3, 6, 11, 12];
        let mut p = Packed::new(b"onetwothreeX", &ends);
        assert_eq!(p.leading(0).collect::<Vec<_>>(), [&b"one"[..]]);
        assert_eq!(p.leading(6).len(), 2);
        assert_eq!(p.leading(10).len(), 2);
        assert_eq!(p.leading(usize::MAX).len(), 4);
        p.advance(1);
        assert_eq!(
            p.leading(8).collect::<Vec<_>>(),
            [&b"two"[..], &b"three"[..]]
        );
        p.advance(10);
        assert!(p.is_empty());
        assert!(p.leading(100).is_empty());
    }

    #[test]
    #[should_panic(expected = "ascending")]
    fn ends_beyond_the_buffer_are_refused() {
        let _ = Packed::new(b"ab", &[1, 3]);
    }
}
