//! One Forward connection's session, from its first byte to its close: the
//! optional shared-key handshake, then read → decode → publish → ack. The
//! listener core ([`tidegate_listener`]) has already accepted the socket,
//! checked the allow-list and the connection limit, and run TLS; every read
//! goes through the connection's [`Inbound`], which applies the idle and
//! partial-frame timeouts and draws the bytes from the hub's in-flight
//! budget.
//!
//! Every event becomes one hub message; a chunk's events share one
//! [`AckGroup`], and the `{"ack": chunk}` is written only once the group
//! completed successfully. A failed group is never acked: the connection is
//! closed so the client retries elsewhere or later. Each chunk's bytes stay
//! taken from the budget (its [`BudgetPermit`]) until its ack is written or
//! it failed. At most `max_inflight_chunks` chunks wait for their acks; while
//! that many wait, or while the budget is spent, the connection does not
//! read, so a stalled sink holds the client back instead of growing memory.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use thiserror::Error;
use tidegate_hub::{
    AckGroup, BudgetPermit, DeliveryError, Hub, InflightBudget, ListenerMetrics, Message,
    PublishError,
};
use tidegate_listener::inbound::{KEEP_CAPACITY_BYTES, MIN_READ_BYTES};
use tidegate_listener::{Connection, Inbound, ReadError, ReadReady};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::codec::decoder::Syntax;
use crate::codec::encode::write_ack;
use crate::codec::json::json_ack;
use crate::codec::transcode::{json_to_msgpack, msgpack_to_json};
use crate::codec::{DecodeError, Event, ForwardDecoder, Frame, FrameKind, Limits, RecordBytes};
use crate::config::{ForwardConfig, PayloadFormat, KEEP_EVENTS_CAPACITY};
use crate::handshake::{pong_refusal, ServerHandshake};
use crate::metrics::ForwardCounters;
use crate::topic::TopicMapper;

/// Largest PING accepted in the shared-key handshake, bytes (a real one is
/// a few hundred): an unauthenticated client cannot make the server buffer
/// a chunk-sized value.
pub const MAX_PING_BYTES: usize = 64 * 1024;

/// Why a connection was closed by the server.
#[derive(Debug, Error)]
pub enum ConnectionError {
    /// Reading or writing the socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The listener's idle or partial-frame timeout closed the connection
    /// (already counted by the listener core).
    #[error(transparent)]
    Timeout(ReadError),
    /// The client did not read its acks for the idle timeout.
    #[error("client read nothing for {0:?}: closed")]
    WriteTimeout(Duration),
    /// The stream broke the protocol or a limit.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The handshake failed (reason as sent in the PONG).
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The handshake did not finish in time.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// A chunk's sinks failed it; it was not acked.
    #[error("chunk {chunk:?} not delivered: {error}")]
    Delivery {
        /// The chunk id (lossily, for the log).
        chunk: String,
        /// The first failure.
        error: DeliveryError,
    },
    /// A chunk waited longer than `ack_timeout_ms`; it was not acked.
    #[error("chunk {0:?} not acknowledged by its sinks in time")]
    AckTimeout(String),
    /// The hub refused a publish.
    #[error("publish refused: {0}")]
    Publish(#[from] PublishError),
}

impl From<ReadError> for ConnectionError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => ConnectionError::Io(e),
            timeout => ConnectionError::Timeout(timeout),
        }
    }
}

impl ConnectionError {
    /// The kind counted in the listener's error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectionError::Io(_) => "io",
            ConnectionError::Timeout(e) => e.kind(),
            ConnectionError::WriteTimeout(_) => "write_timeout",
            ConnectionError::Decode(e) => e.kind(),
            ConnectionError::Handshake(_) => "auth_failed",
            ConnectionError::HandshakeTimeout => "handshake_timeout",
            ConnectionError::Delivery { .. } => "delivery_failed",
            ConnectionError::AckTimeout(_) => "ack_timeout",
            ConnectionError::Publish(_) => "publish_refused",
        }
    }

    /// True when the listener core counted it already (its read timeouts).
    fn counted_by_listener(&self) -> bool {
        matches!(self, ConnectionError::Timeout(_))
    }
}

/// What every connection of one server shares.
#[derive(Debug)]
pub struct ServerContext {
    /// Where events go.
    pub hub: Hub,
    /// The `[forward]` section.
    pub config: ForwardConfig,
    /// Codec limits from the config.
    pub limits: Limits,
    /// Event and chunk counters.
    pub counters: ForwardCounters,
    /// The handshake, when a shared key is configured.
    pub handshake: Option<ServerHandshake>,
}

