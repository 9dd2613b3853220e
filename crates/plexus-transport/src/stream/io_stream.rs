//! [`IoStream`]: any [`AsyncRead`] + [`AsyncWrite`] as a [`StreamSocket`],
//! so a byte-stream transport of one's own (a pipe, a `tokio::io::duplex`,
//! a tunnel) runs on the same driver, stack path and sender turns as tcp.
//!
//! Poll-based I/O has no readiness without a read or a write, so the
//! adapter keeps a read-ahead buffer (filled when the driver waits for
//! readability) and a write buffer (filled by `try_write_vectored`, up to
//! [`WRITE_AHEAD`] bytes, and written right away as far as the stream
//! takes it). A write that cannot finish at once is finished by the
//! driver: `pending_write` tells it, and it waits for `writable`.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::StreamSocket;

/// Bytes asked of the stream per read.
const READ_CHUNK: usize = 16 << 10;
/// Bytes the adapter accepts for writing beyond what the stream took.
const WRITE_AHEAD: usize = 256 << 10;

/// An [`AsyncRead`] + [`AsyncWrite`] stream, adapted.
pub(crate) struct IoStream<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    io: T,
    /// Read from the stream, not yet taken by the driver.
    read_ahead: BytesMut,
    /// The stream reported its end (or an error, kept for the next read).
    read_end: Option<io::Result<()>>,
    /// Accepted by `try_write_vectored`, not yet taken by the stream.
    write_behind: BytesMut,
}

impl<T> IoStream<T> {
    pub(crate) fn new(io: T) -> Self {
        Self {
            state: Mutex::new(State {
                io,
                read_ahead: BytesMut::new(),
                read_end: None,
                write_behind: BytesMut::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic inside the user's stream leaves it to report its own
        // state on the next call.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> State<T> {
    /// Reads into the read-ahead buffer: ready once it holds bytes or the
    /// stream ended.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.read_ahead.is_empty() || self.read_end.is_some() {
            return Poll::Ready(Ok(()));
        }
        // Zeroed, not uninitialised: this crate has no unsafe code.
        let len = self.read_ahead.len();
        self.read_ahead.resize(len + READ_CHUNK, 0);
        let mut buf = ReadBuf::new(&mut self.read_ahead[len..]);
        let polled = Pin::new(&mut self.io).poll_read(cx, &mut buf);
        let n = buf.filled().len();
        self.read_ahead.truncate(len + n);
        match polled {
            Poll::Ready(Ok(())) => {
                if n == 0 {
                    self.read_end = Some(Ok(()));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                self.read_end = Some(Err(io::Error::new(e.kind(), e.to_string())));
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Writes the write-behind buffer: ready once it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.write_behind.is_empty() {
            match Pin::new(&mut self.io).poll_write(cx, &self.write_behind) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.write_behind.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> StreamSocket for IoStream<T> {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        std::future::poll_fn(|cx| self.lock().poll_fill(cx))
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
        std::future::poll_fn(|cx| self.lock().poll_drain(cx))
    }

    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let mut state = self.lock();
        if !state.read_ahead.is_empty() {
            let n = state.read_ahead.len();
            buf.extend_from_slice(&state.read_ahead.split());
            return Ok(n);
        }
        match state.read_end.take() {
            Some(Ok(())) => {
                state.read_end = Some(Ok(()));
                Ok(0)
            }
            Some(Err(e)) => Err(e),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut state = self.lock();
        let room = WRITE_AHEAD.saturating_sub(state.write_behind.len());
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut taken = 0;
        for buf in bufs {
            let n = buf.len().min(room - taken);
            state.write_behind.extend_from_slice(&buf[..n]);
            taken += n;
            if taken == room {
                break;
            }
        }
        // Written as far as the stream takes it now, from whichever task
        // this is; a stream that is not ready keeps the rest for the
        // driver (which is woken for it: `pending_write`). The no-op waker
        // may replace the driver's registration with the stream; the
        // driver polls `writable` again before it waits.
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(Err(e)) = state.poll_drain(&mut cx) {
            return Err(e);
        }
        Ok(taken)
    }

    fn shutdown_write(&self) -> impl Future<Output = io::Result<()>> + Send {
        std::future::poll_fn(|cx| {
            let mut state = self.lock();
            std::task::ready!(state.poll_drain(cx))?;
            Pin::new(&mut state.io).poll_shutdown(cx)
        })
    }

    fn pending_write(&self) -> bool {
        !self.lock().write_behind.is_empty()
    }

    fn flush_pending(&self) -> io::Result<()> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.lock().poll_drain(&mut cx) {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }
}
