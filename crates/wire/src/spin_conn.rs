//! One `[wire]` connection in low-latency mode, driven by the poller thread
//! (`spin_poller.rs`): a non-blocking socket, a read buffer and a write
//! buffer allocated once, and the session rules of `reader.rs` applied
//! synchronously.
//!
//! The echo path — read, find an ECHO frame in the buffer, copy its 20-byte
//! header into the write buffer, write — allocates nothing, takes no lock and
//! hands nothing to another thread. Everything that needs the hub (PUBLISH,
//! SUBSCRIBE, UNSUBSCRIBE, a PING behind them) goes to the connection's hub
//! task over its bounded queue (`hub_link.rs`); when that queue is full the
//! connection stops decoding until it has room, so TCP slows the client.
//!
//! A client that does not read is bounded and closed as in the default
//! mode: replies stop at `max_outbound_bytes` (ERROR 7); the hub task takes
//! no more subscriber messages while that much waits for the socket
//! (`hub_link::Backlog`), so the hub queue's overflow policy applies; a write
//! buffer that makes no progress for the idle timeout closes the connection
//! (`write_timeout`), and closing waits for the last bytes only a short
//! bound.
//!
//! The listener core's rules are kept here because the core no longer sees
//! the socket: the idle timeout, the partial-frame (read) timeout, byte and
//! frame counters, and the in-flight budget for a PUBLISH until the hub
//! took it. The read buffer itself is a per-connection allocation of
//! [`READ_BUFFER_BYTES`], not drawn from the budget: a larger frame grows
//! it [`codec::RESERVE_STEP`] at a time as the frame's bytes arrive (never
//! to what its header announces), and it shrinks back once it is empty.

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tidegate_hub::message::now_ns;
use tidegate_hub::{Hub, ListenerMetrics, Pattern};
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};

use crate::auth::TokenSet;
use crate::codec::{self, DecodeError, FRAME_HEADER, LENGTH_PREFIX};
use crate::frame::{AuthToken, Echo, ErrorCode, Frame, FrameType};
use crate::hub_link::{FromHub, LinkEnd, ToHub};
use crate::spin_poller::{PassCounts, PolledConn};
use crate::timed_write::StallLimit;
use crate::WireConfig;

