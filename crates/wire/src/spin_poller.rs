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
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use tidegate_hub::ListenerMetrics;

use crate::hub_link::Wake;

/// The mio token of the waker (connections use their slot index).
const WAKE_TOKEN: Token = Token(usize::MAX);
/// Longest park without a deadline: a safety net for a missed wake-up, not
/// a polling period (one pass per second costs nothing measurable).
const MAX_PARK: Duration = Duration::from_secs(1);
/// Events taken per epoll call.
const EVENTS_CAPACITY: usize = 256;
/// Park timeout while a request waits for room in a hub queue (nothing
/// wakes the poller when room appears).
const STALLED_PARK: Duration = Duration::from_millis(1);

/// Per-pass counters, added to the listener's metrics once per pass rather
/// than per frame (the counters are shared by every connection).
#[derive(Default)]
pub(crate) struct PassCounts {
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: usize,
    pub(crate) frames_in: u64,
}

/// A connection the poller can drive: the wire session (`spin_conn.rs`) or
/// the sockperf echo (`sockperf_spin.rs`).
pub(crate) trait PolledConn: Send + 'static {
    /// The socket, for (de)registration with epoll.
    fn sock(&mut self) -> &mut mio::net::TcpStream;
    /// One pass: read until `WouldBlock`, act, write, check timeouts.
    /// Returns whether anything was read.
    fn poll(&mut self, now: Instant, counts: &mut PassCounts) -> bool;
    /// True once finished (the poller drops it, closing the socket).
    fn is_done(&self) -> bool;
    /// The server is stopping: flush, say so if the protocol can, close.
    fn shut_down(&mut self);
    /// The earliest time a timeout may fire, for the park.
    fn next_deadline(&self) -> Option<Instant>;
    /// True when another thread queued something for this connection.
    fn has_answers(&self) -> bool {
        false
    }
    /// True when a request waits for room in a queue nothing wakes on.
    fn is_stalled(&self) -> bool {
        false
    }
}

/// A connection handed over by the listener core.
struct NewConn<C> {
    conn: C,
}

/// What the listener shares with its poller thread.
struct Shared {
    wake: Arc<Wake>,
    /// Set once the server stops accepting: close every connection.
    stopping: AtomicBool,
}

/// The listener's handle on its running poller thread.
pub(crate) struct PollerHandle<C> {
    shared: Arc<Shared>,
    /// Used at hand-over only (once per connection), never per message.
    incoming: Sender<NewConn<C>>,
}

impl<C> Clone for PollerHandle<C> {
    fn clone(&self) -> Self {
        PollerHandle {
            shared: self.shared.clone(),
            incoming: self.incoming.clone(),
        }
    }
}

/// Stops the poller when the server's `run` ends, however it ends.
pub(crate) struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stopping.store(true, Ordering::Release);
        self.0.wake.wake_always();
    }
}

/// Where a poller thread runs and how it parks.
pub(crate) struct PollerSettings {
    /// The thread's name (`wire-poller`, `sockperf-poller`).
    pub(crate) name: &'static str,
    /// The CPU to pin it to, if any.
    pub(crate) cpu: Option<usize>,
    /// Spin this long with nothing read before parking.
    pub(crate) spin_idle: Duration,
    /// At shutdown, how long connections get to close.
    pub(crate) drain: Duration,
}

impl<C: PolledConn> PollerHandle<C> {
    /// Starts a poller thread; it stops when the returned guard is dropped.
    pub(crate) fn start(
        settings: PollerSettings,
        metrics: ListenerMetrics,
    ) -> std::io::Result<(Self, StopOnDrop)> {
        let poll = Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKE_TOKEN)?;
        let shared = Arc::new(Shared {
            wake: Arc::new(Wake::new(waker)),
            stopping: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let poller = Poller {
            poll,
            shared: shared.clone(),
            incoming: rx,
            metrics,
            spin_idle: settings.spin_idle,
            drain: settings.drain,
        };
        let (name, cpu) = (settings.name, settings.cpu);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Some(cpu) = cpu {
                    if crate::pin::pin_current_thread(cpu) {
                        tracing::info!(cpu, thread = name, "low-latency poller pinned");
                    } else {
                        tracing::warn!(
                            cpu,
                            thread = name,
                            "cpu: cannot pin the poller to this CPU; running unpinned"
                        );
                    }
                }
                poller.run();
            })?;
        Ok((
            PollerHandle {
                shared: shared.clone(),
                incoming: tx,
            },
            StopOnDrop(shared),
        ))
    }

    /// Stops the poller as soon as `shutdown` is cancelled (every
    /// connection gets its goodbye at once, not when the listener core's
    /// drain period is over). Must be called inside a tokio runtime.
    pub(crate) fn stop_on(&self, shutdown: tokio_util::sync::CancellationToken) {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            drop(StopOnDrop(shared));
        });
    }

    /// True once the server is stopping (a new connection is not handed
    /// over then).
    pub(crate) fn is_stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Acquire)
    }

    /// What wakes the parked poller (hub tasks use it).
    pub(crate) fn wake(&self) -> Arc<Wake> {
        self.shared.wake.clone()
    }

    /// Hands a connection to the poller; false when it has stopped (the
    /// connection is then dropped, closing its socket).
    pub(crate) fn hand_over(&self, conn: C) -> bool {
        if self.incoming.send(NewConn { conn }).is_err() {
            return false;
        }
        self.shared.wake.wake_always();
        true
    }
}

/// The poller thread's state.
struct Poller<C> {
    poll: Poll,
    shared: Arc<Shared>,
    incoming: Receiver<NewConn<C>>,
    metrics: ListenerMetrics,
    spin_idle: Duration,
    drain: Duration,
}

impl<C: PolledConn> Poller<C> {
    /// Runs until shutdown has closed every connection (or the drain period
    /// is over).
    fn run(mut self) {
        let mut conns: Vec<Option<C>> = Vec::new();
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
                    let _ = self.poll.registry().deregister(c.sock());
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

    fn accept_new(&mut self, conns: &mut Vec<Option<C>>, free: &mut Vec<usize>, open: &mut usize) {
        loop {
            let mut new = match self.incoming.try_recv() {
                Ok(n) => n,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            };
            let i = free.pop().unwrap_or(conns.len());
            let registered = self.poll.registry().register(
                new.conn.sock(),
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
        let m = &self.metrics;
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
        conns: &[Option<C>],
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