/// A chunk whose wait for its sinks ended, with the budget its bytes hold.
struct ChunkDone {
    chunk: Bytes,
    result: Result<(), ConnectionError>,
    permit: BudgetPermit,
}

type AckFuture = BoxFuture<'static, ChunkDone>;

/// The session the listener core runs for each accepted connection: serves
/// it until it closes, fails or shutdown, counting and logging why it ended.
pub async fn run_session(conn: Connection, ctx: Arc<ServerContext>) {
    let Connection {
        mut stream,
        peer,
        inbound,
        shutdown,
        metrics,
        ..
    } = conn;
    let mut inbound = inbound.with_max_read(ctx.config.read_buffer_bytes);
    let served = serve_connection(&mut stream, &mut inbound, &ctx, &metrics, shutdown).await;
    if let Err(e) = served {
        if !e.counted_by_listener() {
            metrics.error(e.kind());
        }
        match &e {
            ConnectionError::Io(_) | ConnectionError::Timeout(_) => {
                tracing::debug!(%peer, error = %e, "forward: connection ended")
            }
            _ => tracing::warn!(%peer, error = %e, "forward: connection closed"),
        }
    }
}

/// Serves one connection until it closes, fails or `shutdown` fires. Every
/// read goes through `inbound`.
pub async fn serve_connection<S>(
    stream: &mut S,
    inbound: &mut Inbound,
    ctx: &ServerContext,
    metrics: &ListenerMetrics,
    shutdown: CancellationToken,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + ReadReady + Unpin,
{
    let cfg = &ctx.config;
    let write_timeout = inbound.idle_timeout();
    let mut buf = BytesMut::new();
    if let Some(hs) = &ctx.handshake {
        let limit = Duration::from_millis(cfg.handshake_timeout_ms);
        let shaking = handshake(stream, inbound, &mut buf, hs, ctx.limits, write_timeout);
        tokio::time::timeout(limit, shaking)
            .await
            .map_err(|_| ConnectionError::HandshakeTimeout)??;
    }
    let mut s = Session {
        ctx,
        metrics,
        decoder: ForwardDecoder::new(ctx.limits),
        events: Vec::new(),
        topics: TopicMapper::new(&cfg.topic_prefix),
        inflight: FuturesUnordered::new(),
        out: Vec::new(),
        written: Vec::new(),
        failure: None,
        write_timeout,
    };
    let max_inflight = cfg.max_inflight_chunks.max(1);
    let mut eof = false;
    loop {
        while s.inflight.len() < max_inflight {
            let Some((frame, permit)) = s.next_frame(&mut buf, inbound)? else {
                break;
            };
            s.handle_frame(frame, permit).await?;
        }
        release_spare_capacity(&mut buf);
        if eof && s.inflight.len() < max_inflight {
            // The peer finished sending; answer what is still pending.
            if !buf.is_empty() {
                metrics.error("truncated");
                tracing::debug!(bytes = buf.len(), "forward: connection closed mid-message");
            }
            while let Some(done) = s.inflight.next().await {
                s.queue_ack(done);
            }
            s.flush(stream).await?;
            return s.take_failure();
        }
        let can_read = !eof && s.inflight.len() < max_inflight;
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let grace = Duration::from_millis(cfg.shutdown_drain_ms);
                let drain = async {
                    while let Some(done) = s.inflight.next().await {
                        s.queue_ack(done);
                    }
                };
                let _ = tokio::time::timeout(grace, drain).await;
                s.flush(stream).await?;
                return s.take_failure();
            }
            Some(done) = s.inflight.next(), if !s.inflight.is_empty() => {
                s.queue_ack(done);
                // Batch every other ack already done into the same write.
                while let Some(Some(done)) = s.inflight.next().now_or_never() {
                    s.queue_ack(done);
                }
                // Delivered chunks are acked even when another one failed.
                s.flush(stream).await?;
                s.take_failure()?;
            }
            r = inbound.read(stream, &mut buf), if can_read => {
                if r? == 0 {
                    eof = true;
                }
            }
        }
    }
}

