//! `FrameIo`: a socket with a small read buffer and a write buffer, read
//! through the pure decoders of [`crate::codec`] with a timeout per read.
//! Shared by the server's sessions and the client; they differ in how bytes
//! are read (`ReadSide`): the server through the listener core's
//! [`Inbound`] (in-flight byte budget taken before each read, idle and
//! partial-message timeouts), the client straight from its socket.
//! `TransactionBudget` holds what a receiving transaction keeps in memory
//! against that budget until the transaction ends, for the RAW session and
//! the HTTP transport alike.

use std::io;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use tidegate_hub::{BudgetPermit, InflightBudget};
use tidegate_listener::{Inbound, ReadReady};
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

/// Why a read or write on a `FrameIo` failed.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The peer closed the connection.
    #[error("connection closed by the peer")]
    Eof,
    /// A read took longer than its timeout.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// A socket error; `TimedOut` when the listener core's idle or
    /// partial-message timeout closed the read (the core counted it).
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

/// How a [`FrameIo`] gets its bytes.
pub(crate) trait ReadSide<S> {
    /// Appends what one read of `stream` brings (at most `at_most` bytes
    /// where the side sizes reads by the caller's need) to `buf`; `Ok(0)` is
    /// end of stream.
    async fn read(
        &mut self,
        stream: &mut S,
        buf: &mut BytesMut,
        at_most: usize,
    ) -> io::Result<usize>;

    /// The budget of `n` bytes just consumed from the buffer, for the caller
    /// to hold with the data they became.
    fn take(&mut self, n: usize) -> BudgetPermit;
}

/// Straight from the socket, unmetered: the client, whose memory is its
/// caller's business.
#[derive(Debug, Default)]
pub(crate) struct Direct;

impl<S: AsyncRead + Unpin> ReadSide<S> for Direct {
    async fn read(
        &mut self,
        stream: &mut S,
        buf: &mut BytesMut,
        at_most: usize,
    ) -> io::Result<usize> {
        let at_most = at_most.max(1);
        if buf.capacity() - buf.len() < at_most {
            buf.reserve(at_most);
        }
        stream.read_buf(&mut (&mut *buf).limit(at_most)).await
    }

    fn take(&mut self, _n: usize) -> BudgetPermit {
        BudgetPermit::detached()
    }
}

/// Through the listener core: the bytes of each read are taken from the
/// hub's in-flight budget before reading (waiting while it is spent), and
/// its idle and partial-message timeouts apply (counted by the core, and
/// reported here as `TimedOut` errors). It sizes reads itself.
impl<S: AsyncRead + ReadReady + Unpin> ReadSide<S> for Inbound {
    async fn read(
        &mut self,
        stream: &mut S,
        buf: &mut BytesMut,
        _at_most: usize,
    ) -> io::Result<usize> {
        Ok(Inbound::read(self, stream, buf).await?)
    }

    fn take(&mut self, n: usize) -> BudgetPermit {
        Inbound::take(self, n)
    }
}

/// A socket read through decoders and written through a buffer.
pub(crate) struct FrameIo<S, R = Direct> {
    stream: S,
    side: R,
    rbuf: BytesMut,
    /// Packet bytes consumed from `rbuf` whose budget is not taken yet.
    consumed: usize,
    /// Bytes waiting to be written by [`FrameIo::flush`].
    pub(crate) wbuf: BytesMut,
}

impl<S> FrameIo<S, Direct> {
    /// Reads straight from `stream`.
    pub(crate) fn new(stream: S) -> Self {
        FrameIo::with_side(stream, Direct)
    }
}

