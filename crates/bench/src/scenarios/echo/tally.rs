//! The receiving side of the echo scenario, shared by both client shapes:
//! decodes replies, records each round trip from its message's scheduled
//! send time, and at the end records every asked reply that never came —
//! late, not missing: its latency runs from its scheduled send to when the
//! receiver gave up, so a server that drops or stalls replies shows in the
//! tail instead of vanishing from it.

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::BytesMut;
use tidegate_wire::codec::decode_frame;
use tidegate_wire::Frame;

use super::EchoArgs;
use crate::latency::LatencyRecorder;

/// Largest frame the receiver accepts.
const MAX_REPLY_FRAME: usize = 1 << 20;

/// What the receiver saw.
pub(super) struct Received {
    pub(super) replies: u64,
    /// Messages confirmed by replies received by the end of the window (the
    /// highest echoed sequence number plus one).
    pub(super) confirmed_in_window: u64,
    pub(super) server_errors: u64,
    pub(super) measured_span: Duration,
    /// Round trips of the measured replies, and of the measured replies
    /// that never came (up to when the receiver gave up).
    pub(super) rtt: LatencyRecorder,
    /// Measured replies that never came, recorded late in `rtt`.
    pub(super) late: u64,
}

/// Decodes replies and records their round trips.
pub(super) struct ReplyTally {
    start: Instant,
    warmup: u64,
    window_end: Duration,
    respond_every: u64,
    interval_ns: f64,
    /// One interval after the last message's due time.
    schedule_end: Duration,
    /// One bit per asked reply (reply `k` answers message
    /// `k × respond_every`): which came.
    got: Vec<u64>,
    expected: u64,
    buf: BytesMut,
    rtt: LatencyRecorder,
    replies: u64,
    server_errors: u64,
    confirmed_in_window: u64,
    first_measured: Option<i64>,
    last_receive: Duration,
}

impl ReplyTally {
    /// A tally of the replies `args` asks for, on a schedule starting at
    /// `start`, whose measured window ends `window_end` after it.
    pub(super) fn new(start: Instant, args: &EchoArgs, window_end: Duration) -> Self {
        let expected = args.messages.div_ceil(args.respond_every.max(1));
        let interval_ns = 1e9 / args.rate.max(1) as f64;
        ReplyTally {
            start,
            warmup: args.warmup,
            window_end,
            respond_every: args.respond_every.max(1),
            interval_ns,
            schedule_end: Duration::from_nanos((args.messages as f64 * interval_ns) as u64),
            got: vec![0; expected.div_ceil(64) as usize],
            expected,
            buf: BytesMut::with_capacity(64 * 1024),
            rtt: LatencyRecorder::default(),
            replies: 0,
            server_errors: 0,
            confirmed_in_window: 0,
            first_measured: None,
            last_receive: Duration::ZERO,
        }
    }

    /// Replies received so far.
    pub(super) fn replies(&self) -> u64 {
        self.replies
    }

    /// Takes bytes just read (at one receive time) and records every
    /// complete reply.
    pub(super) fn on_bytes(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let now = self.start.elapsed();
        self.buf.extend_from_slice(bytes);
        while let Some(frame) =
            decode_frame(&mut self.buf, MAX_REPLY_FRAME).context("decoding a reply")?
        {
            match frame {
                Frame::Echo(e) => {
                    self.replies += 1;
                    let k = self.note(e.correlation_id);
                    if now <= self.window_end {
                        self.confirmed_in_window = self
                            .confirmed_in_window
                            .max(e.correlation_id.max(-1) as u64 + 1);
                    }
                    // Warm-up by the reply's place in the schedule, as
                    // `finish` decides it: counting replies received would
                    // take a measured reply for warm-up after a dropped one.
                    if k.is_some_and(|k| k >= self.warmup) {
                        let rtt_ns = now.as_nanos() as i64 - e.send_time_ns;
                        self.rtt.record_ns(rtt_ns.max(1) as u64);
                        self.first_measured.get_or_insert(e.send_time_ns);
                        self.last_receive = now;
                    }
                }
                Frame::Error(e) => {
                    self.server_errors += 1;
                    tracing::warn!("server error {:?}: {}", e.code, e.message);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Notes that the reply to message `id` came; its index among the
    /// asked replies, if it is one.
    fn note(&mut self, id: i64) -> Option<u64> {
        let id = u64::try_from(id).ok()?;
        if !id.is_multiple_of(self.respond_every) {
            return None;
        }
        let k = id / self.respond_every;
        if k >= self.expected {
            return None;
        }
        self.got[(k / 64) as usize] |= 1 << (k % 64);
        Some(k)
    }

    /// The tally, once the receiver gave up waiting (now, and never
    /// before the schedule's end): every measured reply that never came
    /// (past the warm-up ones) is recorded with its latency from its
    /// message's scheduled send to then — never 0.
    pub(super) fn finish(mut self) -> Received {
        let gave_up = self.start.elapsed().max(self.schedule_end);
        let mut late = 0;
        for k in self.warmup..self.expected {
            if self.got[(k / 64) as usize] & (1 << (k % 64)) != 0 {
                continue;
            }
            // The sender's own send-time arithmetic.
            let n = k * self.respond_every;
            let sent = Duration::from_nanos((n as f64 * self.interval_ns) as u64);
            self.rtt.record(gave_up.saturating_sub(sent));
            late += 1;
        }
        let measured_span = self
            .first_measured
            .map(|t| {
                self.last_receive
                    .saturating_sub(Duration::from_nanos(t.max(0) as u64))
            })
            .unwrap_or_default();
        Received {
            replies: self.replies,
            confirmed_in_window: self.confirmed_in_window,
            server_errors: self.server_errors,
            measured_span,
            rtt: self.rtt,
            late,
        }
    }
}