/// Read buffer allocated per connection, bytes; only a frame larger than
/// this grows it, [`codec::RESERVE_STEP`] at a time as its bytes arrive (see
/// `make_room_for`), and it shrinks back once that frame is consumed.
pub(crate) const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Write buffer allocated per connection, bytes (grows up to
/// `max_outbound_bytes` for a client that does not read).
pub(crate) const WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// How long input is drained after a fatal error (as in `reader.rs`).
const LINGER: Duration = Duration::from_millis(500);
/// Most bytes discarded while lingering.
const LINGER_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of an ECHO reply: header plus the 20-byte echo header.
const ECHO_REPLY_LEN: usize = FRAME_HEADER + Echo::HEADER_LEN;

/// What every low-latency connection of one listener shares.
pub(crate) struct SpinContext {
    pub(crate) hub: Hub,
    pub(crate) config: Arc<WireConfig>,
    pub(crate) tokens: Arc<TokenSet>,
    pub(crate) metrics: ListenerMetrics,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Reading and answering frames.
    Open,
    /// Flushing what is buffered, then closing; `linger` drains input
    /// afterwards so a fatal ERROR is not destroyed by a reset. Given up
    /// (closed at once) when nothing could be written until `until`.
    Closing { linger: bool, until: Instant },
    /// Write side closed; discarding input until the deadline.
    Lingering { until: Instant, discarded: usize },
    /// Finished: the poller drops it.
    Done,
}

/// A fatal condition: the connection is closing.
struct Fatal;

/// One connection served by the poller.
pub(crate) struct SpinConn {
    sock: mio::net::TcpStream,
    ctx: Arc<SpinContext>,
    link: LinkEnd,
    /// `link.done` as last seen.
    done_seen: u64,
    /// A request the hub queue had no room for, sent before anything else.
    stalled: Option<ToHub>,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    out: BytesMut,
    out_pos: usize,
    patterns: HashSet<String>,
    authenticated: bool,
    idle: Option<Duration>,
    frame_timeout: Option<Duration>,
    last_active: Instant,
    partial_since: Option<Instant>,
    /// Since when unsent bytes have waited without the socket taking any.
    write_stalled_since: Option<Instant>,
    /// No write progress for this long while open: the client is not
    /// reading (the idle timeout, else the read timeout).
    write_timeout: Option<Duration>,
    /// Likewise while closing (short: the last bytes are best effort).
    closing_timeout: Duration,
    /// The unsent bytes last published to `link.backlog`.
    unsent_shared: usize,
    state: State,
}

impl SpinConn {
    pub(crate) fn new(
        sock: mio::net::TcpStream,
        ctx: Arc<SpinContext>,
        link: LinkEnd,
        idle: Option<Duration>,
        frame_timeout: Option<Duration>,
    ) -> Self {
        SpinConn {
            sock,
            authenticated: !ctx.tokens.required(),
            ctx,
            link,
            done_seen: 0,
            stalled: None,
            rbuf: vec![0; READ_BUFFER_BYTES],
            rstart: 0,
            rend: 0,
            out: BytesMut::with_capacity(WRITE_BUFFER_BYTES),
            out_pos: 0,
            patterns: HashSet::new(),
            idle,
            frame_timeout,
            last_active: Instant::now(),
            partial_since: None,
            write_stalled_since: None,
            write_timeout: idle.or(frame_timeout),
            closing_timeout: StallLimit::closing_limit(idle.or(frame_timeout)),
            unsent_shared: 0,
            state: State::Open,
        }
    }

    /// Starts closing: flush what is buffered (within the closing bound),
    /// then close.
    fn start_closing(&mut self, linger: bool) {
        self.state = State::Closing {
            linger,
            until: Instant::now() + self.closing_timeout,
        };
    }

    /// Bytes in the write buffer not yet written.
    fn unsent(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// True once the connection is finished and can be dropped.
    fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The server is stopping: say so (ERROR 8) after what is pending, and
    /// close.
    fn shut_down(&mut self) {
        if self.state == State::Open {
            self.take_answers();
            codec::encode_error(
                ErrorCode::ShuttingDown,
                "the server is shutting down",
                &mut self.out,
            );
            self.start_closing(false);
        }
    }

    /// The earliest time a timeout of this connection may fire, for the
    /// poller's park.
    fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            State::Open => {
                let read = match self.partial_since {
                    Some(since) => self.frame_timeout.map(|t| since + t),
                    None => self.idle.map(|t| self.last_active + t),
                };
                let write = self
                    .write_stalled_since
                    .zip(self.write_timeout)
                    .map(|(since, t)| since + t);
                match (read, write) {
                    (Some(r), Some(w)) => Some(r.min(w)),
                    (r, w) => r.or(w),
                }
            }
            State::Closing { until, .. } | State::Lingering { until, .. } => Some(until),
            State::Done => None,
        }
    }

    /// True when the hub task has queued something for this connection.
    fn has_answers(&self) -> bool {
        !self.link.from_hub.is_empty()
    }

    /// True when a request waits for room in the hub queue.
    fn is_stalled(&self) -> bool {
        self.stalled.is_some()
    }

    /// One pass: take the hub's answers, read until `WouldBlock` and act on
    /// every complete frame, write, check the timeouts. Returns whether
    /// anything was read.
    fn poll(&mut self, now: Instant, counts: &mut PassCounts) -> bool {
        if self.link.sent != self.done_seen || SpinConn::has_answers(self) {
            self.take_answers();
        }
        let mut read_any = false;
        match self.state {
            State::Open => {
                if self.resend_stalled() {
                    read_any = self.read_frames(counts);
                }
            }
            State::Lingering { until, discarded } => self.linger(now, until, discarded, counts),
            State::Closing { .. } | State::Done => {}
        }
        let wrote = self.flush(counts);
        if let State::Closing { linger, until } = self.state {
            if self.out_pos == self.out.len() {
                let _ = self.sock.shutdown(Shutdown::Write);
                self.state = if linger {
                    let wait = match self.idle {
                        Some(idle) => LINGER.min(idle / 2),
                        None => LINGER,
                    };
                    State::Lingering {
                        until: now + wait,
                        discarded: 0,
                    }
                } else {
                    State::Done
                };
            } else if wrote {
                self.state = State::Closing {
                    linger,
                    until: now + self.closing_timeout,
                };
            } else if now >= until {
                // The client reads nothing: the last bytes are given up.
                tracing::debug!("wire: closing connection: the client read nothing while closing");
                self.state = State::Done;
            }
        }
        if read_any {
            self.last_active = now;
        }
        if self.state == State::Open {
            // Checked even while the client sends: sending does not make
            // up for not reading.
            if !self.check_write_stall(now) && !read_any {
                self.check_timeouts(now);
            }
        }
        self.share_backlog();
        read_any
    }

    /// Publishes the unsent part of the write buffer to the hub task's
    /// backlog when it changed (not on the echo path, where it stays 0).
    fn share_backlog(&mut self) {
        let unsent = self.unsent();
        if unsent != self.unsent_shared {
            self.unsent_shared = unsent;
            self.link
                .backlog
                .set_unsent(unsent, self.ctx.config.max_outbound_bytes);
        }
    }

    /// Closes the connection when its unsent bytes made no progress for the
    /// write timeout; true when it did.
    fn check_write_stall(&mut self, now: Instant) -> bool {
        let (Some(since), Some(limit)) = (self.write_stalled_since, self.write_timeout) else {
            return false;
        };
        if now.saturating_duration_since(since) < limit {
            return false;
        }
        self.ctx.metrics.error("write_timeout");
        tracing::debug!("wire: closing connection: the client read nothing for {limit:?}");
        // Nothing can be written: no ERROR, no flush.
        self.state = State::Done;
        true
    }

    /// Moves the hub task's answers into the write buffer.
    fn take_answers(&mut self) {
        // Loaded before draining: every answer of a completed request is
        // queued before the count moves (hub_link.rs).
        self.done_seen = self.link.done.load(Ordering::Acquire);
        let mut took = 0;
        loop {
            match self.link.from_hub.try_recv() {
                Ok(FromHub::Frames(b)) => {
                    took += b.len();
                    self.out.extend_from_slice(&b);
                }
                Ok(FromHub::Close(b)) => {
                    if self.state == State::Open {
                        self.out.extend_from_slice(&b);
                        self.start_closing(false);
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    // The hub task is gone (it only ends with the link).
                    if self.state == State::Open {
                        self.start_closing(false);
                    }
                    break;
                }
            }
        }
        if took > 0 {
            // Moved, not removed: counted as unsent before it stops being
            // counted as queued, so the hub task never sees room that is
            // not there.
            self.unsent_shared += took;
            self.link
                .backlog
                .set_unsent(self.unsent_shared, self.ctx.config.max_outbound_bytes);
            self.link.backlog.took(took);
        }
    }

    /// Sends the stalled request, if any; false while the queue is full.
    fn resend_stalled(&mut self) -> bool {
        match self.stalled.take() {
            None => true,
            Some(req) => match self.send_to_hub(req) {
                Ok(()) => true,
                Err(()) => false,
            },
        }
    }

    /// Queues a request for the hub task; `Err` (and the request kept as
    /// stalled) when the queue is full.
    fn send_to_hub(&mut self, req: ToHub) -> Result<(), ()> {
        match self.link.to_hub.try_send(req) {
            Ok(()) => {
                self.link.sent += 1;
                Ok(())
            }
            Err(TrySendError::Full(req)) => {
                self.stalled = Some(req);
                Err(())
            }
            Err(TrySendError::Closed(_)) => {
                self.start_closing(false);
                Err(())
            }
        }
    }

    /// Reads until the socket would block, acting on every complete frame.
    fn read_frames(&mut self, counts: &mut PassCounts) -> bool {
        let mut read_any = false;
        loop {
            // Act on what is buffered first: it may free room to read into.
            if self.process(counts).is_err() || self.state != State::Open || self.stalled.is_some()
            {
                return read_any;
            }
            if self.rend == self.rbuf.len() {
                if self.rstart == 0 {
                    // Full, and `process` did not make room: it stopped
                    // before a frame it cannot take yet (budget, full hub
                    // queue). An incomplete frame always gets room there.
                    return read_any;
                }
                self.compact();
            }
            match self.sock.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    if self.rstart == self.rend {
                        self.start_closing(false);
                    } else {
                        let e = DecodeError::EndedMidFrame {
                            received: self.rend - self.rstart,
                        };
                        let _ = self.protocol_error(&e);
                    }
                    return read_any;
                }
                Ok(n) => {
                    self.rend += n;
                    counts.bytes_in += n;
                    read_any = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return read_any,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!("wire: read failed: {e}");
                    self.state = State::Done;
                    return read_any;
                }
            }
        }
    }

    /// Moves the unread bytes to the front of the read buffer.
    fn compact(&mut self) {
        self.rbuf.copy_within(self.rstart..self.rend, 0);
        self.rend -= self.rstart;
        self.rstart = 0;
    }

    /// Acts on every complete frame in the read buffer.
    fn process(&mut self, counts: &mut PassCounts) -> Result<(), Fatal> {
        let max_frame = self.ctx.config.max_frame;
        let had_partial = self.rstart != self.rend;
        let mut consumed_any = false;
        loop {
            let avail = &self.rbuf[self.rstart..self.rend];
            let (ty, len) = match codec::peek_header(avail, max_frame) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => return Err(self.protocol_error(&e)),
            };
            if !self.authenticated && ty != FrameType::Auth {
                let text = format!(
                    "authentication required: the first frame must be AUTH with a token, not {}",
                    ty.name()
                );
                return Err(self.unauthorized(&text));
            }
            let total = LENGTH_PREFIX + len;
            if avail.len() < total {
                self.make_room_for(total);
                break;
            }
            let body = self.rstart + FRAME_HEADER..self.rstart + total;
            if ty == FrameType::Echo && body.len() >= Echo::HEADER_LEN {
                // The hot path, straight from the buffer: no decode, no
                // allocation.
                counts.frames_in += 1;
                let options = i32::from_le_bytes(
                    self.rbuf[body.start..body.start + 4]
                        .try_into()
                        .unwrap_or_default(),
                );
                if options == Echo::RESPOND {
                    self.reply_echo(body.start)?;
                }
                self.rstart += total;
                consumed_any = true;
                if self.stalled.is_some() || self.state != State::Open {
                    // The reply waits as the one stalled request: nothing
                    // more may be decoded until it is sent, or the next
                    // request would replace it.
                    break;
                }
                continue;
            }
            if ty == FrameType::Publish {
                // The budget must be had before the frame is consumed.
                let Some(permit) = self.ctx.hub.budget().try_acquire(total) else {
                    break;
                };
                let frame = codec::decode_body(ty, Bytes::copy_from_slice(&self.rbuf[body]));
                counts.frames_in += 1;
                self.rstart += total;
                consumed_any = true;
                match frame {
                    Ok(Frame::Publish(mut msg)) => {
                        if msg.timestamp_ns == 0 {
                            msg.timestamp_ns = now_ns();
                        }
                        if self.send_to_hub(ToHub::Publish(msg, permit)).is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return Err(self.protocol_error(&e)),
                }
                continue;
            }
            let frame = codec::decode_body(ty, Bytes::copy_from_slice(&self.rbuf[body]));
            counts.frames_in += 1;
            self.rstart += total;
            consumed_any = true;
            match frame {
                Ok(f) => self.handle(f)?,
                Err(e) => return Err(self.protocol_error(&e)),
            }
            if self.stalled.is_some() || self.state != State::Open {
                break;
            }
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
            self.partial_since = None;
            if self.rbuf.len() > READ_BUFFER_BYTES {
                // A large frame is over: back to the usual size.
                self.rbuf.truncate(READ_BUFFER_BYTES);
                self.rbuf.shrink_to_fit();
            }
        } else if consumed_any || !had_partial || self.partial_since.is_none() {
            // What is left starts the next frame; its clock starts now.
            self.partial_since = Some(Instant::now());
        }
        Ok(())
    }

    /// Makes room to read more of the incomplete frame of `total` bytes
    /// at `rstart`.
    ///
    /// A frame that does not fit where it starts is moved to the front.
    /// The buffer grows only once the frame's bytes fill it, and then by at
    /// most [`codec::RESERVE_STEP`] (`codec::growth_step`, the rule
    /// `decode_frame` follows): it never grows past what has arrived plus
    /// one step, whatever length the header announced. Growth is exact (no
    /// doubling) and only a frame larger than [`READ_BUFFER_BYTES`] causes
    /// it; a small frame at the end of the buffer is only moved.
    fn make_room_for(&mut self, total: usize) {
        if self.rbuf.len() - self.rstart >= total {
            return;
        }
        if self.rstart > 0 {
            self.compact();
        }
        if self.rend == self.rbuf.len() {
            let step = codec::growth_step(total, self.rend);
            self.rbuf.reserve_exact(step);
            self.rbuf.resize(self.rend + step, 0);
        }
    }

    /// Appends the reply to the ECHO whose body starts at `body`.
    fn reply_echo(&mut self, body: usize) -> Result<(), Fatal> {
        let header = (Echo::HEADER_LEN as u32 + 1).to_le_bytes();
        if self.direct() {
            if self.out.len() - self.out_pos + ECHO_REPLY_LEN > self.ctx.config.max_outbound_bytes {
                return Err(self.overflowed());
            }
            self.out.extend_from_slice(&header);
            self.out.extend_from_slice(&[FrameType::Echo as u8]);
            self.out
                .extend_from_slice(&self.rbuf[body..body + Echo::HEADER_LEN]);
            Ok(())
        } else {
            if self.waiting_bytes() + ECHO_REPLY_LEN > self.ctx.config.max_outbound_bytes {
                return Err(self.overflowed());
            }
            let mut b = BytesMut::with_capacity(ECHO_REPLY_LEN);
            b.extend_from_slice(&header);
            b.extend_from_slice(&[FrameType::Echo as u8]);
            b.extend_from_slice(&self.rbuf[body..body + Echo::HEADER_LEN]);
            let _ = self.send_to_hub(ToHub::Reply(b.freeze()));
            Ok(())
        }
    }

    /// Bytes waiting for the socket ahead of a reply queued behind hub
    /// work: the unsent write buffer and what the hub task queued for it.
    /// (Replies the hub task has not answered yet are bounded by its
    /// request queue.)
    fn waiting_bytes(&self) -> usize {
        self.unsent() + self.link.backlog.queued()
    }

    /// True when a reply may be written directly (the ordering rule of
    /// `hub_link::LinkEnd`).
    fn direct(&mut self) -> bool {
        if self.link.sent == self.done_seen {
            return true;
        }
        self.take_answers();
        self.link.sent == self.done_seen
    }

    /// Appends a reply encoded by `encode`, in order behind any hub work.
    fn reply(&mut self, encode: impl FnOnce(&mut BytesMut)) -> Result<(), Fatal> {
        if self.direct() {
            if self.unsent() >= self.ctx.config.max_outbound_bytes {
                return Err(self.overflowed());
            }
            encode(&mut self.out);
        } else {
            if self.waiting_bytes() >= self.ctx.config.max_outbound_bytes {
                return Err(self.overflowed());
            }
            let mut b = BytesMut::new();
            encode(&mut b);
            let _ = self.send_to_hub(ToHub::Reply(b.freeze()));
        }
        Ok(())
    }

    /// Acts on one decoded frame other than an ECHO or a PUBLISH.
    fn handle(&mut self, frame: Frame) -> Result<(), Fatal> {
        match frame {
            Frame::Echo(e) => {
                if e.wants_reply() {
                    self.reply(|b| {
                        let _ =
                            codec::encode_echo(e.options, e.send_time_ns, e.correlation_id, &[], b);
                    })?;
                }
                Ok(())
            }
            Frame::Publish(_) => Ok(()), // handled in `process`
            Frame::Subscribe(p) => self.subscribe(p),
            Frame::Unsubscribe(p) => {
                if self.patterns.remove(&p) {
                    let _ = self.send_to_hub(ToHub::Unsubscribe(p));
                }
                Ok(())
            }
            Frame::Ping(token) => self.reply(|b| codec::encode_token(FrameType::Pong, token, b)),
            Frame::Auth(token) => self.authenticate(&token),
            Frame::Message(_) | Frame::Pong(_) | Frame::Error(_) | Frame::AuthOk => {
                let name = frame.frame_type().name();
                let text = format!("{name} frames are sent by the server only");
                Err(self.fatal(ErrorCode::MalformedFrame, "malformed_frame", &text, true))
            }
        }
    }

    fn subscribe(&mut self, pattern: String) -> Result<(), Fatal> {
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
        let _ = self.send_to_hub(ToHub::Subscribe(pattern));
        Ok(())
    }

    fn authenticate(&mut self, token: &AuthToken) -> Result<(), Fatal> {
        let tokens = &self.ctx.tokens;
        if tokens.required() && !tokens.verify(token.as_bytes()) {
            return Err(self.unauthorized("AUTH refused: the token is not one of [wire] tokens"));
        }
        self.authenticated = true;
        self.reply(codec::encode_auth_ok)
    }

    fn unauthorized(&mut self, text: &str) -> Fatal {
        // This runs on the poller thread, outside any connection span.
        let peer = self.sock.peer_addr().ok();
        tracing::info!(?peer, "wire: {text}; closing the connection");
        self.fatal(ErrorCode::Unauthorized, "auth_failed", text, true)
    }

    fn protocol_error(&mut self, e: &DecodeError) -> Fatal {
        tracing::debug!("wire: closing connection: {e}");
        self.fatal(e.code(), e.kind(), &e.to_string(), true)
    }

    fn request_error(&mut self, code: ErrorCode, kind: &str, text: &str) -> Result<(), Fatal> {
        self.ctx.metrics.error(kind);
        self.reply(|b| codec::encode_error(code, text, b))
    }

    fn overflowed(&mut self) -> Fatal {
        let text = format!(
            "more than {} bytes of replies are waiting: the client is not reading",
            self.ctx.config.max_outbound_bytes
        );
        self.fatal(
            ErrorCode::OutboundOverflow,
            "outbound_overflow",
            &text,
            true,
        )
    }

    /// Counts the error, queues the last ERROR (after everything already
    /// queued, hub answers included) and starts closing.
    fn fatal(&mut self, code: ErrorCode, kind: &str, text: &str, linger: bool) -> Fatal {
        self.ctx.metrics.error(kind);
        self.close_with_error(code, text, linger);
        Fatal
    }

    fn close_with_error(&mut self, code: ErrorCode, text: &str, linger: bool) {
        if self.state != State::Open {
            return;
        }
        // Answers the hub task still owes are dropped with the connection,
        // as the default mode's writer drops what it never took.
        self.take_answers();
        codec::encode_error(code, text, &mut self.out);
        self.start_closing(linger);
    }

    /// Writes what the write buffer holds, until the socket would block.
    /// Returns whether any byte was written.
    fn flush(&mut self, counts: &mut PassCounts) -> bool {
        let mut wrote = false;
        while self.out_pos < self.out.len() {
            match self.sock.write(&self.out[self.out_pos..]) {
                Ok(0) => {
                    self.state = State::Done;
                    return wrote;
                }
                Ok(n) => {
                    self.out_pos += n;
                    counts.bytes_out += n;
                    self.last_active = Instant::now();
                    wrote = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // The stall clock restarts with every byte written.
                    if wrote {
                        self.write_stalled_since = Some(self.last_active);
                    } else if self.write_stalled_since.is_none() {
                        self.write_stalled_since = Some(Instant::now());
                    }
                    return wrote;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!("wire: write failed: {e}");
                    self.state = State::Done;
                    return wrote;
                }
            }
        }
        self.write_stalled_since = None;
        self.out.clear();
        self.out_pos = 0;
        if self.out.capacity() > self.ctx.config.max_outbound_bytes.max(WRITE_BUFFER_BYTES) {
            self.out = BytesMut::with_capacity(WRITE_BUFFER_BYTES);
        }
        wrote
    }

    /// Reads and discards input after a fatal ERROR, until end of stream,
    /// the deadline or [`LINGER_BYTES`].
    fn linger(
        &mut self,
        now: Instant,
        until: Instant,
        mut discarded: usize,
        counts: &mut PassCounts,
    ) {
        if now >= until {
            self.state = State::Done;
            return;
        }
        loop {
            match self.sock.read(&mut self.rbuf[..]) {
                Ok(0) => {
                    self.state = State::Done;
                    return;
                }
                Ok(n) => {
                    counts.bytes_in += n;
                    discarded += n;
                    if discarded >= LINGER_BYTES {
                        self.state = State::Done;
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.state = State::Done;
                    return;
                }
            }
        }
        self.state = State::Lingering { until, discarded };
    }

    /// The idle and partial-frame timeouts of the listener core.
    fn check_timeouts(&mut self, now: Instant) {
        match self.partial_since {
            Some(since) => {
                if let Some(limit) = self.frame_timeout {
                    if now.duration_since(since) >= limit {
                        let text = format!("partial frame not completed within {limit:?}: closed");
                        tracing::debug!("wire: closing connection: {text}");
                        self.fatal(ErrorCode::TimedOut, "read_timeout", &text, true);
                    }
                }
            }
            None => {
                if let Some(limit) = self.idle {
                    if now.duration_since(self.last_active) >= limit {
                        let text = format!("idle for {limit:?}: closed");
                        tracing::debug!("wire: closing connection: {text}");
                        // An idle client has nothing in flight to drain.
                        self.fatal(ErrorCode::TimedOut, "idle_timeout", &text, false);
                    }
                }
            }
        }
    }
}

