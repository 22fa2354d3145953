//! One `[sockperf]` connection in `mode = "low_latency"`, driven by the
//! busy-polling thread (`spin_poller.rs`): read until `WouldBlock`, echo
//! every complete message with the pure [`echo_replies`], write. The read
//! and reply buffers are allocated once; nothing is allocated, locked or
//! handed to another thread per message.
//!
//! The listener core's idle and partial-message timeouts are applied here,
//! because the core no longer sees the socket. A client that does not read
//! its replies is held back as in the default mode: while more than
//! [`MAX_UNSENT_BYTES`] of replies wait, nothing more is read (TCP slows the
//! client), and a connection whose replies make no progress for the idle
//! timeout is closed (`write_timeout`); closing waits for the last replies
//! only a short bound. The session task that
//! handed the socket over waits on [`SockperfSpinConn::closed`]'s sender so
//! the core's connection slot and drain keep counting the connection.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use tidegate_hub::ListenerMetrics;
use tokio::sync::oneshot;

use crate::sockperf_header::echo_replies;
use crate::spin_poller::{PassCounts, PolledConn};
use crate::timed_write::StallLimit;

/// Read buffer bytes beyond the longest message (so several messages fit
/// in one read).
const READ_SLACK_BYTES: usize = 64 * 1024;
/// Reply buffer allocated per connection, bytes.
const REPLY_BUFFER_BYTES: usize = 64 * 1024;
/// While more reply bytes than this wait unsent, the connection reads
/// nothing: one read adds at most a read buffer of replies, so the buffer
/// stays under this plus [`READ_SLACK_BYTES`] and the longest message.
const MAX_UNSENT_BYTES: usize = REPLY_BUFFER_BYTES;

/// One sockperf connection on the poller.
pub(crate) struct SockperfSpinConn {
    sock: mio::net::TcpStream,
    metrics: ListenerMetrics,
    max_message: usize,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    out: Vec<u8>,
    out_pos: usize,
    idle: Option<Duration>,
    frame_timeout: Option<Duration>,
    last_active: Instant,
    partial_since: Option<Instant>,
    /// Since when unsent replies have waited without the socket taking any.
    write_stalled_since: Option<Instant>,
    /// No write progress for this long: the client is not reading.
    write_timeout: Option<Duration>,
    /// Given up (closed) when the last replies cannot be written by then.
    closing_until: Option<Instant>,
    closing: bool,
    done: bool,
    /// Dropped with the connection: tells the session task it is over.
    _closed: oneshot::Sender<()>,
}

