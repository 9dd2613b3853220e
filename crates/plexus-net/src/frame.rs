//! [`Frame`]: a short chain of buffers that moves through a stack.
//!
//! ```text
//!   headroom (inline, written back to front)     payload segments (Bytes)
//!  ┌──────────────────────┬────┬────┬─────┐    ┌──────────┐┌─────────┐
//!  │ free ............... │ L3 │ L2 │ L1  │ ++ │ seg 0    ││ seg 1   │ ...
//!  └──────────────────────┴────┴────┴─────┘    └──────────┘└─────────┘
//! ```
//!
//! Each layer prepends its header with [`Frame::push_header`], which copies a
//! few bytes into an inline headroom array: no heap allocation and no copy of
//! the payload. All headers together form one contiguous chunk, so a driver
//! writes a frame with one vectored write of `1 + segments` slices
//! ([`Frame::chunks`]). On the receive path a frame is usually a single
//! [`Bytes`] (one datagram or one decoded stream frame); a layer reads its
//! header with [`Frame::prefix`] and strips it with [`Frame::advance`], and the
//! payload reaches the application as the same `Bytes`, uncopied
//! ([`Frame::into_bytes`]).
//!
//! Rare paths stay correct but allocate: headers larger than the free headroom
//! spill into a segment of their own, and a chain longer than
//! [`INLINE_SEGMENTS`] coalesces its tail.
//!
//! A frame's payload may end in a [`FileRegion`] instead of bytes (a large
//! static file, see [`crate::file_region`]): [`Frame::len`] counts it, the
//! byte views ([`Frame::chunks`], [`Frame::io_slices`], [`Frame::to_bytes`])
//! cover the bytes in front of it only, and a driver that writes the frame
//! sends the region after them ([`Frame::file_region`]).

use std::fmt;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

use crate::file_region::FileRegion;

/// Bytes of inline headroom for headers, enough for every built-in layer at
/// once (at most 77: batching 1, compression 5, heartbeat 1, ordering 8, delivery with a
/// full SACK block 50, slicing 12). Sized so that the whole frame is 128
/// bytes, which the compiler moves with a few vector stores.
pub const HEADROOM: usize = 80;

/// Payload segments held inline before the tail is coalesced.
pub const INLINE_SEGMENTS: usize = 4;

/// The longest payload [`Frame::copy_from_slice`] keeps in the frame's
/// headroom: what is left of it (at least 40 bytes) takes the layers'
/// headers without spilling.
pub const INLINE_PAYLOAD_MAX: usize = 40;

/// A message or packet in flight through a stack: inline headers followed by
/// up to [`INLINE_SEGMENTS`] payload segments.
///
/// The first payload segment is held inline, the others out of line (a frame
/// of two or more segments is rare: a spilled header, a slice of a frame with
/// headers), so the frame stays small to move through the stack's queues.
///
/// Cloning a frame copies the inline headroom and bumps the reference counts
/// of the payload segments; it never copies payload bytes (nor allocates, for
/// a frame of at most one segment).
#[derive(Clone)]
pub struct Frame {
    head: [u8; HEADROOM],
    /// Headers occupy `head[head_start..]`.
    head_start: u8,
    /// The first payload segment; empty only when the frame has none.
    first: Bytes,
    /// Payload segments after `first` and the file region that ends the
    /// payload, if any; `None` when there are neither.
    // Boxed: 8 bytes inline keeps the frame at 128 bytes; the extra
    // allocation is only for multi-segment frames and file regions (rare).
    rest: Option<Box<Tail>>,
}

/// What a frame holds beyond its headers and first segment.
#[derive(Clone, Default)]
struct Tail {
    /// Byte segments after `first`, each non-empty, present only when
    /// `first` is non-empty. At most `INLINE_SEGMENTS - 1`.
    segs: Vec<Bytes>,
    /// The non-empty file region after every byte segment.
    file: Option<FileRegion>,
}

