//! The read side of a `[wire]` connection: reads through the listener
//! core's [`Inbound`] (byte budget, idle and partial-frame timeouts), decodes
//! frames, and acts on each in order — publish into the hub, queue replies
//! and subscription changes for the writer — without ever waiting on the
//! writer.
//!
//! - **Authentication.** With `[wire] tokens` set, the first frame must be
//!   an AUTH with one of them. Any other frame is refused from its 5-byte
//!   header (its body is never read), so an unauthenticated client cannot
//!   make the server buffer more than an AUTH frame.
//! - **Budget.** A PUBLISH holds its bytes of the in-flight budget until
//!   `Hub::publish` returned; everything else gives them back at the next
//!   read.
//! - **Errors.** A protocol error is answered with an ERROR frame naming it;
//!   the writer flushes it and half-closes, while this side discards further
//!   input for a moment so the close does not turn into a reset that would
//!   destroy the ERROR in flight.

use std::collections::HashSet;
use std::time::Duration;

use bytes::BytesMut;
use tidegate_hub::message::now_ns;
use tidegate_hub::{ListenerMetrics, Pattern, PublishError};
use tidegate_listener::{ConnReader, Inbound, ReadError};
use tokio_util::sync::CancellationToken;

use crate::codec::{self, DecodeError};
use crate::connection::ConnectionContext;
use crate::frame::{AuthToken, ErrorCode, Frame, FrameType};
use crate::outbound::{Control, Outbound, Overflow};

/// How long input is drained (and discarded) after a fatal error before the
/// socket is closed.
const LINGER: Duration = Duration::from_millis(500);
/// Most bytes discarded while lingering.
const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// Why the reader stopped.
enum ReadEnd {
    /// Clean end of stream, shutdown, or the writer gave up.
    Done,
    /// A fatal error was reported: drain input briefly, then close.
    Linger,
}