impl PolledConn for SpinConn {
    fn sock(&mut self) -> &mut mio::net::TcpStream {
        &mut self.sock
    }
    fn poll(&mut self, now: Instant, counts: &mut PassCounts) -> bool {
        SpinConn::poll(self, now, counts)
    }
    fn is_done(&self) -> bool {
        SpinConn::is_done(self)
    }
    fn shut_down(&mut self) {
        SpinConn::shut_down(self)
    }
    fn next_deadline(&self) -> Option<Instant> {
        SpinConn::next_deadline(self)
    }
    fn has_answers(&self) -> bool {
        SpinConn::has_answers(self)
    }
    fn is_stalled(&self) -> bool {
        SpinConn::is_stalled(self)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicU64;

    use proptest::prelude::*;
    use tidegate_hub::Message;
    use tokio::sync::mpsc;

    use super::*;
    use crate::codec::RESERVE_STEP;
    use crate::hub_link::{FROM_HUB_CAPACITY, TO_HUB_CAPACITY};

    /// A connection on the server end of a loopback socket, driven by hand:
    /// the client end, and the hub task's ends of the link (no hub task
    /// runs: requests stay queued for the test to inspect).
    struct Harness {
        conn: SpinConn,
        client: TcpStream,
        requests: mpsc::Receiver<ToHub>,
        _answers: mpsc::Sender<FromHub>,
        counts: PassCounts,
        /// What the server wrote to the client.
        replies: Vec<u8>,
    }

    impl Harness {
        fn new() -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            server.set_nonblocking(true).unwrap();
            server.set_nodelay(true).unwrap();
            client.set_nonblocking(true).unwrap();
            let hub = Hub::default();
            let ctx = Arc::new(SpinContext {
                metrics: hub.metrics().listener("wire"),
                hub,
                config: Arc::new(WireConfig::default()),
                tokens: Arc::new(TokenSet::new::<&str>(&[])),
            });
            let (to_hub, requests) = mpsc::channel(TO_HUB_CAPACITY);
            let (answers, from_hub) = mpsc::channel(FROM_HUB_CAPACITY);
            let link = LinkEnd {
                to_hub,
                from_hub,
                sent: 0,
                done: Arc::new(AtomicU64::new(0)),
                backlog: Arc::default(),
            };
            let sock = mio::net::TcpStream::from_std(server);
            Harness {
                conn: SpinConn::new(sock, ctx, link, None, None),
                client,
                requests,
                _answers: answers,
                counts: PassCounts::default(),
                replies: Vec::new(),
            }
        }

        /// Writes `bytes` and polls the connection until it has read all of
        /// them, calling `check` with the connection and the bytes it has
        /// read so far after every pass.
        fn send(&mut self, bytes: &[u8], check: impl Fn(&SpinConn, usize)) {
            let target = self.counts.bytes_in + bytes.len();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut off = 0;
            while self.counts.bytes_in < target {
                if off < bytes.len() {
                    match self.client.write(&bytes[off..]) {
                        Ok(n) => off += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("client write: {e}"),
                    }
                }
                self.conn.poll(Instant::now(), &mut self.counts);
                assert_eq!(self.conn.state, State::Open, "the connection closed");
                check(&self.conn, self.counts.bytes_in);
                self.read_replies();
                assert!(
                    Instant::now() < deadline,
                    "the connection read {} of {target} bytes",
                    self.counts.bytes_in
                );
            }
        }

        /// Takes what the server has written so far.
        fn read_replies(&mut self) {
            let mut b = [0u8; 16 * 1024];
            loop {
                match self.client.read(&mut b) {
                    Ok(0) => panic!("the server closed the connection"),
                    Ok(n) => self.replies.extend_from_slice(&b[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) => panic!("client read: {e}"),
                }
            }
        }
    }

    /// The most the read buffer may hold once `received` bytes of one frame
    /// have arrived: its usual size, or what arrived plus one step.
    fn bound(received: usize) -> usize {
        READ_BUFFER_BYTES.max(received + RESERVE_STEP)
    }

    fn check_bound(conn: &SpinConn, received: usize) {
        let capacity = conn.rbuf.capacity();
        assert!(
            capacity <= bound(received),
            "read buffer of {capacity} bytes after {received} bytes arrived"
        );
    }

    /// Writes all of `bytes` from the client (they fit its socket buffers).
    fn write_all_now(client: &mut TcpStream, bytes: &[u8]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut off = 0;
        while off < bytes.len() {
            match client.write(&bytes[off..]) {
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "the client could not write");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("client write: {e}"),
            }
        }
    }