impl Default for Frame {
    fn default() -> Self {
        Self::new()
    }
}

impl Frame {
    /// An empty frame.
    pub const fn new() -> Self {
        Self {
            head: [0; HEADROOM],
            head_start: HEADROOM as u8,
            first: Bytes::new(),
            rest: None,
        }
    }

    /// A frame whose payload is `payload`, without copying it.
    #[inline]
    pub fn from_payload(payload: Bytes) -> Self {
        Self {
            head: [0; HEADROOM],
            head_start: HEADROOM as u8,
            first: if payload.is_empty() {
                Bytes::new()
            } else {
                payload
            },
            rest: None,
        }
    }

    /// A frame holding a copy of `data`: up to [`INLINE_PAYLOAD_MAX`] bytes
    /// are copied into the frame's own headroom (no allocation, no shared
    /// buffer to count references of; the layers' headers still fit in
    /// front), longer data into a new buffer.
    #[inline]
    pub fn copy_from_slice(data: &[u8]) -> Self {
        if data.len() <= INLINE_PAYLOAD_MAX {
            let mut frame = Self::new();
            frame.push_header(data);
            frame
        } else {
            Self::from_payload(Bytes::copy_from_slice(data))
        }
    }

    /// A frame whose payload is the file region `region` (headers go in
    /// front of it; see [`crate::file_region`] for where it may travel).
    pub fn from_file(region: FileRegion) -> Self {
        let mut frame = Self::new();
        frame.push_file(region);
        frame
    }

    /// Total length in bytes (headers and payload, a file region included).
    #[inline]
    pub fn len(&self) -> usize {
        // Not stored: one field less to move, and the sum is short.
        self.bytes_len() + self.file_region().map_or(0, FileRegion::len)
    }

    /// Length of the bytes held in memory: the headers and byte segments,
    /// not a file region.
    #[inline]
    pub fn bytes_len(&self) -> usize {
        self.header_len() + self.first.len() + self.rest().iter().map(Bytes::len).sum::<usize>()
    }