impl<S, R> FrameIo<S, R> {
    /// Reads through `side`.
    pub(crate) fn with_side(stream: S, side: R) -> Self {
        FrameIo {
            stream,
            side,
            rbuf: BytesMut::new(),
            consumed: 0,
            wbuf: BytesMut::new(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + QuickAck, R: ReadSide<S>> FrameIo<S, R> {
    /// True when received bytes wait to be decoded.
    pub(crate) fn has_buffered(&self) -> bool {
        !self.rbuf.is_empty()
    }

    /// Bytes received and not yet decoded.
    pub(crate) fn buffered(&self) -> usize {
        self.rbuf.len()
    }

    /// Reads more bytes into the read buffer: at most `at_most` where the
    /// read side follows the caller's sizing, at least one.
    pub(crate) async fn fill(
        &mut self,
        at_most: usize,
        timeout: Duration,
        what: &'static str,
    ) -> Result<usize, FrameError> {
        let read = self.side.read(&mut self.stream, &mut self.rbuf, at_most);
        // Pinned where it is and polled once before any timer: the read
        // future (the listener core's, with its own timers inside) is large,
        // and moving it into a `Timeout` on every read cost a memcpy that
        // showed in the S2S server's profile; most reads of a busy
        // connection find their bytes already there.
        let done = {
            tokio::pin!(read);
            match futures::FutureExt::now_or_never(read.as_mut()) {
                Some(r) => Ok(r),
                None => tokio::time::timeout(timeout, read).await,
            }
        };
        match done {
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
    /// it is complete. Never reads. The budget of the bytes it consumed is
    /// handed over by [`FrameIo::take_consumed`].
    pub(crate) fn next_packet(
        &mut self,
        decoder: &mut PacketDecoder,
        crc: &mut crc32fast::Hasher,
    ) -> Result<Option<(DataPacket, usize)>, CodecError> {
        let before = self.rbuf.len();
        let done = decoder.decode(&mut self.rbuf, crc);
        self.consumed += before - self.rbuf.len();
        let done = done?;
        if done.is_some() {
            release_drained(&mut self.rbuf);
        }
        Ok(done)
    }

    /// The budget of the packet bytes consumed since the last call, to hold
    /// until the transaction ends; call it before the next read, which
    /// would otherwise give those bytes back to the pool.
    pub(crate) fn take_consumed(&mut self) -> BudgetPermit {
        let n = std::mem::take(&mut self.consumed);
        self.side.take(n)
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
    /// Holds no budget: for the client.
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
                drop(self.take_consumed());
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

/// What one receiving transaction holds in memory — its finished FlowFiles
/// and the packet in progress — against the hub's [`InflightBudget`], given
/// back when the transaction ends, whichever way (dropped with it). The
/// bytes themselves were taken before they were read, by the listener core
/// (RAW, [`TransactionBudget::keep`]) or by the `[http]` server's body
/// metering; what this adds on top is what decompression makes of them.
/// While the budget is spent the transaction waits instead of reading, so
/// the socket buffers fill and TCP flow control slows the sender.
///
/// The wait is bounded: transactions that each hold part of the budget and
/// each wait for more could otherwise wait for one another forever. One that
/// times out fails (and gives its bytes back), so the others move on.
#[derive(Debug)]
pub(crate) struct TransactionBudget {
    budget: InflightBudget,
    permit: BudgetPermit,
    wait: Duration,
}

impl TransactionBudget {
    /// An empty hold on `budget`; each top-up waits at most `wait`.
    pub(crate) fn new(budget: &InflightBudget, wait: Duration) -> Self {
        TransactionBudget {
            budget: budget.clone(),
            permit: budget.empty(),
            wait,
        }
    }

    /// Keeps bytes a reader already took from the budget.
    pub(crate) fn keep(&mut self, taken: BudgetPermit) {
        self.permit.merge(taken);
    }

    /// Everything held, to travel with the data it pays for.
    pub(crate) fn into_permit(self) -> BudgetPermit {
        self.permit
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.permit.bytes()
    }

    /// Fails when the bytes held plus one more read of `read` bytes exceed
    /// the whole budget: that read would wait for bytes this transaction
    /// holds itself, forever.
    pub(crate) fn ensure_room(&self, read: usize) -> Result<(), BudgetError> {
        let (want, total) = (self.permit.bytes() + read, self.budget.total());
        if want > total {
            return Err(BudgetError::LargerThanBudget { want, total });
        }
        Ok(())
    }

    /// Waits until the bytes held cover `total`. Never gives bytes back:
    /// they return when the transaction ends.
    pub(crate) async fn cover(&mut self, total: usize) -> Result<(), BudgetError> {
        let have = self.permit.bytes();
        if total <= have {
            return Ok(());
        }
        let size = self.budget.total();
        if total > size {
            return Err(BudgetError::LargerThanBudget {
                want: total,
                total: size,
            });
        }
        let more = total - have;
        let granted = match self.budget.try_acquire(more) {
            Some(p) => p,
            None => match tokio::time::timeout(self.wait, self.budget.acquire(more)).await {
                Ok(p) => p,
                Err(_) => {
                    return Err(BudgetError::Timeout {
                        more,
                        wait: self.wait,
                        in_use: self.budget.in_use(),
                        total: size,
                    })
                }
            },
        };
        self.permit.merge(granted);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidegate_hub::HubMetrics;
    use tidegate_listener::Activity;

    use super::*;
    use crate::codec::encode_packet;

    const T: Duration = Duration::from_secs(5);

    fn big_packet(content: usize) -> (DataPacket, BytesMut) {
        let p = DataPacket {
            attributes: vec![("filename".into(), "big".into())],
            content: Bytes::from((0..content).map(|i| i as u8).collect::<Vec<u8>>()),
        };
        let mut wire = BytesMut::new();
        encode_packet(&p, &mut wire);
        (p, wire)
    }

    /// Writes `wire` in `piece`-byte writes from another task.
    fn trickle(wire: BytesMut, piece: usize) -> tokio::io::DuplexStream {
        let (mut client, server) = tokio::io::duplex(64 << 10);
        tokio::spawn(async move {
            for p in wire.chunks(piece) {
                client.write_all(p).await.unwrap();
            }
            // Keep the stream open until the reader is done.
            tokio::time::sleep(T).await;
        });
        server
    }

    #[tokio::test]
    async fn a_trickled_packet_is_read_whole_and_the_buffer_shrinks_back() {
        let (p, wire) = big_packet(1 << 20);
        let want_crc = crc32fast::hash(&wire);
        let n = wire.len();
        let mut io = FrameIo::new(trickle(wire, 1024));
        let mut crc = crc32fast::Hasher::new();
        let got = io
            .read_packet(false, &PacketLimits::default(), &mut crc, T)
            .await
            .unwrap();
        assert_eq!(got, (p, n));
        assert_eq!(crc.finalize(), want_crc);
        assert!(
            io.rbuf.capacity() <= KEEP_CAPACITY,
            "read buffer kept {} bytes",
            io.rbuf.capacity()
        );
    }

    #[tokio::test]
    async fn packet_bytes_read_through_the_listener_core_stay_held_until_dropped() {
        let budget = InflightBudget::new(8 << 20);
        let inbound = Inbound::new(
            budget.clone(),
            None,
            None,
            Activity::new(),
            HubMetrics::default().listener("t"),
        );
        let (p, wire) = big_packet(1 << 20);
        let n = wire.len();
        let mut io = FrameIo::with_side(trickle(wire, 4096), inbound);
        let mut decoder = PacketDecoder::new(false, PacketLimits::default());
        let mut crc = crc32fast::Hasher::new();
        let mut held = TransactionBudget::new(&budget, T);
        let got = loop {
            let done = io.next_packet(&mut decoder, &mut crc).unwrap();
            held.keep(io.take_consumed());
            if let Some(done) = done {
                break done;
            }
            let size = io.packet_read_size(&decoder);
            io.fill(size, T, "a packet").await.unwrap();
        };
        assert_eq!(got, (p, n));
        assert_eq!(held.held(), n, "every byte of the packet is held");
        let in_use = budget.in_use();
        assert!(in_use >= n);
        drop(held);
        // What remains is the listener core's own hold on its read buffer.
        assert_eq!(budget.in_use(), in_use - n);
    }

    #[tokio::test]
    async fn cover_waits_for_room_then_fails_and_gives_everything_back_when_dropped() {
        let budget = InflightBudget::new(100 << 10);
        let hog = budget.acquire(100 << 10).await;
        let mut held = TransactionBudget::new(&budget, Duration::from_millis(50));
        let e = held.cover(10).await.unwrap_err();
        assert!(matches!(e, BudgetError::Timeout { more: 10, .. }), "{e}");
        drop(hog);
        held.cover(1000).await.unwrap();
        held.cover(10).await.unwrap();
        assert_eq!((held.held(), budget.in_use()), (1000, 1000));
        drop(held);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn a_transaction_larger_than_the_whole_budget_fails_at_once() {
        let budget = InflightBudget::new(100 << 10);
        let mut held = TransactionBudget::new(&budget, T);
        assert!(matches!(
            held.cover(200 << 10).await,
            Err(BudgetError::LargerThanBudget { .. })
        ));
        held.cover(90 << 10).await.unwrap();
        assert!(matches!(
            held.ensure_room(20 << 10),
            Err(BudgetError::LargerThanBudget { .. })
        ));
        assert_eq!(budget.in_use(), 90 << 10);
    }
}
