//! One Forward connection, from its first byte to its close: the optional
//! shared-key handshake, then read → decode → publish → ack.
//!
//! Every event becomes one hub message; a chunk's events share one
//! [`AckGroup`], and the `{"ack": chunk}` is written only once the group
//! completed successfully. A failed group is never acked: the connection is
//! closed so the client retries elsewhere or later. At most
//! `max_inflight_chunks` chunks wait for their acks; while that many wait,
//! the connection does not read, so a stalled sink holds the client back
//! instead of growing memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use thiserror::Error;
use tidegate_hub::{AckGroup, DeliveryError, Hub, ListenerMetrics, Message, PublishError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::codec::decoder::Syntax;
use crate::codec::encode::write_ack;
use crate::codec::json::json_ack;
use crate::codec::transcode::{json_to_msgpack, msgpack_to_json};
use crate::codec::{DecodeError, Event, ForwardDecoder, Frame, FrameKind, Limits, RecordBytes};
use crate::config::{ForwardConfig, PayloadFormat};
use crate::handshake::{pong_refusal, ServerHandshake};
use crate::metrics::ForwardCounters;
use crate::topic::TopicMapper;

/// Why a connection was closed by the server.
#[derive(Debug, Error)]
pub enum ConnectionError {
    /// Reading or writing the socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
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
        /// The chunk id.
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

impl ConnectionError {
    /// The kind counted in the listener's error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectionError::Io(_) => "io",
            ConnectionError::Decode(e) => e.kind(),
            ConnectionError::Handshake(_) => "auth_failed",
            ConnectionError::HandshakeTimeout => "handshake_timeout",
            ConnectionError::Delivery { .. } => "delivery_failed",
            ConnectionError::AckTimeout(_) => "ack_timeout",
            ConnectionError::Publish(_) => "publish_refused",
        }
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
    /// Connection and error counters of the `forward` listener.
    pub metrics: ListenerMetrics,
    /// Event and chunk counters.
    pub counters: ForwardCounters,
    /// The handshake, when a shared key is configured.
    pub handshake: Option<ServerHandshake>,
}

type AckFuture = BoxFuture<'static, (String, Result<(), ConnectionError>)>;

/// Serves one connection until it closes, fails or `shutdown` fires.
pub async fn serve_connection<S>(
    mut stream: S,
    peer: SocketAddr,
    ctx: Arc<ServerContext>,
    shutdown: CancellationToken,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let cfg = &ctx.config;
    let mut buf = BytesMut::with_capacity(cfg.read_buffer_bytes);
    if let Some(hs) = &ctx.handshake {
        let timeout = Duration::from_millis(cfg.handshake_timeout_ms);
        tokio::time::timeout(timeout, handshake(&mut stream, &mut buf, hs, ctx.limits))
            .await
            .map_err(|_| ConnectionError::HandshakeTimeout)??;
    }
    let mut conn = Connection {
        ctx: ctx.clone(),
        decoder: ForwardDecoder::new(ctx.limits),
        events: Vec::new(),
        topics: TopicMapper::new(&cfg.topic_prefix),
        inflight: FuturesUnordered::new(),
        out: Vec::new(),
        failure: None,
    };
    let max_inflight = cfg.max_inflight_chunks.max(1);
    let mut eof = false;
    loop {
        while conn.inflight.len() < max_inflight {
            conn.events.clear();
            let Some(frame) = decode_next(&mut conn.decoder, &mut buf, &mut conn.events)? else {
                break;
            };
            conn.handle_frame(frame, peer).await?;
        }
        if eof && conn.inflight.len() < max_inflight {
            // The peer finished sending; answer what is still pending.
            if !buf.is_empty() {
                ctx.metrics.error("truncated");
                tracing::debug!(%peer, bytes = buf.len(), "forward: connection closed mid-message");
            }
            while let Some((chunk, res)) = conn.inflight.next().await {
                conn.queue_ack(&chunk, res);
            }
            conn.flush(&mut stream).await?;
            return conn.take_failure();
        }
        let can_read = !eof && conn.inflight.len() < max_inflight;
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let grace = Duration::from_millis(cfg.shutdown_drain_ms);
                let drain = async {
                    while let Some((chunk, res)) = conn.inflight.next().await {
                        conn.queue_ack(&chunk, res);
                    }
                };
                let _ = tokio::time::timeout(grace, drain).await;
                conn.flush(&mut stream).await?;
                return conn.take_failure();
            }
            Some((chunk, res)) = conn.inflight.next(), if !conn.inflight.is_empty() => {
                conn.queue_ack(&chunk, res);
                // Batch every other ack already done into the same write.
                while let Some(Some((chunk, res))) = conn.inflight.next().now_or_never() {
                    conn.queue_ack(&chunk, res);
                }
                // Delivered chunks are acked even when another one failed.
                conn.flush(&mut stream).await?;
                conn.take_failure()?;
            }
            r = read_more(&mut stream, &mut buf, cfg.read_buffer_bytes, conn.decoder.needed()), if can_read => {
                if r? == 0 {
                    eof = true;
                }
            }
        }
    }
}

/// Values above this size (or gzip-compressed ones, which may inflate to
/// `max_decompressed_bytes`) are decoded inside `block_in_place`.
const BLOCKING_DECODE_BYTES: usize = 4 * 1024 * 1024;

