//! The low-latency poller: one dedicated OS thread that owns every
//! low-latency `[wire]` connection's socket and polls them without parking
//! — read each until `WouldBlock`, act, write, next socket, repeat — so no
//! wake-up sits between a client's bytes and the reply.
//!
//! After `spin_idle_ms` with nothing read it parks on epoll (mio) until a
//! socket is readable, a hub task has answers (`hub_link::Wake`), a new
//! connection arrives, or the next timeout is due; then it spins again.
//! At shutdown every connection gets ERROR 8 and is closed; the thread ends
//! when the last one is gone or the drain period is over.
//!
//! Not for: accepting, limits, TLS — the listener core does those and hands
//! plain sockets over (`low_latency.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use crate::hub_link::Wake;
use crate::spin_conn::{PassCounts, SpinConn, SpinContext};

/// The mio token of the waker (connections use their slot index).
pub(crate) const WAKE_TOKEN: Token = Token(usize::MAX);
/// Longest park without a deadline: a safety net for a missed wake-up, not
/// a polling period (one pass per second costs nothing measurable).
const MAX_PARK: Duration = Duration::from_secs(1);
/// Events taken per epoll call.
const EVENTS_CAPACITY: usize = 256;
/// Park timeout while a request waits for room in a hub queue (nothing
/// wakes the poller when room appears).
const STALLED_PARK: Duration = Duration::from_millis(1);

/// A connection handed over by the listener core.
pub(crate) struct NewConn {
    pub(crate) conn: SpinConn,
}

/// What the listener shares with its poller thread.
pub(crate) struct Shared {
    pub(crate) wake: Arc<Wake>,
    /// Set once the server stops accepting: close every connection.
    pub(crate) stopping: AtomicBool,
}

/// The poller thread's state.
pub(crate) struct Poller {
    pub(crate) poll: Poll,
    pub(crate) shared: Arc<Shared>,
    pub(crate) incoming: Receiver<NewConn>,
    pub(crate) ctx: Arc<SpinContext>,
    pub(crate) spin_idle: Duration,
    pub(crate) drain: Duration,
}

impl Poller {
    /// Runs until shutdown has closed every connection (or the drain period
    /// is over).
    pub(crate) fn run(mut self) {
        let mut conns: Vec<Option<SpinConn>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut last_read = Instant::now();
        let mut drain_until: Option<Instant> = None;
        let mut open = 0usize;
        loop {
            self.accept_new(&mut conns, &mut free, &mut open);
            if drain_until.is_none() && self.shared.stopping.load(Ordering::Acquire) {
                drain_until = Some(Instant::now() + self.drain);
                for c in conns.iter_mut().flatten() {
                    c.shut_down();
                }
            }
            let now = Instant::now();
            let mut counts = PassCounts::default();
            let mut read_any = false;
            for (i, slot) in conns.iter_mut().enumerate() {
                let Some(c) = slot else { continue };
                if drain_until.is_some() {
                    // Connections handed over during shutdown close too.
                    c.shut_down();
                }
                read_any |= c.poll(now, &mut counts);
                if c.is_done() {
                    let _ = self.poll.registry().deregister(&mut c.sock);
                    *slot = None;
                    free.push(i);
                    open -= 1;
                }
            }
            self.count(&counts);
            if let Some(until) = drain_until {
                if open == 0 || now >= until {
                    break;
                }
            }
            if read_any {
                last_read = now;
            } else if now.duration_since(last_read) >= self.spin_idle {
                if self.park(&conns, &mut events, drain_until) {
                    // Woken by an event: spin again.
                    last_read = Instant::now();
                }
            } else {
                std::hint::spin_loop();
            }
        }
        // Whatever is left after the drain period is dropped (closed).
        tracing::debug!(open, "wire low-latency poller stopped");
    }

    fn accept_new(
        &mut self,
        conns: &mut Vec<Option<SpinConn>>,
        free: &mut Vec<usize>,
        open: &mut usize,
    ) {
        loop {
            let mut new = match self.incoming.try_recv() {
                Ok(n) => n,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            };
            let i = free.pop().unwrap_or(conns.len());
            let registered = self.poll.registry().register(
                &mut new.conn.sock,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            );
            if let Err(e) = registered {
                tracing::warn!("wire: cannot poll a connection: {e}");
                if i < conns.len() {
                    free.push(i);
                }
                continue; // dropped: closed
            }
            if i == conns.len() {
                conns.push(Some(new.conn));
            } else {
                conns[i] = Some(new.conn);
            }
            *open += 1;
        }
    }

    /// Adds one pass's counters to the listener's metrics.
    fn count(&self, c: &PassCounts) {
        let m = &self.ctx.metrics;
        if c.bytes_in > 0 {
            m.bytes_in(c.bytes_in);
        }
        if c.bytes_out > 0 {
            m.bytes_out(c.bytes_out);
        }
        if c.frames_in > 0 {
            m.frames_in(c.frames_in);
        }
    }

    /// Parks on epoll until an event or the next deadline. Returns true when
    /// woken by an event (then the poller spins again).
    fn park(
        &mut self,
        conns: &[Option<SpinConn>],
        events: &mut Events,
        drain_until: Option<Instant>,
    ) -> bool {
        self.shared.wake.set_parked(true);
        // Checked after announcing the park: anything queued before is seen
        // here, anything after finds the flag and wakes us.
        let pending = conns.iter().flatten().any(|c| c.has_answers());
        let stalled = conns.iter().flatten().any(|c| c.is_stalled());
        if pending || self.shared.stopping.load(Ordering::Acquire) && drain_until.is_none() {
            self.shared.wake.set_parked(false);
            return true;
        }
        let now = Instant::now();
        let mut deadline = conns
            .iter()
            .flatten()
            .filter_map(|c| c.next_deadline())
            .chain(drain_until)
            .min();
        if stalled {
            deadline = Some(deadline.map_or(now + STALLED_PARK, |d| d.min(now + STALLED_PARK)));
        }
        let timeout = deadline.map_or(MAX_PARK, |d| d.saturating_duration_since(now).min(MAX_PARK));
        let r = self.poll.poll(events, Some(timeout));
        self.shared.wake.set_parked(false);
        if let Err(e) = r {
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::warn!("wire: epoll failed: {e}");
            }
            return true;
        }
        !events.is_empty()
    }
}
