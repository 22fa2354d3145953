//! [`FrameIo`]: a socket with a small read buffer and a write buffer, read
//! through the pure decoders of [`crate::codec`] with a timeout per read.
//! Shared by the server's sessions and the client. [`TransactionBudget`]
//! meters what a receiving transaction holds against the hub's in-flight
//! byte budget, for the RAW session and the HTTP transport alike.

use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use tidegate_hub::{BudgetPermit, InflightBudget};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use thiserror::Error;

use crate::codec::{CodecError, DataPacket, Decoded, PacketDecoder, PacketLimits};

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

/// Bytes requested from the socket per read of a small message.
const READ_CHUNK: usize = 4096;
/// Most bytes one read requests while a large packet field arrives: big
/// enough that a 16 MiB FlowFile takes 256 reads, small enough that what is
/// reserved ahead of the data stays modest.
const MAX_PACKET_READ: usize = 64 << 10;
/// A read buffer with more capacity than this is replaced by a small one
/// once drained, so an idle connection does not keep the tail of a large
/// FlowFile's allocation.
const KEEP_CAPACITY: usize = 64 << 10;
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

    /// Bytes received and not yet decoded.
    pub(crate) fn buffered(&self) -> usize {
        self.rbuf.len()
    }

    /// Reads at most `at_most` bytes (at least one) into the read buffer.
    /// Never more: a metered caller took exactly that from its budget.
    pub(crate) async fn fill(
        &mut self,
        at_most: usize,
        timeout: Duration,
        what: &'static str,
    ) -> Result<usize, FrameError> {
        let at_most = at_most.max(1);
        if self.rbuf.capacity() - self.rbuf.len() < at_most {
            self.rbuf.reserve(at_most);
        }
        let mut room = (&mut self.rbuf).limit(at_most);
        match tokio::time::timeout(timeout, self.stream.read_buf(&mut room)).await {
            Err(_) => Err(FrameError::Timeout(what)),
            Ok(Err(e)) => Err(FrameError::Io(e)),
            Ok(Ok(0)) => Err(FrameError::Eof),
            Ok(Ok(n)) => {
                self.stream.quick_ack();
                Ok(n)
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
            self.fill(READ_CHUNK, timeout, what).await?;
        }
    }

    /// Decodes what has arrived of the packet in progress; the packet once
    /// it is complete. Never reads.
    pub(crate) fn next_packet(
        &mut self,
        decoder: &mut PacketDecoder,
        crc: &mut crc32fast::Hasher,
    ) -> Result<Option<(DataPacket, usize)>, CodecError> {
        let done = decoder.decode(&mut self.rbuf, crc)?;
        if done.is_some() {
            release_drained(&mut self.rbuf);
        }
        Ok(done)
    }

    /// How many bytes the next read for `decoder` should ask for: what its
    /// current field still lacks, between one small read and
    /// [`MAX_PACKET_READ`].
    pub(crate) fn packet_read_size(&self, decoder: &PacketDecoder) -> usize {
        decoder
            .next_field_len()
            .saturating_sub(self.rbuf.len())
            .clamp(READ_CHUNK, MAX_PACKET_READ)
    }

    /// Reads one FlowFile packet (decompressing when `gzip`); feeds its
    /// uncompressed bytes to `crc` and returns the packet with their count.
    /// Unmetered: for the client, whose memory is its caller's business.
    pub(crate) async fn read_packet(
        &mut self,
        gzip: bool,
        limits: &PacketLimits,
        crc: &mut crc32fast::Hasher,
        timeout: Duration,
    ) -> Result<(DataPacket, usize), FrameError> {
        let mut decoder = PacketDecoder::new(gzip, *limits);
        loop {
            if let Some(p) = self.next_packet(&mut decoder, crc)? {
                return Ok(p);
            }
            let size = self.packet_read_size(&decoder);
            self.fill(size, timeout, "a packet").await?;
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

/// Replaces a drained buffer that grew large (to hold a big FlowFile) by a
/// small one. The large allocation now belongs to the FlowFile that was
/// split off it and is freed with it, not kept alive by the buffer.
pub(crate) fn release_drained(buf: &mut BytesMut) {
    if buf.capacity() > KEEP_CAPACITY && buf.len() <= READ_CHUNK {
        *buf = BytesMut::from(&buf[..]);
    }
}

/// Why a transaction could not take bytes from the in-flight budget.
#[derive(Debug, Error)]
pub(crate) enum BudgetError {
    /// The transaction alone would need more than the whole budget.
    #[error(
        "the transaction would hold {want} bytes, more than the whole in-flight byte budget of {total}"
    )]
    LargerThanBudget {
        /// Bytes the transaction would hold.
        want: usize,
        /// The budget's size.
        total: usize,
    },
    /// The budget stayed spent for the whole wait.
    #[error("no room in the in-flight byte budget for {more} more bytes within {wait:?} ({in_use} of {total} bytes in use)")]
    Timeout {
        /// Bytes asked for.
        more: usize,
        /// How long it waited.
        wait: Duration,
        /// Bytes held process-wide when it gave up.
        in_use: usize,
        /// The budget's size.
        total: usize,
    },
}

/// What one receiving transaction holds in memory — its finished FlowFiles,
/// the packet in progress and the undecoded input — taken from the hub's
/// [`InflightBudget`] before the bytes are read, and given back when the
/// transaction ends, whichever way (dropped with it). While the budget is
/// spent the reader waits instead of reading, so the socket buffers fill and
/// TCP flow control slows the sender.
///
/// The wait is bounded: transactions that each hold part of the budget and
/// each wait for more could otherwise wait for one another forever. One that
/// times out fails (and gives its bytes back), so the others move on.
#[derive(Debug)]
pub(crate) struct TransactionBudget {
    budget: InflightBudget,
    permit: BudgetPermit,
    /// Bytes of the finished packets.
    packets: usize,
    wait: Duration,
}

impl TransactionBudget {
    /// An empty hold on `budget`; each top-up waits at most `wait`.
    pub(crate) fn new(budget: &InflightBudget, wait: Duration) -> Self {
        TransactionBudget {
            budget: budget.clone(),
            permit: budget.empty(),
            packets: 0,
            wait,
        }
    }

    /// Records a finished packet of `bytes` the transaction now holds.
    pub(crate) fn add_packet(&mut self, bytes: usize) {
        self.packets += bytes;
    }

    /// Waits until the bytes taken cover the finished packets plus
    /// `pending` (the packet in progress, the undecoded input and the next
    /// read). Never gives bytes back: they return when the transaction ends.
    pub(crate) async fn cover(&mut self, pending: usize) -> Result<(), BudgetError> {
        let want = self.packets + pending;
        let have = self.permit.bytes();
        if want <= have {
            return Ok(());
        }
        let total = self.budget.total();
        if want > total {
            return Err(BudgetError::LargerThanBudget { want, total });
        }
        let more = want - have;
        match tokio::time::timeout(self.wait, self.budget.acquire(more)).await {
            Ok(p) => {
                self.permit.merge(p);
                Ok(())
            }
            Err(_) => Err(BudgetError::Timeout {
                more,
                wait: self.wait,
                in_use: self.budget.in_use(),
                total,
            }),
        }
    }
}