impl SockperfSpinConn {
    /// A connection and the receiver that resolves when it is closed.
    pub(crate) fn new(
        sock: mio::net::TcpStream,
        metrics: ListenerMetrics,
        max_message: usize,
        idle: Option<Duration>,
        frame_timeout: Option<Duration>,
    ) -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let conn = SockperfSpinConn {
            sock,
            metrics,
            max_message,
            rbuf: vec![0; max_message + READ_SLACK_BYTES],
            rstart: 0,
            rend: 0,
            out: Vec::with_capacity(REPLY_BUFFER_BYTES),
            out_pos: 0,
            idle,
            frame_timeout,
            last_active: Instant::now(),
            partial_since: None,
            write_stalled_since: None,
            write_timeout: idle.or(frame_timeout),
            closing_until: None,
            closing: false,
            done: false,
            _closed: tx,
        };
        (conn, rx)
    }

    /// Reads until the socket would block, echoing every complete message;
    /// stops early while the client leaves too many replies unread.
    fn read_and_echo(&mut self, counts: &mut PassCounts) -> bool {
        let mut read_any = false;
        loop {
            if self.backed_up() {
                // Make room; if the client is not reading, read no more.
                self.flush(counts);
                if self.done || self.backed_up() {
                    return read_any;
                }
            }
            if self.rend == self.rbuf.len() {
                // The buffer holds more than a longest message, so a full
                // buffer always has consumed bytes at its front.
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            match self.sock.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    self.closing = true;
                    return read_any;
                }
                Ok(n) => {
                    self.rend += n;
                    counts.bytes_in += n;
                    read_any = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return read_any,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.metrics.error("io");
                    tracing::debug!("sockperf: read failed: {e}");
                    self.done = true;
                    return read_any;
                }
            }
            match echo_replies(
                &self.rbuf[self.rstart..self.rend],
                self.max_message,
                &mut self.out,
            ) {
                Ok(e) => {
                    // Counted before the replies are written, as in the
                    // default mode (one add per read, not per message).
                    if e.messages > 0 {
                        self.metrics.frames_in(e.messages);
                    }
                    self.rstart += e.consumed;
                    if e.messages > 0 {
                        self.partial_since = None;
                    }
                }
                Err(e) => {
                    self.metrics.error("bad_length");
                    tracing::debug!("sockperf: closing connection: {e}");
                    self.closing = true;
                    return read_any;
                }
            }
            if self.rstart == self.rend {
                self.rstart = 0;
                self.rend = 0;
            } else if self.partial_since.is_none() {
                self.partial_since = Some(Instant::now());
            }
        }
    }

    /// Writes replies until the socket would block; returns whether any
    /// byte was written.
    fn flush(&mut self, counts: &mut PassCounts) -> bool {
        let mut wrote = false;
        while self.out_pos < self.out.len() {
            match self.sock.write(&self.out[self.out_pos..]) {
                Ok(0) => {
                    self.done = true;
                    return wrote;
                }
                Ok(n) => {
                    self.out_pos += n;
                    counts.bytes_out += n;
                    wrote = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let now = Instant::now();
                    if wrote {
                        // Writing is activity too (as in the listener core).
                        self.last_active = now;
                        self.write_stalled_since = Some(now);
                    } else if self.write_stalled_since.is_none() {
                        self.write_stalled_since = Some(now);
                    }
                    return wrote;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.metrics.error("io");
                    tracing::debug!("sockperf: write failed: {e}");
                    self.done = true;
                    return wrote;
                }
            }
        }
        self.write_stalled_since = None;
        self.out.clear();
        self.out_pos = 0;
        if self.out.capacity() > 2 * REPLY_BUFFER_BYTES + self.max_message {
            // A burst is over: back to the usual size.
            self.out = Vec::with_capacity(REPLY_BUFFER_BYTES);
        }
        wrote
    }

    /// True while so many replies wait that nothing more is read.
    fn backed_up(&self) -> bool {
        self.out.len() - self.out_pos > MAX_UNSENT_BYTES
    }

    /// Closes the connection when its replies made no progress for the
    /// write timeout; true when it did.
    fn check_write_stall(&mut self, now: Instant) -> bool {
        let (Some(since), Some(limit)) = (self.write_stalled_since, self.write_timeout) else {
            return false;
        };
        if now.saturating_duration_since(since) < limit {
            return false;
        }
        self.metrics.error("write_timeout");
        tracing::debug!("sockperf: closing connection: the client read nothing for {limit:?}");
        self.done = true;
        true
    }

    /// The listener core's timeouts (counted with the core's kind names).
    fn check_timeouts(&mut self, now: Instant) {
        let expired = match self.partial_since {
            Some(since) => self
                .frame_timeout
                .filter(|t| now.duration_since(since) >= *t)
                .map(|_| "read_timeout"),
            None => self
                .idle
                .filter(|t| now.duration_since(self.last_active) >= *t)
                .map(|_| "idle_timeout"),
        };
        if let Some(kind) = expired {
            self.metrics.error(kind);
            tracing::debug!("sockperf: closing connection: {kind}");
            self.closing = true;
        }
    }
}

impl PolledConn for SockperfSpinConn {
    fn sock(&mut self) -> &mut mio::net::TcpStream {
        &mut self.sock
    }

    fn poll(&mut self, now: Instant, counts: &mut PassCounts) -> bool {
        // Replies the client does not read stop the reading (in
        // `read_and_echo`): the kernel's buffers fill and TCP slows the
        // client, instead of this buffer growing.
        let read_any = !self.closing && !self.done && self.read_and_echo(counts);
        let wrote = !self.done && self.flush(counts);
        if read_any {
            self.last_active = now;
        }
        if !self.closing && !self.done && !self.check_write_stall(now) {
            // A message left incomplete because reading stopped is not the
            // client's delay.
            if !read_any && !self.backed_up() {
                self.check_timeouts(now);
            }
        }
        if self.closing && !self.done {
            if self.out_pos == self.out.len() {
                let _ = self.sock.shutdown(Shutdown::Write);
                self.done = true;
            } else {
                let limit = StallLimit::closing_limit(self.write_timeout);
                match self.closing_until {
                    Some(until) if !wrote && now >= until => {
                        tracing::debug!("sockperf: closing connection: the client read nothing");
                        self.done = true;
                    }
                    Some(_) if !wrote => {}
                    _ => self.closing_until = Some(now + limit),
                }
            }
        }
        read_any
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn shut_down(&mut self) {
        self.closing = true;
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.closing {
            return self.closing_until;
        }
        let write = self
            .write_stalled_since
            .zip(self.write_timeout)
            .map(|(since, t)| since + t);
        let read = if self.backed_up() {
            None
        } else {
            match self.partial_since {
                Some(since) => self.frame_timeout.map(|t| since + t),
                None => self.idle.map(|t| self.last_active + t),
            }
        };
        match (read, write) {
            (Some(r), Some(w)) => Some(r.min(w)),
            (r, w) => r.or(w),
        }
    }
}
