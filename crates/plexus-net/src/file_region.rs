//! [`FileRegion`]: a byte range of an open file, carried by a [`Frame`](crate::Frame)
//! in place of its bytes, so that a driver can hand it to the kernel
//! (`sendfile`) without the bytes ever passing through user space.
//!
//! A region is the last part of a frame's payload
//! ([`Frame::from_file`](crate::Frame::from_file),
//! [`Frame::push_file`](crate::Frame::push_file)): headers go in front of it,
//! nothing behind. It only travels where everyone on the way says it can:
//!
//! - every layer of the stack passes it down unread
//!   ([`Layer::passes_file_regions`](crate::Layer::passes_file_regions), a
//!   layer that only prepends headers), and
//! - the driver writes it: it says so with
//!   [`Stack::accept_file_regions`](crate::Stack::accept_file_regions)
//!   (plexus-transport's TCP and Unix drivers do, with `sendfile`). A stack
//!   whose driver has not said so refuses regions, so a driver of one's own
//!   that writes [`Frame::chunks`](crate::Frame::chunks) never drops one.
//!
//! Anywhere else the sender reads the region into memory first
//! ([`Frame::load_file_region`](crate::Frame::load_file_region)) and the
//! frame goes on as ordinary bytes: a user's layer that transforms bytes
//! (compression, encryption) gets them, a layer of one's own that only adds
//! a header opts in the same way the built-in `http` layer does.
//!
//! The region is a view: the file is read (by the kernel or by
//! [`FileRegion::read`]) when the frame is written, not when it is made.
//! A file shortened in between makes that read come up short, which is an
//! error, never bytes of something else.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

/// A byte range `offset..offset + len` of a shared open file.
#[derive(Clone)]
pub struct FileRegion {
    file: Arc<File>,
    offset: u64,
    len: usize,
}

impl FileRegion {
    /// The region `offset..offset + len` of `file`.
    ///
    /// The file is shared: the region is read at its own offset (`pread`,
    /// `sendfile` with an explicit offset), never through the file's
    /// position, so any number of regions of one file may be in flight at
    /// once.
    pub fn new(file: Arc<File>, offset: u64, len: usize) -> Self {
        Self { file, offset, len }
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where the region starts in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-region `start..end` of this one (relative to its start).
    ///
    /// # Panics
    ///
    /// If `start > end` or `end > self.len()`.
    pub fn slice(&self, start: usize, end: usize) -> Self {
        assert!(
            start <= end && end <= self.len,
            "file region slice out of range"
        );
        Self {
            file: self.file.clone(),
            offset: self.offset + start as u64,
            len: end - start,
        }
    }

    /// Drops the first `n` bytes (written by a driver).
    ///
    /// # Panics
    ///
    /// If `n > self.len()`.
    pub fn advance(&mut self, n: usize) {
        assert!(n <= self.len, "advance past the end of a file region");
        self.offset += n as u64;
        self.len -= n;
    }

    /// Reads the region into memory.
    ///
    /// # Errors
    ///
    /// The OS error of the read; [`io::ErrorKind::UnexpectedEof`] if the
    /// file is now shorter than the region.
    pub fn read(&self) -> io::Result<Bytes> {
        let mut buf = BytesMut::zeroed(self.len);
        self.file.read_exact_at(&mut buf, self.offset)?;
        Ok(buf.freeze())
    }

    /// Whether two regions are the same range of the same open file.
    pub fn same_as(&self, other: &FileRegion) -> bool {
        Arc::ptr_eq(&self.file, &other.file) && self.offset == other.offset && self.len == other.len
    }
}

impl fmt::Debug for FileRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRegion")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(bytes: &[u8]) -> Arc<File> {
        let mut file = tempfile::tempfile().expect("temporary file");
        file.write_all(bytes).expect("write the test file");
        Arc::new(file)
    }

    #[test]
    fn a_region_reads_its_own_range_whatever_the_file_position() {
        let file = file_of(b"0123456789");
        let region = FileRegion::new(file, 2, 5);
        assert_eq!(&region.read().expect("read")[..], b"23456");
        let mut rest = region.slice(1, 5);
        rest.advance(2);
        assert_eq!(&rest.read().expect("read")[..], b"56");
    }

    #[test]
    fn a_region_past_the_end_of_its_file_is_an_error_not_other_bytes() {
        let region = FileRegion::new(file_of(b"short"), 2, 10);
        let error = region.read().expect_err("file too short");
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
