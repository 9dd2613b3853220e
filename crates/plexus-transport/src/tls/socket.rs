//! The TLS connection under a stream link: rustls between the link's
//! driver (or a sender taking its turn) and the TCP socket.

use std::future::Future;
use std::io::{self, BufRead, IoSlice, Read, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::BytesMut;
use rustls::Connection;
use tokio::net::TcpStream;

use crate::stream::{self, StreamSocket};

/// An established TLS connection as the stream driver sees it: plaintext
/// in and out, TLS records to and from the TCP socket. Used through a
/// shared reference by the driver and by senders taking its turn; the
/// rustls state is behind its own lock.
pub(super) struct TlsSocket {
    tcp: TcpStream,
    tls: Mutex<Connection>,
}

fn lock(tls: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock leaves rustls in a state it reports
    // as an error on the next call; no need to poison.
    tls.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes pending TLS records to `out` until none is left (`Ok`) or the
/// socket would block (`Err(WouldBlock)`).
fn flush_records(tls: &mut Connection, out: &mut dyn Write) -> io::Result<()> {
    while tls.wants_write() {
        if tls.write_tls(out)? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// Non-blocking `Read`/`Write` over the TCP socket, for rustls.
struct Raw<'a>(&'a TcpStream);

impl Read for Raw<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Raw<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsSocket {
    pub(super) fn new(tcp: TcpStream, tls: Connection) -> Self {
        Self {
            tcp,
            tls: Mutex::new(tls),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        lock(&self.tls)
    }

    /// Decrypted bytes (or the peer's close) wait in rustls: the socket need
    /// not be readable for the next read to make progress.
    fn has_input(&self) -> bool {
        match self.lock().process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
            // The next read reports it.
            Err(_) => true,
        }
    }

    /// Writes pending TLS records until none is left (`Ok`) or the socket
    /// would block (`Err(WouldBlock)`).
    fn flush(&self, tls: &mut Connection) -> io::Result<()> {
        flush_records(tls, &mut Raw(&self.tcp))
    }
}

/// Appends the plaintext rustls holds to `buf` (counting it in `n`) until
/// it holds no more (`Err(WouldBlock)`), the peer closed (`Ok`), or the
/// stream ended without `close_notify` (`Err(UnexpectedEof)`).
fn drain_plaintext(tls: &mut Connection, buf: &mut BytesMut, n: &mut usize) -> io::Result<()> {
    let mut reader = tls.reader();
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        let len = chunk.len();
        buf.extend_from_slice(chunk);
        reader.consume(len);
        *n += len;
    }
}

fn would_block_ok(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        r => r,
    }
}

impl StreamSocket for TlsSocket {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        let ready = self.has_input();
        async move {
            if ready {
                return Ok(());
            }
            self.tcp.readable().await
        }
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send {
        self.tcp.writable()
    }

    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let mut tls = self.lock();
        let mut n = 0;
        loop {
            // Plaintext rustls already holds comes first (it refuses new
            // records while its plaintext buffer is full). Copied out chunk
            // by chunk: no zeroed scratch space.
            match drain_plaintext(&mut tls, buf, &mut n) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The end (close_notify: Ok; TCP closed without it:
                // UnexpectedEof) is reported by the next call, after what
                // was read.
                _ if n > 0 => return Ok(n),
                Ok(()) => return Ok(0),
                Err(e) => return Err(e),
            }
            if n >= stream::READ_BUF {
                return Ok(n);
            }
            match tls.read_tls(&mut Raw(&self.tcp)) {
                // Ok(0), end of stream: the next drain says how it ended.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => return Ok(n),
                Err(e) => return Err(e),
            }
            if let Err(e) = tls.process_new_packets() {
                // Best effort: tell the peer why (the alert rustls queued).
                // The stream is corrupt: what it decrypted in this call is
                // dropped with the link.
                let _ = self.flush(&mut tls);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut tls = self.lock();
        // Records already sealed go first; new plaintext is taken only once
        // they are out, so rustls never holds more than one batch.
        self.flush(&mut tls)?;
        let n = tls.writer().write_vectored(bufs)?;
        would_block_ok(self.flush(&mut tls))?;
        Ok(n)
    }

    async fn shutdown_write(&self) -> io::Result<()> {
        self.lock().send_close_notify();
        loop {
            let flushed = {
                let mut tls = self.lock();
                match self.flush(&mut tls) {
                    Ok(()) => true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                    Err(e) => return Err(e),
                }
            };
            if flushed {
                break;
            }
            self.tcp.writable().await?;
        }
        socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write)
    }

    fn pending_write(&self) -> bool {
        self.lock().wants_write()
    }

    fn flush_pending(&self) -> io::Result<()> {
        let mut tls = self.lock();
        would_block_ok(self.flush(&mut tls))
    }
}