    /// Whether the frame holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.header_len() == 0 && self.first.is_empty() && self.rest.is_none()
    }

    /// The file region that ends the payload, if any.
    #[inline]
    pub fn file_region(&self) -> Option<&FileRegion> {
        self.rest.as_ref().and_then(|tail| tail.file.as_ref())
    }

    /// Whether the payload ends in a file region.
    #[inline]
    pub fn has_file_region(&self) -> bool {
        self.rest.as_ref().is_some_and(|tail| tail.file.is_some())
    }

    /// Appends `region` as the end of the payload (an empty one is
    /// ignored).
    ///
    /// # Panics
    ///
    /// If the frame already ends in a file region.
    pub fn push_file(&mut self, region: FileRegion) {
        if region.is_empty() {
            return;
        }
        let tail = self.rest.get_or_insert_with(Default::default);
        assert!(tail.file.is_none(), "a frame holds one file region");
        tail.file = Some(region);
    }

    /// Reads the file region, if any, into memory: the frame then holds
    /// the same bytes as ordinary segments. A sender calls it before a
    /// stack or driver that does not carry regions.
    ///
    /// # Errors
    ///
    /// As [`FileRegion::read`]; the frame is then unchanged.
    pub fn load_file_region(&mut self) -> std::io::Result<()> {
        let Some(region) = self.file_region() else {
            return Ok(());
        };
        let bytes = region.read()?;
        if let Some(tail) = self.rest.as_mut() {
            tail.file = None;
        }
        self.drop_empty_tail();
        self.push_payload(bytes);
        Ok(())
    }

    /// `rest` back to `None` when it holds nothing.
    fn drop_empty_tail(&mut self) {
        if self
            .rest
            .as_ref()
            .is_some_and(|tail| tail.segs.is_empty() && tail.file.is_none())
        {
            self.rest = None;
        }
    }

    /// Bytes of headers currently held in the inline headroom.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADROOM - self.head_start as usize
    }

    /// Number of byte payload segments.
    fn segments(&self) -> usize {
        if self.first.is_empty() {
            0
        } else {
            1 + self.rest().len()
        }
    }

    /// The payload segments after the first.
    #[inline]
    fn rest(&self) -> &[Bytes] {
        self.rest
            .as_deref()
            .map_or(&[], |tail| tail.segs.as_slice())
    }

    /// The payload segments after the first, allocated on first use.
    fn rest_mut(&mut self) -> &mut Vec<Bytes> {
        &mut self.rest.get_or_insert_with(Default::default).segs
    }

    /// The payload segments in order.
    fn segs(&self) -> impl Iterator<Item = &Bytes> + '_ {
        std::iter::once(&self.first)
            .filter(|s| !s.is_empty())
            .chain(self.rest().iter())
    }

    /// Merges the last two payload segments into one (allocates; only for
    /// chains at [`INLINE_SEGMENTS`], so there are at least two).
    fn coalesce_tail(&mut self) {
        let Some(tail) = self.rest.as_mut() else {
            return;
        };
        let rest = &mut tail.segs;
        let Some(last) = rest.pop() else {
            return;
        };
        let prev = rest.last_mut().unwrap_or(&mut self.first);
        let mut joined = BytesMut::with_capacity(prev.len() + last.len());
        joined.extend_from_slice(prev);
        joined.extend_from_slice(&last);
        *prev = joined.freeze();
        self.drop_empty_tail();
    }

    /// Appends a payload segment at the end of the chain, without copying it
    /// unless the chain is already [`INLINE_SEGMENTS`] long (then the last
    /// segment and `segment` are coalesced into one).
    ///
    /// # Panics
    ///
    /// If the frame ends in a file region: nothing can follow one.
    pub fn push_payload(&mut self, segment: Bytes) {
        if segment.is_empty() {
            return;
        }
        assert!(
            !self.has_file_region(),
            "a file region ends a frame's payload"
        );
        let n = self.segments();
        if n == 0 {
            self.first = segment;
        } else {
            self.rest_mut().push(segment);
            if n == INLINE_SEGMENTS {
                self.coalesce_tail();
            }
        }
    }

    /// Prepends `header` in front of everything the frame holds.
    ///
    /// Copies `header` into the inline headroom; if it does not fit, the
    /// headroom and `header` are moved into a new leading segment (allocates).
    #[inline]
    pub fn push_header(&mut self, header: &[u8]) {
        let start = self.head_start as usize;
        if header.len() <= start {
            let new_start = start - header.len();
            self.head[new_start..start].copy_from_slice(header);
            self.head_start = new_start as u8;
        } else {
            self.spill_headroom(header);
        }
    }

    fn spill_headroom(&mut self, header: &[u8]) {
        let mut seg = BytesMut::with_capacity(header.len() + self.header_len());
        seg.extend_from_slice(header);
        seg.extend_from_slice(&self.head[self.head_start as usize..]);
        self.head_start = HEADROOM as u8;
        if self.segments() == INLINE_SEGMENTS {
            // Make room: coalesce the last two segments.
            self.coalesce_tail();
        }
        let old = std::mem::replace(&mut self.first, seg.freeze());
        if !old.is_empty() {
            self.rest_mut().insert(0, old);
        }
    }

    /// The contiguous chunks of the frame in order: the headroom (if
    /// non-empty), then each payload segment (not a file region, which
    /// follows them: [`file_region`](Self::file_region)).
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let head = &self.head[self.head_start as usize..];
        std::iter::once(head)
            .filter(|h| !h.is_empty())
            .chain(self.segs().map(|s| &s[..]))
    }

    /// Fills `dst` with one [`IoSlice`] per chunk for a vectored write and
    /// returns how many were filled (at most `dst.len()`; a driver passes
    /// `1 + INLINE_SEGMENTS` slots to always get them all).
    pub fn io_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, chunk) in dst.iter_mut().zip(self.chunks()) {
            *slot = IoSlice::new(chunk);
            n += 1;
        }
        n
    }

    /// The headers in the inline headroom (the bytes before the payload).
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.head[self.head_start as usize..]
    }

    /// The payload's byte segments in order, shared, not copied (a file
    /// region that ends the payload is not among them:
    /// [`file_region`](Self::file_region)). With [`header`](Self::header),
    /// what a transport that takes owned buffers (QUIC streams) writes
    /// without copying a large payload.
    pub fn payload_segments(&self) -> impl Iterator<Item = &Bytes> + '_ {
        self.segs()
    }

    /// The first contiguous chunk (empty for an empty frame).
    pub fn first_chunk(&self) -> &[u8] {
        if self.head_start as usize != HEADROOM {
            &self.head[self.head_start as usize..]
        } else {
            &self.first
        }
    }

    /// The first `min(self.len(), scratch.len())` bytes of the frame:
    /// borrowed from the first chunk when it is long enough, otherwise copied
    /// into `scratch`. Used by layers to read their header without caring how
    /// the frame is split.
    pub fn prefix<'a>(&'a self, scratch: &'a mut [u8]) -> &'a [u8] {
        let want = scratch.len().min(self.len());
        let first = self.first_chunk();
        if first.len() >= want {
            return &first[..want];
        }
        let n = self.copy_prefix(&mut scratch[..want]);
        &scratch[..n]
    }

    /// Copies the first `dst.len()` bytes (or fewer if the frame is shorter)
    /// into `dst`, returning how many were copied.
    pub fn copy_prefix(&self, dst: &mut [u8]) -> usize {
        let mut n = 0;
        for chunk in self.chunks() {
            if n == dst.len() {
                break;
            }
            let take = chunk.len().min(dst.len() - n);
            dst[n..n + take].copy_from_slice(&chunk[..take]);
            n += take;
        }
        n
    }

    /// Removes the first `n` bytes (a header that has been read).
    ///
    /// # Panics
    ///
    /// If `n > self.len()`; layers check the length while parsing first.
    pub fn advance(&mut self, mut n: usize) {
        assert!(n <= self.len(), "advance past the end of a frame");
        let head = self.header_len();
        let from_head = n.min(head);
        self.head_start += from_head as u8;
        n -= from_head;
        while n > 0 && !self.first.is_empty() {
            if n < self.first.len() {
                self.first.advance(n);
                return;
            }
            n -= self.first.len();
            self.remove_first_segment();
        }
        if n > 0 {
            // The rest is in the file region (n <= the remaining length).
            if let Some(tail) = self.rest.as_mut() {
                if let Some(region) = tail.file.as_mut() {
                    region.advance(n);
                    if region.is_empty() {
                        tail.file = None;
                    }
                }
            }
            self.drop_empty_tail();
        }
    }

    fn remove_first_segment(&mut self) {
        self.first = match self.rest.as_mut() {
            Some(tail) if !tail.segs.is_empty() => tail.segs.remove(0),
            _ => Bytes::new(),
        };
        self.drop_empty_tail();
    }

    /// A new frame holding bytes `start..end` of this one, sharing the
    /// payload segments and the file region (bytes from the headroom are
    /// copied, they are few).
    ///
    /// # Panics
    ///
    /// If `start > end` or `end > self.len()`.
    pub fn slice(&self, start: usize, end: usize) -> Frame {
        assert!(
            start <= end && end <= self.len(),
            "frame slice out of range"
        );
        let mut out = Frame::new();
        let mut pos = 0;
        let head = &self.head[self.head_start as usize..];
        if !head.is_empty() {
            let (s, e) = (start.max(pos), end.min(pos + head.len()));
            if s < e {
                out.push_payload(Bytes::copy_from_slice(&head[s - pos..e - pos]));
            }
            pos += head.len();
        }
        for seg in self.segs() {
            let (s, e) = (start.max(pos), end.min(pos + seg.len()));
            if s < e {
                out.push_payload(seg.slice(s - pos..e - pos));
            }
            pos += seg.len();
            if pos >= end {
                break;
            }
        }
        if let Some(region) = self.file_region() {
            let (s, e) = (start.max(pos), end.min(pos + region.len()));
            if s < e {
                out.push_file(region.slice(s - pos, e - pos));
            }
        }
        out
    }

    /// The frame's bytes as one `Bytes`: free when it is a single payload
    /// segment with no headers (the usual case on the receive path),
    /// otherwise one allocation and copy. A file region is not read (it is
    /// not in memory): [`load_file_region`](Self::load_file_region) first.
    #[inline]
    pub fn into_bytes(self) -> Bytes {
        if self.header_len() == 0 && self.rest.is_none() {
            return self.first;
        }
        self.to_bytes()
    }

    /// Copies the frame's bytes (not a file region) into one new `Bytes`.
    pub fn to_bytes(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(self.len());
        self.extend_into(&mut buf);
        buf.freeze()
    }

    /// Appends every byte of the frame (not a file region) to `buf` (a
    /// driver's reusable write buffer).
    #[inline]
    pub fn extend_into(&self, buf: &mut BytesMut) {
        // Straight-line for the usual shape (headers + one segment), no
        // chunk iterator.
        buf.extend_from_slice(&self.head[self.head_start as usize..]);
        buf.extend_from_slice(&self.first);
        for seg in self.rest() {
            buf.extend_from_slice(seg);
        }
    }
}

