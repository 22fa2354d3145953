//! A subscriber: one bounded queue, fed by any number of subscriptions, owned
//! by one session (a wire connection, a push socket, an S2S output port).
//!
//! The publisher pushes a shared message and wakes the session only when the
//! queue goes from empty to non-empty, so a burst costs one wake-up. The session
//! drains everything queued in one call ([`Subscriber::recv_many`]) and writes
//! it in one go.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use thiserror::Error;
use tokio::sync::Notify;

use crate::config::OverflowPolicy;
use crate::hub::HubInner;
use crate::topic::{Pattern, TopicError};
use crate::SharedMessage;

/// Default queue bound of a subscriber, in messages.
pub const DEFAULT_SUBSCRIBER_CAPACITY: usize = 1024;

/// How a subscriber's queue is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberOptions {
    /// Maximum queued messages (at least 1).
    pub capacity: usize,
    /// What a full queue does.
    pub overflow: OverflowPolicy,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        SubscriberOptions {
            capacity: DEFAULT_SUBSCRIBER_CAPACITY,
            overflow: OverflowPolicy::DropOldest,
        }
    }
}

/// Why a receive ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RecvError {
    /// The queue overflowed under [`OverflowPolicy::Disconnect`].
    #[error("subscriber was too slow: its queue of {capacity} messages overflowed")]
    Overflowed {
        /// The bound that was exceeded.
        capacity: usize,
    },
    /// The hub is shutting down.
    #[error("the hub is shutting down")]
    Closed,
}

/// A queued message and when it was published, in microseconds since the
/// hub's epoch (wrapping every 71 minutes: only differences are used, and no
/// message waits that long). 16 bytes, so an idle queue stays small.
type Stamped = (SharedMessage, u32);

#[derive(Debug)]
struct QueueState {
    buf: VecDeque<Stamped>,
    closed: Option<RecvError>,
}

/// The part of a subscriber the bus holds: the queue and its waker.
#[derive(Debug)]
pub(crate) struct SubscriberQueue {
    pub(crate) id: u64,
    options: SubscriberOptions,
    state: Mutex<QueueState>,
    notify: Notify,
    dropped: AtomicU64,
}

/// What a push into a queue did, for the hub's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushOutcome {
    Queued,
    DroppedOldest,
    Disconnected,
    AlreadyClosed,
}

impl SubscriberQueue {
    /// Queues `msg`, published at `stamp` (see [`HubInner::stamp`]).
    pub(crate) fn push(&self, msg: &SharedMessage, stamp: u32) -> PushOutcome {
        let mut st = self.state.lock();
        if st.closed.is_some() {
            return PushOutcome::AlreadyClosed;
        }
        let was_empty = st.buf.is_empty();
        let mut outcome = PushOutcome::Queued;
        if st.buf.len() >= self.options.capacity {
            match self.options.overflow {
                OverflowPolicy::DropOldest => {
                    st.buf.pop_front();
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    outcome = PushOutcome::DroppedOldest;
                }
                OverflowPolicy::Disconnect => {
                    st.closed = Some(RecvError::Overflowed {
                        capacity: self.options.capacity,
                    });
                    drop(st);
                    self.notify.notify_one();
                    return PushOutcome::Disconnected;
                }
            }
        }
        st.buf.push_back((msg.clone(), stamp));
        drop(st);
        if was_empty {
            self.notify.notify_one();
        }
        outcome
    }
}

/// A session's handle: subscribe to patterns, receive what matches.
/// Dropping it removes all its subscriptions.
#[derive(Debug)]
pub struct Subscriber {
    queue: Arc<SubscriberQueue>,
    hub: Arc<HubInner>,
    patterns: HashSet<Pattern>,
}

impl Subscriber {
    pub(crate) fn new(hub: Arc<HubInner>, id: u64, options: SubscriberOptions) -> Self {
        let options = SubscriberOptions {
            capacity: options.capacity.max(1),
            ..options
        };
        Subscriber {
            queue: Arc::new(SubscriberQueue {
                id,
                options,
                state: Mutex::new(QueueState {
                    buf: VecDeque::with_capacity(options.capacity.min(32)),
                    closed: None,
                }),
                notify: Notify::new(),
                dropped: AtomicU64::new(0),
            }),
            hub,
            patterns: HashSet::new(),
        }
    }