    fn echo_request(correlation_id: i64) -> BytesMut {
        let mut b = BytesMut::new();
        codec::encode_echo(Echo::RESPOND, 7, correlation_id, &[], &mut b).unwrap();
        b
    }

    #[test]
    fn a_header_announcing_a_maximum_frame_allocates_at_most_one_step() {
        let mut h = Harness::new();
        let max_frame = h.conn.ctx.config.max_frame;
        let mut header = (max_frame as u32).to_le_bytes().to_vec();
        header.push(FrameType::Publish as u8);
        h.send(&header, check_bound);
        assert_eq!(h.conn.rend - h.conn.rstart, FRAME_HEADER);
        assert_eq!(h.conn.rbuf.capacity(), READ_BUFFER_BYTES);

        // Body bytes arriving grow it a step ahead of them at most.
        h.send(&vec![0u8; 3 * RESERVE_STEP + 1000], check_bound);
        let received = h.counts.bytes_in;
        assert_eq!(h.conn.rend - h.conn.rstart, received);
        assert!(h.conn.rbuf.capacity() <= received + RESERVE_STEP);
        assert!(h.conn.rbuf.capacity() < max_frame);
    }

    #[test]
    fn small_frames_reuse_the_read_buffer() {
        let mut h = Harness::new();
        let buffer = h.conn.rbuf.as_ptr();
        let mut stream = BytesMut::new();
        let n = 20_000;
        for i in 0..n {
            stream.extend_from_slice(&echo_request(i));
        }
        // In uneven pieces, so frames straddle the end of the buffer.
        for piece in stream.chunks(7 * 1024 + 13) {
            h.send(piece, |c, _| {
                assert_eq!(c.rbuf.as_ptr(), buffer, "the read buffer moved");
                assert_eq!(c.rbuf.capacity(), READ_BUFFER_BYTES);
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while h.replies.len() < n as usize * ECHO_REPLY_LEN {
            h.conn.poll(Instant::now(), &mut h.counts);
            h.read_replies();
            assert!(Instant::now() < deadline, "{} reply bytes", h.replies.len());
        }
        let mut replies = BytesMut::from(&h.replies[..]);
        for i in 0..n {
            let reply = codec::decode_frame(&mut replies, usize::MAX).unwrap();
            match reply {
                Some(Frame::Echo(e)) => assert_eq!(e.correlation_id, i),
                other => panic!("reply {i}: {other:?}"),
            }
        }
        assert!(replies.is_empty());
    }

    #[test]
    fn echo_replies_parked_behind_a_full_hub_queue_are_all_sent() {
        // A PUBLISH the hub task never completes sends every later reply
        // through the hub queue; more PUBLISHes fill that queue, so the
        // first ECHO's reply waits as the stalled request. The ECHOs after
        // it must wait too, not replace it.
        let mut h = Harness::new();
        let mut stream = BytesMut::new();
        let msg = Message::new("t", &b"p"[..]);
        for _ in 0..TO_HUB_CAPACITY + 1 {
            codec::encode_message(FrameType::Publish, &msg, &mut stream).unwrap();
        }
        let echoes = 20;
        for i in 0..echoes {
            stream.extend_from_slice(&echo_request(i));
        }
        write_all_now(&mut h.client, &stream);
        let (mut publishes, mut replies) = (0, Vec::new());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            h.conn.poll(Instant::now(), &mut h.counts);
            assert_eq!(h.conn.state, State::Open, "the connection closed");
            // The hub task's part, slowly: one request per pass (completing
            // none), so the queue stays full while the ECHOs are decoded.
            match h.requests.try_recv() {
                Ok(ToHub::Publish(..)) => publishes += 1,
                Ok(ToHub::Reply(b)) => {
                    let mut b = BytesMut::from(&b[..]);
                    match codec::decode_frame(&mut b, usize::MAX).unwrap() {
                        Some(Frame::Echo(e)) => replies.push(e.correlation_id),
                        other => panic!("expected an ECHO reply, got {other:?}"),
                    }
                }
                Ok(other) => panic!("unexpected request {other:?}"),
                Err(_) => {
                    if h.counts.bytes_in == stream.len() && !h.conn.is_stalled() {
                        // Everything read, decoded and taken.
                        break;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "{publishes} publishes, {replies:?}"
            );
        }
        assert_eq!(publishes, TO_HUB_CAPACITY + 1);
        assert_eq!(
            replies,
            (0..echoes).collect::<Vec<_>>(),
            "ECHO replies lost"
        );
    }

    #[test]
    fn a_client_that_reads_nothing_is_closed_after_the_write_timeout() {
        let mut h = Harness::new();
        h.conn.write_timeout = Some(Duration::from_millis(200));
        // Replies the client never reads, until the socket takes no more.
        let mut burst = BytesMut::new();
        for i in 0..1000 {
            burst.extend_from_slice(&echo_request(i));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while h.conn.write_stalled_since.is_none() {
            match h.client.write(&burst) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("client write: {e}"),
            }
            h.conn.poll(Instant::now(), &mut h.counts);
            assert!(h.conn.state == State::Open || h.conn.state == State::Done);
            assert!(
                Instant::now() < deadline,
                "the server's writes never blocked"
            );
        }
        // Before the limit it stays open, and the poller's park is bounded
        // by the limit.
        h.conn.poll(Instant::now(), &mut h.counts);
        assert_eq!(h.conn.state, State::Open);
        let deadline = h.conn.next_deadline().expect("a deadline to park until");
        assert!(deadline <= Instant::now() + Duration::from_millis(200));
        // Once nothing moved for the limit, it is closed without a flush.
        let give_up = Instant::now() + Duration::from_secs(10);
        while !h.conn.is_done() {
            h.conn
                .poll(Instant::now() + Duration::from_secs(1), &mut h.counts);
            assert!(Instant::now() < give_up, "state {:?}", h.conn.state);
        }
        assert_eq!(h.conn.ctx.metrics.error_count("write_timeout"), 1);
    }

    #[test]
    fn closing_gives_up_on_a_client_that_reads_nothing() {
        let mut h = Harness::new();
        // A write buffer the socket will not take all of.
        h.conn.out.extend_from_slice(&vec![0u8; 64 << 20]);
        let now = Instant::now();
        h.conn.poll(now, &mut h.counts);
        assert!(h.conn.unsent() > 0);
        h.conn.shut_down();
        let State::Closing { until, .. } = h.conn.state else {
            panic!("closing expected, got {:?}", h.conn.state);
        };
        assert_eq!(h.conn.next_deadline(), Some(until));
        h.conn.poll(until + Duration::from_millis(1), &mut h.counts);
        assert!(h.conn.is_done(), "state {:?}", h.conn.state);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A PUBLISH larger than the buffer, split anywhere, decodes to the
        /// message sent; the buffer stays within a step of what arrived,
        /// returns to its usual size, and the next frame is read in order.
        #[test]
        fn a_large_frame_in_pieces_decodes_with_the_buffer_a_step_ahead(
            payload_len in 0usize..(4 * RESERVE_STEP),
            fill in any::<u8>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let payload: Vec<u8> = (0..payload_len)
                .map(|i| (i as u8).wrapping_mul(31) ^ fill)
                .collect();
            let msg = Message::new("big.frame", payload)
                .with_key(&b"k"[..])
                .with_attribute("a", "b");
            let mut frame = BytesMut::new();
            codec::encode_message(FrameType::Publish, &msg, &mut frame).unwrap();
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(frame.len())).collect();
            cuts.push(0);
            cuts.push(frame.len());
            cuts.sort_unstable();
            cuts.dedup();

            let mut h = Harness::new();
            for w in cuts.windows(2) {
                h.send(&frame[w[0]..w[1]], check_bound);
            }
            match h.requests.try_recv() {
                Ok(ToHub::Publish(got, permit)) => {
                    prop_assert_eq!(got, msg);
                    drop(permit);
                }
                other => panic!("expected the PUBLISH, got {other:?}"),
            }
            prop_assert_eq!((h.conn.rstart, h.conn.rend), (0, 0));
            prop_assert_eq!(h.conn.rbuf.capacity(), READ_BUFFER_BYTES);

            // The stream is still in step: an ECHO after it is answered (behind
            // the PUBLISH no hub task completes, so through the hub queue).
            let echo = echo_request(42);
            h.send(&echo, check_bound);
            match h.requests.try_recv() {
                Ok(ToHub::Reply(b)) => {
                    let mut b = BytesMut::from(&b[..]);
                    match codec::decode_frame(&mut b, usize::MAX).unwrap() {
                        Some(Frame::Echo(e)) => prop_assert_eq!(e.correlation_id, 42),
                        other => panic!("expected an ECHO reply, got {other:?}"),
                    }
                }
                other => panic!("expected the ECHO reply, got {other:?}"),
            }
        }
    }
}