/// A buffer left holding only the start of the next value, but sized for
/// the burst before it, is copied into one that fits: a connection that
/// goes quiet mid-frame keeps a few KiB, not its largest read. (The
/// listener core releases a buffer that is empty.)
fn release_spare_capacity(buf: &mut BytesMut) {
    if buf.capacity() > KEEP_CAPACITY_BYTES && buf.len() <= MIN_READ_BYTES && !buf.is_empty() {
        *buf = BytesMut::from(&buf[..]);
    }
}

/// Values above this size (or gzip-compressed ones, which may inflate to
/// `max_decompressed_bytes`) are decoded inside `block_in_place`.
const BLOCKING_DECODE_BYTES: usize = 4 * 1024 * 1024;

/// Decodes one complete value; returns the frame and the budget its
/// decompressed bytes hold (empty unless it was gzip). A value that may
/// take long to decode (a large chunk, or any that may be gzip) is decoded
/// inside `block_in_place` when the runtime has several workers, so other
/// connections keep being served; there, each growth of a decompressed
/// chunk waits (at most `wait`) for its bytes of `budget`, so inflating
/// cannot take memory the budget does not count.
fn decode_value(
    decoder: &ForwardDecoder,
    value: &Bytes,
    events: &mut Vec<Event>,
    budget: &InflightBudget,
    wait: Option<Duration>,
) -> Result<(Frame, BudgetPermit), DecodeError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let mut inflated = budget.empty();
    let slow = value.len() >= BLOCKING_DECODE_BYTES || may_be_gzip(value);
    let multi =
        || Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    let frame = if slow && multi() {
        tokio::task::block_in_place(|| {
            let handle = Handle::current();
            let mut grant = |n: usize| {
                let permit = match budget.try_acquire(n) {
                    Some(p) => Some(p),
                    None => match wait {
                        Some(w) => handle
                            .block_on(tokio::time::timeout(w, budget.acquire(n)))
                            .ok(),
                        None => Some(handle.block_on(budget.acquire(n))),
                    },
                };
                let permit = permit.ok_or(DecodeError::NoBudget { wanted: n })?;
                inflated.merge(permit);
                Ok(())
            };
            decoder.decode_value_metered(value, events, &mut grant)
        })?
    } else {
        // A current-thread runtime (tests) cannot wait here: the budget
        // is taken if free, else the chunk is refused.
        let mut grant = |n: usize| {
            let permit = budget
                .try_acquire(n)
                .ok_or(DecodeError::NoBudget { wanted: n })?;
            inflated.merge(permit);
            Ok(())
        };
        decoder.decode_value_metered(value, events, &mut grant)?
    };
    Ok((frame, inflated))
}

/// Whether `value` may ask for gzip: the option's value `"gzip"` is those
/// four bytes however it is encoded (fixstr, str8, str16, str32), so a
/// value without them is never decompressed. (A record that merely
/// contains the word is decoded off the runtime needlessly, nothing
/// worse.)
fn may_be_gzip(value: &[u8]) -> bool {
    memchr::memmem::find(value, b"gzip").is_some()
}

/// Writes `bytes` and flushes, giving up when the client reads nothing for
/// `limit` (a client that never reads its acks must not hold the session).
async fn write_timed<S: AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    limit: Option<Duration>,
) -> Result<(), ConnectionError> {
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    match limit {
        None => Ok(write.await?),
        Some(limit) => match tokio::time::timeout(limit, write).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(ConnectionError::WriteTimeout(limit)),
        },
    }
}

/// Runs the server side of HELO / PING / PONG.
async fn handshake<S>(
    stream: &mut S,
    inbound: &mut Inbound,
    buf: &mut BytesMut,
    hs: &ServerHandshake,
    limits: Limits,
    write_timeout: Option<Duration>,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + ReadReady + Unpin,
{
    let (helo, bytes) = hs.helo();
    write_timed(stream, &bytes, write_timeout).await?;
    let mut decoder = ForwardDecoder::msgpack_only(Limits {
        max_frame_bytes: limits.max_frame_bytes.min(MAX_PING_BYTES),
        ..limits
    });
    // The PING's bytes are consumed, not taken: they go back to the budget
    // at the next read.
    let ping = loop {
        if let Some(v) = decoder.next_value(buf)? {
            break v;
        }
        if inbound.read(stream, buf).await? == 0 {
            return Err(ConnectionError::Handshake(
                "connection closed before PING".into(),
            ));
        }
    };
    match hs.answer_ping(&helo, &ping) {
        Ok(pong) => write_timed(stream, &pong, write_timeout).await,
        Err(reason) => {
            write_timed(stream, &pong_refusal(&reason), write_timeout).await?;
            let _ = stream.shutdown().await;
            Err(ConnectionError::Handshake(reason))
        }
    }
}

/// The state of one connection past its handshake.
struct Session<'a> {
    ctx: &'a ServerContext,
    metrics: &'a ListenerMetrics,
    decoder: ForwardDecoder,
    events: Vec<Event>,
    topics: TopicMapper,
    inflight: FuturesUnordered<AckFuture>,
    /// Acks not yet written.
    out: Vec<u8>,
    /// The budget of the chunks whose acks are in `out`: released once
    /// those acks are written.
    written: Vec<BudgetPermit>,
    failure: Option<ConnectionError>,
    write_timeout: Option<Duration>,
}