    /// Subscribes to `pattern`; `Ok(false)` if it was already subscribed.
    pub fn subscribe(&mut self, pattern: &str) -> Result<bool, TopicError> {
        let p = Pattern::parse(pattern)?;
        if self.patterns.contains(&p) {
            return Ok(false);
        }
        self.hub.bus.insert(&p, &self.queue)?;
        self.patterns.insert(p);
        self.hub.metrics.subscriptions.inc();
        Ok(true)
    }

    /// Removes a subscription; `false` if there was none for `pattern`.
    pub fn unsubscribe(&mut self, pattern: &str) -> bool {
        let Ok(p) = Pattern::parse(pattern) else {
            return false;
        };
        if self.patterns.remove(&p) {
            self.hub.bus.remove(&p, self.queue.id);
            self.hub.metrics.subscriptions.dec();
            true
        } else {
            false
        }
    }

    /// The patterns currently subscribed.
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.patterns.iter().map(Pattern::as_str)
    }

    /// Messages discarded by drop-oldest so far.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped.load(Ordering::Relaxed)
    }

    /// Messages waiting in the queue now.
    pub fn len(&self) -> usize {
        self.queue.state.lock().buf.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves up to `max` queued messages into `out` without waiting.
    /// Returns how many were moved, or the close reason once the queue is
    /// empty and closed.
    pub fn try_recv_many(
        &self,
        out: &mut Vec<SharedMessage>,
        max: usize,
    ) -> Result<usize, RecvError> {
        let mut st = self.queue.state.lock();
        let n = st.buf.len().min(max);
        if n == 0 {
            if let Some(why) = st.closed {
                return Err(why);
            }
            if self.hub.is_closed() {
                // Everything queued before the close was delivered.
                return Err(RecvError::Closed);
            }
            return Ok(0);
        }
        // Waits are recorded in runs of equal microseconds: messages of one
        // burst cost one atomic add, not one each.
        let now = self.hub.stamp();
        let latency = self.hub.metrics.delivery_latency();
        let mut run: Option<(u32, u64)> = None;
        for (m, stamp) in st.buf.drain(..n) {
            let waited = now.wrapping_sub(stamp);
            run = match run {
                Some((w, k)) if w == waited => Some((w, k + 1)),
                Some((w, k)) => {
                    latency.record_us_n(u64::from(w), k);
                    Some((waited, 1))
                }
                None => Some((waited, 1)),
            };
            out.push(m);
        }
        drop(st);
        if let Some((w, k)) = run {
            latency.record_us_n(u64::from(w), k);
        }
        self.hub.metrics.consumed.inc_by(n as u64);
        Ok(n)
    }

    /// Waits until at least one message is queued, then moves up to `max`
    /// into `out`.
    pub async fn recv_many(
        &self,
        out: &mut Vec<SharedMessage>,
        max: usize,
    ) -> Result<usize, RecvError> {
        loop {
            let notified = self.queue.notify.notified();
            let closing = self.hub.closing.notified();
            let n = self.try_recv_many(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            tokio::select! {
                _ = notified => {}
                _ = closing => {}
            }
        }
    }

    /// Waits for one message.
    pub async fn recv(&self) -> Result<SharedMessage, RecvError> {
        let mut one = Vec::with_capacity(1);
        self.recv_many(&mut one, 1).await?;
        Ok(one.pop().expect("recv_many returned one"))
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        for p in self.patterns.drain() {
            self.hub.bus.remove(&p, self.queue.id);
            self.hub.metrics.subscriptions.dec();
        }
        let leftover = self.queue.state.lock().buf.len() as u64;
        self.hub.metrics.consumed.inc_by(leftover);
        self.hub.metrics.subscribers.dec();
    }
}
