//! [`FrameIo`]: a socket with a small read buffer and a write buffer, read
//! through the pure decoders of [`crate::codec`] with a timeout per read.
//! Shared by the server's sessions and the client.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use thiserror::Error;

use crate::codec::{split_packet, CodecError, DataPacket, Decoded, PacketLimits};

/// A byte stream that can ask the kernel to acknowledge received data at
/// once. A peer that leaves Nagle's algorithm on (the stock Java client)
/// holds its next small write until our ACK; without this, Linux delays that
/// ACK up to 40 ms and every transaction pays for it.
pub trait QuickAck {
    /// Re-arms `TCP_QUICKACK` (a no-op for streams without a socket).
    fn quick_ack(&self) {}
}

impl QuickAck for tokio::net::TcpStream {
    fn quick_ack(&self) {
        let _ = socket2::SockRef::from(self).set_quickack(true);
    }
}

impl<S: QuickAck> QuickAck for tokio_rustls::server::TlsStream<S> {
    fn quick_ack(&self) {
        self.get_ref().0.quick_ack()
    }
}

impl<S: QuickAck> QuickAck for tokio_rustls::client::TlsStream<S> {
    fn quick_ack(&self) {
        self.get_ref().0.quick_ack()
    }
}

impl QuickAck for tokio::io::DuplexStream {}

/// Why a read or write on a [`FrameIo`] failed.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The peer closed the connection.
    #[error("connection closed by the peer")]
    Eof,
    /// A read took longer than its timeout.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// A socket error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// Bytes that are not Site-to-Site.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// Bytes requested from the socket per read.
const READ_CHUNK: usize = 4096;
/// Pending output above which writers should flush.
pub(crate) const FLUSH_ABOVE: usize = 64 << 10;

/// A socket read through decoders and written through a buffer.
pub(crate) struct FrameIo<S> {
    stream: S,
    rbuf: BytesMut,
    /// Bytes waiting to be written by [`FrameIo::flush`].
    pub(crate) wbuf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin + QuickAck> FrameIo<S> {
    pub(crate) fn new(stream: S) -> Self {
        FrameIo {
            stream,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
        }
    }

    /// True when received bytes wait to be decoded.
    pub(crate) fn has_buffered(&self) -> bool {
        !self.rbuf.is_empty()
    }

    async fn fill(&mut self, timeout: Duration, what: &'static str) -> Result<(), FrameError> {
        if self.rbuf.capacity() - self.rbuf.len() < 1024 {
            self.rbuf.reserve(READ_CHUNK);
        }
        match tokio::time::timeout(timeout, self.stream.read_buf(&mut self.rbuf)).await {
            Err(_) => Err(FrameError::Timeout(what)),
            Ok(Err(e)) => Err(FrameError::Io(e)),
            Ok(Ok(0)) => Err(FrameError::Eof),
            Ok(Ok(_)) => {
                self.stream.quick_ack();
                Ok(())
            }
        }
    }

    /// Reads until `decode` yields a value.
    pub(crate) async fn read<T>(
        &mut self,
        decode: impl Fn(&[u8]) -> Decoded<T>,
        timeout: Duration,
        what: &'static str,
    ) -> Result<T, FrameError> {
        loop {
            if let Some((v, n)) = decode(&self.rbuf)? {
                self.rbuf.advance(n);
                return Ok(v);
            }
            self.fill(timeout, what).await?;
        }
    }

    /// Reads one FlowFile packet (decompressing when `gzip`); feeds its
    /// uncompressed bytes to `crc` and returns the packet with their count.
    pub(crate) async fn read_packet(
        &mut self,
        gzip: bool,
        limits: &PacketLimits,
        crc: &mut crc32fast::Hasher,
        timeout: Duration,
    ) -> Result<(DataPacket, usize), FrameError> {
        loop {
            if let Some(p) = split_packet(&mut self.rbuf, gzip, limits, crc)? {
                return Ok(p);
            }
            self.fill(timeout, "a packet").await?;
        }
    }

    /// Writes everything buffered.
    pub(crate) async fn flush(&mut self) -> Result<(), FrameError> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        self.stream.flush().await?;
        Ok(())
    }

    /// Flushes if the write buffer has grown past [`FLUSH_ABOVE`].
    pub(crate) async fn flush_if_large(&mut self) -> Result<(), FrameError> {
        if self.wbuf.len() > FLUSH_ABOVE {
            self.flush().await?;
        }
        Ok(())
    }

    /// Closes the write side.
    pub(crate) async fn shutdown(&mut self) {
        let _ = self.stream.shutdown().await;
    }
}