/// One connection's reader.
pub(crate) struct Reader<'a> {
    ctx: &'a ConnectionContext,
    out: &'a Outbound,
    metrics: &'a ListenerMetrics,
    inbound: Inbound,
    /// The patterns this connection holds (bounds and deduplicates them).
    patterns: HashSet<String>,
    /// False until a valid AUTH when the listener has tokens.
    authenticated: bool,
    /// The client's address, named in log events (the listener's
    /// per-connection span is DEBUG-level).
    peer: std::net::SocketAddr,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(
        ctx: &'a ConnectionContext,
        out: &'a Outbound,
        metrics: &'a ListenerMetrics,
        inbound: Inbound,
        peer: std::net::SocketAddr,
    ) -> Self {
        Reader {
            peer,
            authenticated: !ctx.tokens.required(),
            ctx,
            out,
            metrics,
            inbound,
            patterns: HashSet::new(),
        }
    }

    /// Reads and handles frames until the connection ends, then asks the
    /// writer to flush and close, and cancels `ended`: from then on the
    /// writer gets only a short bound to send what is left (the client may
    /// not be reading at all).
    pub(crate) async fn run(
        mut self,
        mut rd: ConnReader,
        cancel: &CancellationToken,
        ended: &CancellationToken,
    ) {
        // No buffer up front: a quiet connection holds none (the listener
        // core sizes each read to what arrives).
        let mut buf = BytesMut::new();
        let end = self.read_frames(&mut rd, &mut buf, cancel).await;
        self.out.close();
        ended.cancel();
        if let ReadEnd::Linger = end {
            // Shorter than the idle timeout: a client that sends nothing
            // more must not also be counted as idle.
            let linger = match self.inbound.idle_timeout() {
                Some(idle) => LINGER.min(idle / 2),
                None => LINGER,
            };
            let mut discarded = 0usize;
            let _ = tokio::time::timeout(linger, async {
                while discarded < LINGER_BYTES {
                    buf.clear();
                    match self.inbound.read(&mut rd, &mut buf).await {
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
        rd: &mut ConnReader,
        buf: &mut BytesMut,
        cancel: &CancellationToken,
    ) -> ReadEnd {
        let max_frame = self.ctx.config.max_frame;
        // Created once: registering a fresh cancellation waiter on every
        // read would cost a lock per message on the echo path.
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        loop {
            loop {
                if !self.authenticated {
                    if let Err(end) = self.require_auth(buf, max_frame) {
                        return end;
                    }
                }
                match codec::take_frame(buf, max_frame) {
                    Ok(Some((frame, len))) => {
                        self.metrics.frames_in(1);
                        if let Err(end) = self.handle(frame, len).await {
                            return end;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return self.protocol_error(&e),
                }
            }
            let read = tokio::select! {
                r = self.inbound.read(rd, buf) => r,
                _ = &mut cancelled => return ReadEnd::Done,
            };
            match read {
                Ok(0) if buf.is_empty() => return ReadEnd::Done,
                Ok(0) => {
                    return self.protocol_error(&DecodeError::EndedMidFrame {
                        received: buf.len(),
                    })
                }
                Ok(_) => {}
                // Counted by the listener core; the client is told why. An
                // idle client has nothing in flight to drain.
                Err(e @ ReadError::IdleTimeout(_)) => {
                    tracing::debug!("wire: closing connection: {e}");
                    self.close_with_error(ErrorCode::TimedOut, &e.to_string());
                    return ReadEnd::Done;
                }
                Err(e @ ReadError::ReadTimeout(_)) => {
                    tracing::debug!("wire: closing connection: {e}");
                    return self.close_with_error(ErrorCode::TimedOut, &e.to_string());
                }
                Err(e) => {
                    tracing::debug!("wire: read failed: {e}");
                    return ReadEnd::Done;
                }
            }
        }
    }

    /// Before authentication only an AUTH frame may come: refuse anything
    /// else as soon as its header is in, without reading its body.
    fn require_auth(&self, buf: &[u8], max_frame: usize) -> Result<(), ReadEnd> {
        match codec::peek_header(buf, max_frame) {
            Ok(Some((ty, _))) if ty != FrameType::Auth => Err(self.unauthorized(&format!(
                "authentication required: the first frame must be AUTH with a token, not {}",
                ty.name()
            ))),
            // Header incomplete, an AUTH, or an error the decoder reports.
            _ => Ok(()),
        }
    }

    fn authenticate(&mut self, token: &AuthToken) -> Result<(), ReadEnd> {
        let tokens = &self.ctx.tokens;
        if tokens.required() && !tokens.verify(token.as_bytes()) {
            return Err(self.unauthorized("AUTH refused: the token is not one of [wire] tokens"));
        }
        self.authenticated = true;
        self.reply(codec::encode_auth_ok)
    }

    fn unauthorized(&self, text: &str) -> ReadEnd {
        tracing::info!(peer = %self.peer, "wire: {text}; closing the connection");
        self.fatal(ErrorCode::Unauthorized, "auth_failed", text)
    }

    fn protocol_error(&self, e: &DecodeError) -> ReadEnd {
        tracing::debug!("wire: closing connection: {e}");
        self.fatal(e.code(), e.kind(), &e.to_string())
    }

    /// Reports a request error that leaves the connection open.
    fn request_error(&self, code: ErrorCode, kind: &str, text: &str) -> Result<(), ReadEnd> {
        self.metrics.error(kind);
        self.reply(|b| codec::encode_error(code, text, b))
    }

    /// Reports an error after which the connection is closed, counting it.
    fn fatal(&self, code: ErrorCode, kind: &str, text: &str) -> ReadEnd {
        self.metrics.error(kind);
        self.close_with_error(code, text)
    }

    /// Sends a last ERROR and closes (the caller has counted it).
    fn close_with_error(&self, code: ErrorCode, text: &str) -> ReadEnd {
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

    /// Acts on one frame that took `len` bytes of the read buffer.
    async fn handle(&mut self, frame: Frame, len: usize) -> Result<(), ReadEnd> {
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
                // The frame's bytes stay counted against the process-wide
                // budget until the hub has taken the message.
                let _held = self.inbound.take(len);
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
            Frame::Auth(token) => self.authenticate(&token),
            Frame::Message(_) | Frame::Pong(_) | Frame::Error(_) | Frame::AuthOk => {
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
