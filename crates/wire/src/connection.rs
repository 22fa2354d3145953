//! One `[wire]` connection: a reader that decodes frames and acts on them, and
//! a writer that owns the socket's write half and the connection's hub
//! subscriber. They run concurrently and meet only in [`Outbound`].
//!
//! - The reader never waits on the writer: replies go into the bounded
//!   [`Outbound`] buffer (overflow closes the connection), subscriber
//!   messages wait in the hub's bounded queue under its overflow policy.
//! - The writer coalesces everything pending — replies and up to
//!   `write_batch` subscriber messages — into one `write_all` per wake-up.
//! - A protocol error (oversize, unknown type, truncated or malformed frame)
//!   is answered with an ERROR frame naming it; the writer flushes it and
//!   half-closes, while the reader discards further input for a moment so the
//!   close does not turn into a reset that would destroy the ERROR in flight.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tidegate_hub::message::now_ns;
use tidegate_hub::{
    EncodedForm, Hub, ListenerMetrics, Pattern, PublishError, Subscriber, SubscriberOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::codec::{self, DecodeError};
use crate::frame::{ErrorCode, Frame, FrameType};
use crate::outbound::{Control, Outbound, Overflow};
use crate::WireConfig;

/// Read buffer growth step, bytes.
const READ_CHUNK: usize = 64 * 1024;
/// How long input is drained (and discarded) after a protocol error before
/// the socket is closed.
const LINGER: Duration = Duration::from_millis(500);
/// Most bytes discarded while lingering.
const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// Everything a connection needs from its listener.
#[derive(Clone)]
pub(crate) struct ConnectionContext {
    pub(crate) hub: Hub,
    pub(crate) config: Arc<WireConfig>,
    pub(crate) metrics: ListenerMetrics,
}

/// Serves one accepted socket until either side closes it or `shutdown` fires.
pub(crate) async fn serve(stream: TcpStream, ctx: ConnectionContext, shutdown: CancellationToken) {
    let _open = ctx.metrics.connection();
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("wire: set_nodelay failed: {e}");
    }
    let (rd, wr) = stream.into_split();
    let out = Outbound::new(ctx.config.max_outbound_bytes);
    let sub = ctx.hub.subscriber(SubscriberOptions {
        capacity: ctx.config.subscriber_capacity,
        overflow: ctx.config.overflow,
    });
    let cancel = shutdown.child_token();
    let reader = Reader {
        ctx: &ctx,
        out: &out,
        patterns: HashSet::new(),
    };
    tokio::join!(
        reader.run(rd, &cancel),
        write_loop(wr, &out, sub, &ctx, &cancel, &shutdown)
    );
}

/// Why the reader stopped.
enum ReadEnd {
    /// Clean end of stream, shutdown, or the writer gave up.
    Done,
    /// A protocol error was reported: drain input briefly, then close.
    Linger,
}

struct Reader<'a> {
    ctx: &'a ConnectionContext,
    out: &'a Outbound,
    /// The patterns this connection holds (bounds and deduplicates them).
    patterns: HashSet<String>,
}