/// Cuts and decodes the next frame. A value that may take long to decode (a
/// large chunk, or any gzip chunk) is decoded inside `block_in_place` when the
/// runtime has several workers, so other connections keep being served.
fn decode_next(
    decoder: &mut ForwardDecoder,
    buf: &mut BytesMut,
    events: &mut Vec<Event>,
) -> Result<Option<Frame>, DecodeError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let Some(value) = decoder.next_value(buf)? else {
        return Ok(None);
    };
    let slow = value.len() >= BLOCKING_DECODE_BYTES || names_gzip(&value);
    let multi =
        || Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    let frame = if slow && multi() {
        tokio::task::block_in_place(|| decoder.decode_value(&value, events))
    } else {
        decoder.decode_value(&value, events)
    }?;
    Ok(Some(frame))
}

/// Whether the option map at the end of a message says `"gzip"` (a cheap
/// look at its last bytes, only to choose where to decode).
fn names_gzip(value: &[u8]) -> bool {
    let tail = &value[value.len().saturating_sub(64)..];
    tail.windows(5).any(|w| w == b"\xa4gzip")
}

/// Reads once into `buf`, growing it for at least `chunk` bytes or up to
/// `need` (the decoder's hint for a large value in progress).
async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    chunk: usize,
    need: usize,
) -> std::io::Result<usize> {
    let want = chunk.max(need.saturating_sub(buf.len()));
    if buf.capacity() - buf.len() < chunk.min(want) {
        buf.reserve(want);
    }
    stream.read_buf(buf).await
}

/// Runs the server side of HELO / PING / PONG.
async fn handshake<S>(
    stream: &mut S,
    buf: &mut BytesMut,
    hs: &ServerHandshake,
    limits: Limits,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (helo, bytes) = hs.helo();
    stream.write_all(&bytes).await?;
    stream.flush().await?;
    let mut decoder = ForwardDecoder::msgpack_only(limits);
    let ping = loop {
        if let Some(v) = decoder.next_value(buf)? {
            break v;
        }
        if read_more(stream, buf, 4096, decoder.needed()).await? == 0 {
            return Err(ConnectionError::Handshake(
                "connection closed before PING".into(),
            ));
        }
    };
    match hs.answer_ping(&helo, &ping) {
        Ok(pong) => {
            stream.write_all(&pong).await?;
            stream.flush().await?;
            Ok(())
        }
        Err(reason) => {
            stream.write_all(&pong_refusal(&reason)).await?;
            stream.flush().await?;
            let _ = stream.shutdown().await;
            Err(ConnectionError::Handshake(reason))
        }
    }
}

/// The state of one connection past its handshake.
struct Connection {
    ctx: Arc<ServerContext>,
    decoder: ForwardDecoder,
    events: Vec<Event>,
    topics: TopicMapper,
    inflight: FuturesUnordered<AckFuture>,
    out: Vec<u8>,
    failure: Option<ConnectionError>,
}

impl Connection {
    /// Publishes a frame's events; a chunk's wait joins `inflight`.
    async fn handle_frame(
        &mut self,
        frame: Frame,
        peer: SocketAddr,
    ) -> Result<(), ConnectionError> {
        let ctx = &*self.ctx;
        match frame.kind {
            FrameKind::Heartbeat => return Ok(()),
            FrameKind::Invalid(why) => {
                ctx.metrics.error("invalid_message");
                tracing::debug!(%peer, why, "forward: skipped a value that is no Forward message");
                return Ok(());
            }
            FrameKind::Events => {}
        }
        if frame.invalid_events > 0 {
            ctx.counters
                .invalid_events
                .inc_by(u64::from(frame.invalid_events));
            ctx.metrics.error("invalid_event");
            tracing::debug!(%peer, count = frame.invalid_events, "forward: skipped invalid events");
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
                ctx.metrics.error("bad_tag");
                ctx.counters.invalid_events.inc_by(self.events.len() as u64);
                tracing::debug!(%peer, error = %e, "forward: tag cannot become a topic; events skipped");
            }
        }
        if let (Some(chunk), Some(group)) = (frame.chunk, group) {
            let timeout = Duration::from_millis(ctx.config.ack_timeout_ms);
            self.inflight.push(
                async move {
                    let res = match tokio::time::timeout(timeout, group.wait()).await {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(error)) => Err(ConnectionError::Delivery {
                            chunk: chunk.clone(),
                            error,
                        }),
                        Err(_) => Err(ConnectionError::AckTimeout(chunk.clone())),
                    };
                    (chunk, res)
                }
                .boxed(),
            );
        }
        Ok(())
    }

    /// Queues the ack of a chunk whose wait ended well; a failed chunk is
    /// never acked and its error, once the acks of the others are written,
    /// ends the connection ([`Self::take_failure`]).
    fn queue_ack(&mut self, chunk: &str, res: Result<(), ConnectionError>) {
        if let Err(e) = res {
            self.ctx.counters.chunks_failed.inc();
            self.failure.get_or_insert(e);
            return;
        }
        self.ctx.counters.chunks_acked.inc();
        if self.decoder.syntax() == Syntax::Json {
            self.out.extend_from_slice(&json_ack(chunk));
        } else {
            write_ack(&mut self.out, chunk);
        }
    }

    /// The first delivery failure seen, which closes the connection.
    fn take_failure(&mut self) -> Result<(), ConnectionError> {
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn flush<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), ConnectionError> {
        if !self.out.is_empty() {
            stream.write_all(&self.out).await?;
            stream.flush().await?;
            self.out.clear();
        }
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
        let res = match group {
            Some(g) => ctx.hub.publish_acked(msg, g).await,
            None => ctx.hub.publish(msg).await,
        };
        if let Err(e) = res {
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
            let v: serde_json::Value =
                serde_json::from_slice(&b).map_err(|e| DecodeError::BadJson(e.to_string()))?;
            let mut out = Vec::with_capacity(b.len());
            json_to_msgpack(&v, &mut out);
            Bytes::from(out)
        }
    })
}