impl From<Bytes> for Frame {
    #[inline]
    fn from(payload: Bytes) -> Self {
        Frame::from_payload(payload)
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("len", &self.len())
            .field("header_len", &self.header_len())
            .field("segments", &self.segments())
            .field("file_region", &self.file_region())
            .finish()
    }
}

/// Equal bytes, and the same file region (the same range of the same open
/// file) or none.
impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        let same_region = match (self.file_region(), other.file_region()) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_as(b),
            _ => false,
        };
        same_region && self.len() == other.len() && self.to_bytes() == other.to_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(frame: &Frame) -> Vec<u8> {
        frame.chunks().flatten().copied().collect()
    }

    #[test]
    fn frame_stays_small_to_move_through_queues() {
        // Headroom, one inline segment, the out-of-line tail: 128 bytes.
        assert!(
            std::mem::size_of::<Frame>() <= 128,
            "{}",
            std::mem::size_of::<Frame>()
        );
    }

    #[test]
    fn a_small_copied_payload_lives_in_the_headroom_and_takes_headers() {
        let mut frame = Frame::copy_from_slice(b"small");
        assert_eq!(frame.chunks().count(), 1);
        frame.push_header(&[0; HEADROOM - INLINE_PAYLOAD_MAX]);
        frame.push_header(b"hd");
        let mut expected = b"hd".to_vec();
        expected.extend_from_slice(&[0; HEADROOM - INLINE_PAYLOAD_MAX]);
        expected.extend_from_slice(b"small");
        assert_eq!(bytes_of(&frame), expected);
        let big = vec![7u8; INLINE_PAYLOAD_MAX + 1];
        assert_eq!(bytes_of(&Frame::copy_from_slice(&big)), big);
    }

    #[test]
    fn headers_are_prepended_in_front_of_payload_without_copying_it() {
        let payload = Bytes::from_static(b"payload");
        let mut frame = Frame::from_payload(payload.clone());
        frame.push_header(b"B");
        frame.push_header(b"AA");
        assert_eq!(bytes_of(&frame), b"AABpayload");
        assert_eq!(frame.len(), 10);
        assert_eq!(frame.chunks().count(), 2);
        let last = frame.chunks().last().unwrap_or_default();
        assert_eq!(last.as_ptr(), payload.as_ptr());
    }

    #[test]
    fn advance_strips_headers_and_returns_the_original_payload_buffer() {
        let payload = Bytes::from_static(b"xyz");
        let mut frame = Frame::from_payload(payload.clone());
        frame.push_header(b"hdr");
        frame.advance(3);
        let out = frame.into_bytes();
        assert_eq!(out.as_ptr(), payload.as_ptr());
    }

    #[test]
    fn oversized_header_spills_into_a_segment() {
        let mut frame = Frame::from_payload(Bytes::from_static(b"p"));
        frame.push_header(&[1; 90]);
        frame.push_header(&[2; 20]);
        let mut want = vec![2; 20];
        want.extend([1; 90]);
        want.push(b'p');
        assert_eq!(bytes_of(&frame), want);
        assert_eq!(frame.len(), 111);
    }

    #[test]
    fn too_many_segments_coalesce_the_tail() {
        let mut frame = Frame::new();
        for i in 0..10u8 {
            frame.push_payload(Bytes::from(vec![i; 3]));
        }
        assert_eq!(frame.len(), 30);
        let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 3]).collect();
        assert_eq!(bytes_of(&frame), want);
    }

    #[test]
    fn prefix_reads_across_chunk_boundaries() {
        let mut frame = Frame::from_payload(Bytes::from_static(b"cdef"));
        frame.push_header(b"ab");
        let mut scratch = [0; 4];
        assert_eq!(frame.prefix(&mut scratch), b"abcd");
        let mut big = [0; 64];
        assert_eq!(frame.prefix(&mut big), b"abcdef");
    }

    fn region_of(bytes: &[u8]) -> FileRegion {
        use std::io::Write;
        let mut file = tempfile::tempfile().expect("temporary file");
        file.write_all(bytes).expect("write the test file");
        FileRegion::new(std::sync::Arc::new(file), 0, bytes.len())
    }

    #[test]
    fn a_file_region_ends_the_payload_behind_headers_and_bytes() {
        let mut frame = Frame::from_payload(Bytes::from_static(b"head "));
        frame.push_file(region_of(b"file body"));
        frame.push_header(b"H:");
        assert_eq!(frame.len(), 16);
        assert_eq!(frame.bytes_len(), 7);
        assert_eq!(bytes_of(&frame), b"H:head ");
        // Written in parts: the bytes, then into the region.
        let mut rest = frame.clone();
        rest.advance(9);
        assert_eq!(rest.bytes_len(), 0);
        assert_eq!(rest.len(), 7);
        let region = rest.file_region().expect("region left");
        assert_eq!(&region.read().expect("read")[..], b"le body");
        rest.advance(7);
        assert!(rest.is_empty());
        // A slice across the boundary keeps both kinds.
        let mut slice = frame.slice(5, 12);
        assert_eq!(bytes_of(&slice), b"d ");
        slice.load_file_region().expect("read");
        assert_eq!(bytes_of(&slice), b"d file ");
        assert!(!slice.has_file_region());
    }

    #[test]
    fn loading_a_region_gives_the_same_bytes_as_ordinary_segments() {
        let mut frame = Frame::from_file(region_of(b"0123456789"));
        frame.push_header(b"hdr");
        frame.load_file_region().expect("read");
        assert_eq!(frame.len(), 13);
        assert_eq!(frame.to_bytes(), Bytes::from_static(b"hdr0123456789"));
    }

    #[test]
    fn slice_shares_payload_and_copies_header_bytes() {
        let mut frame = Frame::from_payload(Bytes::from_static(b"0123456789"));
        frame.push_header(b"HH");
        assert_eq!(bytes_of(&frame.slice(1, 5)), b"H012");
        assert_eq!(bytes_of(&frame.slice(4, 12)), b"23456789");
        assert_eq!(frame.slice(3, 3).len(), 0);
    }
}