impl Reader<'_> {
    async fn run(mut self, mut rd: OwnedReadHalf, cancel: &CancellationToken) {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let end = self.read_frames(&mut rd, &mut buf, cancel).await;
        self.out.close();
        if let ReadEnd::Linger = end {
            let mut discarded = 0usize;
            let _ = tokio::time::timeout(LINGER, async {
                while discarded < LINGER_BYTES {
                    buf.clear();
                    match rd.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => discarded += n,
                    }
                }
            })
            .await;
        }
    }

    async fn read_frames(
        &mut self,
        rd: &mut OwnedReadHalf,
        buf: &mut BytesMut,
        cancel: &CancellationToken,
    ) -> ReadEnd {
        loop {
            loop {
                match codec::decode_frame(buf, self.ctx.config.max_frame) {
                    Ok(Some(frame)) => {
                        if let Err(end) = self.handle(frame).await {
                            return end;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return self.protocol_error(&e),
                }
            }
            if buf.capacity() - buf.len() < READ_CHUNK / 4 {
                buf.reserve(READ_CHUNK);
            }
            let read = tokio::select! {
                r = rd.read_buf(buf) => r,
                _ = cancel.cancelled() => return ReadEnd::Done,
            };
            match read {
                Ok(0) if buf.is_empty() => return ReadEnd::Done,
                Ok(0) => {
                    return self.protocol_error(&DecodeError::EndedMidFrame {
                        received: buf.len(),
                    })
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("wire: read failed: {e}");
                    return ReadEnd::Done;
                }
            }
        }
    }

    fn protocol_error(&self, e: &DecodeError) -> ReadEnd {
        self.ctx.metrics.error(e.kind());
        tracing::debug!("wire: closing connection: {e}");
        let text = e.to_string();
        self.out
            .close_with(|b| codec::encode_error(e.code(), &text, b));
        ReadEnd::Linger
    }

    /// Reports a request error that leaves the connection open.
    fn request_error(&self, code: ErrorCode, kind: &str, text: &str) -> Result<(), ReadEnd> {
        self.ctx.metrics.error(kind);
        self.reply(|b| codec::encode_error(code, text, b))
    }

    /// Reports an error after which the connection is closed.
    fn fatal(&self, code: ErrorCode, kind: &str, text: &str) -> ReadEnd {
        self.ctx.metrics.error(kind);
        self.out.close_with(|b| codec::encode_error(code, text, b));
        ReadEnd::Linger
    }

    fn reply(&self, encode: impl FnOnce(&mut BytesMut)) -> Result<(), ReadEnd> {
        self.out.push(encode).map_err(|Overflow| self.overflowed())
    }

    fn overflowed(&self) -> ReadEnd {
        let text = format!(
            "more than {} bytes of replies are waiting: the client is not reading",
            self.ctx.config.max_outbound_bytes
        );
        self.fatal(ErrorCode::OutboundOverflow, "outbound_overflow", &text)
    }

    async fn handle(&mut self, frame: Frame) -> Result<(), ReadEnd> {
        match frame {
            Frame::Echo(e) => {
                if e.wants_reply() {
                    self.reply(|b| {
                        // The extra bytes are empty: encoding cannot fail.
                        let _ =
                            codec::encode_echo(e.options, e.send_time_ns, e.correlation_id, &[], b);
                    })?;
                }
                Ok(())
            }
            Frame::Publish(mut msg) => {
                if msg.timestamp_ns == 0 {
                    msg.timestamp_ns = now_ns();
                }
                match self.ctx.hub.publish(msg).await {
                    Ok(()) => Ok(()),
                    Err(PublishError::BadTopic(e)) => {
                        self.request_error(ErrorCode::BadTopic, "bad_topic", &e.to_string())
                    }
                    Err(e @ PublishError::ShuttingDown) => {
                        Err(self.fatal(ErrorCode::ShuttingDown, "shutting_down", &e.to_string()))
                    }
                }
            }
            Frame::Subscribe(p) => self.subscribe(p),
            Frame::Unsubscribe(p) => {
                if self.patterns.remove(&p) {
                    self.out
                        .control(Control::Unsubscribe(p))
                        .map_err(|Overflow| self.overflowed())?;
                }
                Ok(())
            }
            Frame::Ping(token) => self.reply(|b| codec::encode_token(FrameType::Pong, token, b)),
            Frame::Message(_) | Frame::Pong(_) | Frame::Error(_) => {
                let name = frame.frame_type().name();
                let text = format!("{name} frames are sent by the server only");
                Err(self.fatal(ErrorCode::MalformedFrame, "malformed_frame", &text))
            }
        }
    }

    fn subscribe(&mut self, pattern: String) -> Result<(), ReadEnd> {
        if let Err(e) = Pattern::parse(&pattern) {
            return self.request_error(ErrorCode::BadTopic, "bad_topic", &e.to_string());
        }
        if self.patterns.contains(&pattern) {
            return Ok(());
        }
        let max = self.ctx.config.max_subscriptions;
        if self.patterns.len() >= max {
            let text =
                format!("subscription to {pattern:?} refused: the limit is {max} per connection");
            return self.request_error(
                ErrorCode::TooManySubscriptions,
                "too_many_subscriptions",
                &text,
            );
        }
        self.patterns.insert(pattern.clone());
        self.out
            .control(Control::Subscribe(pattern))
            .map_err(|Overflow| self.overflowed())
    }
}

/// Writes replies and subscriber messages until the connection closes.
async fn write_loop(
    mut wr: OwnedWriteHalf,
    out: &Outbound,
    mut sub: Subscriber,
    ctx: &ConnectionContext,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
) {
    let batch = ctx.config.write_batch.max(1);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut msgs = Vec::with_capacity(batch);
    let mut control = Vec::new();
    loop {
        let mut closing = out.take(&mut buf, &mut control);
        for c in control.drain(..) {
            match c {
                Control::Subscribe(p) => {
                    // Validated by the reader; a failure here cannot happen.
                    let _ = sub.subscribe(&p);
                }
                Control::Unsubscribe(p) => {
                    sub.unsubscribe(&p);
                }
            }
        }
        let room = batch.saturating_sub(msgs.len());
        if let Err(e) = sub.try_recv_many(&mut msgs, room) {
            if msgs.is_empty() {
                ctx.metrics.error("slow_consumer");
                codec::encode_error(ErrorCode::SlowConsumer, &e.to_string(), &mut buf);
                closing = true;
            }
        }
        for m in msgs.drain(..) {
            // Encoded once per message, whichever of its subscribers' writers
            // gets there first; the others copy the shared bytes.
            let frame = m.encoded(EncodedForm::WireMessage, |m| {
                let mut one = BytesMut::new();
                codec::encode_message(FrameType::Message, m, &mut one).map(|()| one.freeze())
            });
            match frame {
                Ok(bytes) => buf.extend_from_slice(&bytes),
                Err(e) => {
                    ctx.metrics.error("unencodable_message");
                    tracing::debug!("wire: message on {} not deliverable: {e}", m.topic);
                }
            }
        }
        if !buf.is_empty() {
            if let Err(e) = wr.write_all(&buf).await {
                tracing::debug!("wire: write failed: {e}");
                break;
            }
            buf.clear();
            if buf.capacity() > 16 * READ_CHUNK {
                buf = BytesMut::with_capacity(READ_CHUNK);
            }
        }
        if closing {
            break;
        }
        tokio::select! {
            biased;
            _ = out.notified() => {}
            _ = cancel.cancelled() => {
                if shutdown.is_cancelled() {
                    out.close_with(|b| {
                        codec::encode_error(ErrorCode::ShuttingDown, "the server is shutting down", b)
                    });
                } else {
                    out.close();
                }
            }
            _ = sub.recv_many(&mut msgs, batch) => {}
        }
    }
    cancel.cancel();
    let _ = wr.shutdown().await;
}