impl Session<'_> {
    /// Cuts and decodes the next frame, taking the budget of its bytes from
    /// `inbound`; `Ok(None)` when more bytes are needed.
    fn next_frame(
        &mut self,
        buf: &mut BytesMut,
        inbound: &mut Inbound,
    ) -> Result<Option<(Frame, BudgetPermit)>, DecodeError> {
        self.events.clear();
        let Some(value) = self.decoder.next_value(buf)? else {
            return Ok(None);
        };
        let mut permit = inbound.take(value.len());
        self.metrics.frames_in(1);
        let (frame, inflated) = decode_value(
            &self.decoder,
            &value,
            &mut self.events,
            inbound.budget(),
            inbound.read_timeout(),
        )?;
        // The decompressed bytes are held with the frame's (records may be
        // slices of them until their ack).
        permit.merge(inflated);
        Ok(Some((frame, permit)))
    }

    /// Publishes a frame's events; a chunk's wait joins `inflight`, holding
    /// `permit` until its ack is written. Without a chunk the bytes go back
    /// to the budget once published.
    async fn handle_frame(
        &mut self,
        frame: Frame,
        permit: BudgetPermit,
    ) -> Result<(), ConnectionError> {
        let ctx = self.ctx;
        match frame.kind {
            FrameKind::Heartbeat => return Ok(()),
            FrameKind::Invalid(why) => {
                self.metrics.error("invalid_message");
                tracing::debug!(why, "forward: skipped a value that is no Forward message");
                return Ok(());
            }
            FrameKind::Events => {}
        }
        if frame.invalid_events > 0 {
            ctx.counters
                .invalid_events
                .inc_by(u64::from(frame.invalid_events));
            self.metrics.error("invalid_event");
            tracing::debug!(
                count = frame.invalid_events,
                "forward: skipped invalid events"
            );
        }
        let group = frame.chunk.as_ref().map(|_| AckGroup::new());
        match self.topics.topic_for(&frame.tag) {
            Ok(topic) => {
                let topic = topic.to_owned();
                let n = self.events.len() as u64;
                publish_events(ctx, &topic, &mut self.events, group.as_ref()).await?;
                ctx.counters.events.inc_by(n);
            }
            Err(e) => {
                self.metrics.error("bad_tag");
                ctx.counters.invalid_events.inc_by(self.events.len() as u64);
                tracing::debug!(error = %e, "forward: tag cannot become a topic; events skipped");
            }
        }
        if self.events.capacity() > KEEP_EVENTS_CAPACITY {
            self.events = Vec::new();
        }
        if let (Some(chunk), Some(group)) = (frame.chunk, group) {
            let timeout = Duration::from_millis(ctx.config.ack_timeout_ms);
            self.inflight.push(
                async move {
                    let result = match tokio::time::timeout(timeout, group.wait()).await {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(error)) => Err(ConnectionError::Delivery {
                            chunk: String::from_utf8_lossy(&chunk).into_owned(),
                            error,
                        }),
                        Err(_) => Err(ConnectionError::AckTimeout(
                            String::from_utf8_lossy(&chunk).into_owned(),
                        )),
                    };
                    ChunkDone {
                        chunk,
                        result,
                        permit,
                    }
                }
                .boxed(),
            );
        }
        Ok(())
    }

    /// Queues the ack of a chunk whose wait ended well; a failed chunk is
    /// never acked (its budget goes back at once) and its error, once the
    /// acks of the others are written, ends the connection
    /// ([`Self::take_failure`]).
    fn queue_ack(&mut self, done: ChunkDone) {
        if let Err(e) = done.result {
            self.ctx.counters.chunks_failed.inc();
            self.failure.get_or_insert(e);
            return;
        }
        self.ctx.counters.chunks_acked.inc();
        if self.decoder.syntax() == Syntax::Json {
            // A JSON chunk id came from a JSON string: always UTF-8.
            self.out
                .extend_from_slice(&json_ack(&String::from_utf8_lossy(&done.chunk)));
        } else {
            write_ack(&mut self.out, &done.chunk);
        }
        self.written.push(done.permit);
    }

    /// The first delivery failure seen, which closes the connection.
    fn take_failure(&mut self) -> Result<(), ConnectionError> {
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes the queued acks, then releases those chunks' budget.
    async fn flush<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), ConnectionError> {
        if !self.out.is_empty() {
            write_timed(stream, &self.out, self.write_timeout).await?;
            self.out.clear();
        }
        self.written.clear();
        Ok(())
    }
}

