//! One `[sockperf]` connection in `mode = "low_latency"`, driven by the
//! busy-polling thread (`spin_poller.rs`): read until `WouldBlock`, echo
//! every complete message with the pure [`echo_replies`], write. The read
//! and reply buffers are allocated once; nothing is allocated, locked or
//! handed to another thread per message.
//!
//! The listener core's idle and partial-message timeouts are applied here,
//! because the core no longer sees the socket. The session task that
//! handed the socket over waits on [`SockperfSpinConn::closed`]'s sender so
//! the core's connection slot and drain keep counting the connection.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use tidegate_hub::ListenerMetrics;
use tokio::sync::oneshot;

use crate::sockperf_header::echo_replies;
use crate::spin_poller::{PassCounts, PolledConn};

/// Read buffer bytes beyond the longest message (so several messages fit
/// in one read).
const READ_SLACK_BYTES: usize = 64 * 1024;
/// Reply buffer allocated per connection, bytes.
const REPLY_BUFFER_BYTES: usize = 64 * 1024;

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
            closing: false,
            done: false,
            _closed: tx,
        };
        (conn, rx)
    }

    /// Reads until the socket would block, echoing every complete message.
    fn read_and_echo(&mut self, counts: &mut PassCounts) -> bool {
        let mut read_any = false;
        loop {
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

    fn flush(&mut self, counts: &mut PassCounts) {
        while self.out_pos < self.out.len() {
            match self.sock.write(&self.out[self.out_pos..]) {
                Ok(n) => {
                    self.out_pos += n;
                    counts.bytes_out += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.metrics.error("io");
                    tracing::debug!("sockperf: write failed: {e}");
                    self.done = true;
                    return;
                }
            }
        }
        self.out.clear();
        self.out_pos = 0;
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
        let read_any = !self.closing && !self.done && self.read_and_echo(counts);
        if !self.done {
            self.flush(counts);
        }
        if read_any {
            self.last_active = now;
        } else if !self.closing {
            self.check_timeouts(now);
        }
        if self.closing && self.out_pos == self.out.len() {
            let _ = self.sock.shutdown(Shutdown::Write);
            self.done = true;
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
            return None;
        }
        match self.partial_since {
            Some(since) => self.frame_timeout.map(|t| since + t),
            None => self.idle.map(|t| self.last_active + t),
        }
    }
}