/// Publishes `events` on `topic` (draining the vector), into `group` when
/// the frame carries a chunk.
async fn publish_events(
    ctx: &ServerContext,
    topic: &str,
    events: &mut Vec<Event>,
    group: Option<&AckGroup>,
) -> Result<(), ConnectionError> {
    // One topic check and route lookup for the whole chunk.
    let publisher = match ctx.hub.publisher_for(topic) {
        Ok(p) => p,
        Err(e) => {
            if let Some(g) = group {
                g.fail(DeliveryError::ShuttingDown);
            }
            return Err(e.into());
        }
    };
    let mut now = 0u64;
    for ev in events.drain(..) {
        let payload = payload_of(ev.record, ctx.config.payload, ctx.limits.max_depth)?;
        let timestamp_ns = if ev.time_ns != 0 {
            ev.time_ns
        } else {
            if now == 0 {
                now = tidegate_hub::message::now_ns();
            }
            now
        };
        let msg = Message {
            topic: topic.to_owned(),
            key: None,
            timestamp_ns,
            attributes: Vec::new(),
            payload,
            encoded: Default::default(),
        };
        if let Err(e) = publisher.publish(msg, group).await {
            if let Some(g) = group {
                g.fail(DeliveryError::ShuttingDown);
            }
            return Err(e.into());
        }
    }
    Ok(())
}

/// The payload of one record in the configured format.
fn payload_of(
    record: RecordBytes,
    format: PayloadFormat,
    max_depth: usize,
) -> Result<Bytes, DecodeError> {
    Ok(match (record, format) {
        (RecordBytes::Msgpack(b), PayloadFormat::Msgpack)
        | (RecordBytes::Json(b), PayloadFormat::Json) => b,
        (RecordBytes::Msgpack(b), PayloadFormat::Json) => {
            let mut out = Vec::with_capacity(b.len() + b.len() / 4 + 8);
            msgpack_to_json(&b, max_depth, &mut out)?;
            Bytes::from(out)
        }
        (RecordBytes::Json(b), PayloadFormat::Msgpack) => {
            let v =
                tidegate_json::from_slice(&b).map_err(|e| DecodeError::BadJson(e.to_string()))?;
            let mut out = Vec::with_capacity(b.len());
            json_to_msgpack(&v, &mut out);
            Bytes::from(out)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::may_be_gzip;

    /// Every way a client can say `"compressed": "gzip"` is seen, wherever
    /// the key sits in the option map and however long the map is: a
    /// missed one would inflate on a runtime worker.
    #[test]
    fn gzip_is_seen_whatever_the_encoding_and_key_order() {
        let fixstr = b"\xa4gzip".to_vec();
        let str8 = b"\xd9\x04gzip".to_vec();
        let str16 = b"\xda\x00\x04gzip".to_vec();
        let str32 = b"\xdb\x00\x00\x00\x04gzip".to_vec();
        for gzip in [fixstr, str8, str16, str32] {
            // compressed first, then a long pad key: far from the end.
            let mut frame = b"\x93\xa3app\xc4\x01\x00\x83\xaacompressed".to_vec();
            frame.extend_from_slice(&gzip);
            frame.extend_from_slice(b"\xa3pad\xd9\x50");
            frame.extend_from_slice(&[b'x'; 0x50]);
            frame.extend_from_slice(b"\xa5chunk\xa1c");
            assert!(may_be_gzip(&frame), "{frame:?}");
        }
        assert!(!may_be_gzip(b"\x93\xa3app\xc4\x01\x00\x81\xa5chunk\xa1c"));
    }
}
