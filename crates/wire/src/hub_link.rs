//! The hub side of one low-latency connection: a tokio task (the listener
//! core's session task for that connection) that does, in order, what the
//! poller thread (`spin_poller.rs`) asks of the hub — publish, subscribe,
//! unsubscribe, answer a PING barrier — and sends back, through a bounded
//! queue, every frame the poller must write: PONGs, request errors, and the
//! MESSAGE frames the hub delivers to the connection's subscriber — taking
//! those only while the connection's [`Backlog`] has room, so a client that
//! does not read leaves them to its hub queue's bound and overflow policy.
//!
//! Not on the echo path: ECHO is answered by the poller itself. The two
//! queues are the only hand-off between the poller and the runtime; the
//! poller's ordering rule (see [`LinkEnd`]) keeps replies in request order.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tidegate_hub::{
    BudgetPermit, EncodedForm, Hub, ListenerMetrics, Message, PublishError, SharedMessage,
    Subscriber, SubscriberOptions,
};
use tokio::sync::{mpsc, Notify};

use crate::codec;
use crate::frame::{ErrorCode, FrameType};
use crate::WireConfig;

/// Requests one connection's poller may have queued for the hub task before
/// it stops decoding that connection's frames (backpressure on its socket).
pub(crate) const TO_HUB_CAPACITY: usize = 1024;
/// Frame batches the hub task may have queued for the poller before it waits.
pub(crate) const FROM_HUB_CAPACITY: usize = 256;

/// A safety net for [`Backlog::wait_for_room`]: how often a hub task that
/// waits for its connection's write buffer to drain checks again without
/// being told (it is told; this only bounds a missed notification).
const ROOM_RECHECK: Duration = Duration::from_millis(100);

/// The bytes waiting to be written to one connection's socket: the frames
/// the hub task queued for the poller that the poller has not taken yet,
/// plus the unsent part of the poller's write buffer.
///
/// The hub task takes no more subscriber messages while this is at
/// `max_outbound_bytes`: a client that does not read then leaves them in
/// its hub queue, where `subscriber_capacity` and the `overflow` policy
/// (drop-oldest, disconnect) bound them — as the default mode's writer does
/// by not taking messages while its write waits.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    /// Bytes of [`FromHub::Frames`] queued and not yet taken.
    queued: AtomicUsize,
    /// The unsent part of the poller's write buffer.
    unsent: AtomicUsize,
    /// True while the hub task waits for room.
    waiting: AtomicBool,
    room: Notify,
}

impl Backlog {
    /// Bytes waiting for the socket.
    pub(crate) fn total(&self) -> usize {
        self.queued.load(Ordering::SeqCst) + self.unsent.load(Ordering::SeqCst)
    }

    /// Bytes queued by the hub task and not yet taken by the poller.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// The hub task queued `n` bytes of frames.
    fn queue(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::SeqCst);
    }

    /// The poller took `n` queued bytes into its write buffer.
    pub(crate) fn took(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::SeqCst);
    }

    /// The poller's write buffer now holds `n` unsent bytes; `limit` is
    /// `max_outbound_bytes`. Wakes the hub task when there is room again.
    pub(crate) fn set_unsent(&self, n: usize, limit: usize) {
        self.unsent.store(n, Ordering::SeqCst);
        self.wake_if_room(limit);
    }

    /// Wakes the hub task if it waits and there is room (call after the
    /// backlog shrank).
    pub(crate) fn wake_if_room(&self, limit: usize) {
        // SeqCst pairs with `wait_for_room`: either the hub task sees the
        // smaller total, or this load sees it waiting.
        if self.waiting.load(Ordering::SeqCst) && self.total() < limit {
            self.waiting.store(false, Ordering::SeqCst);
            self.room.notify_one();
        }
    }

    /// Resolves once fewer than `limit` bytes wait for the socket.
    async fn wait_for_room(&self, limit: usize) {
        loop {
            if self.total() < limit {
                return;
            }
            self.waiting.store(true, Ordering::SeqCst);
            if self.total() < limit {
                self.waiting.store(false, Ordering::SeqCst);
                return;
            }
            // A notification given before this wait starts is kept (Notify
            // stores one permit), so none is lost between check and wait.
            let _ = tokio::time::timeout(ROOM_RECHECK, self.room.notified()).await;
        }
    }
}

/// What the poller asks the hub task to do, in the connection's order.
#[derive(Debug)]
pub(crate) enum ToHub {
    /// Publish, holding the frame's bytes of the in-flight budget until the
    /// hub has taken the message.
    Publish(Message, BudgetPermit),
    /// Subscribe to a validated pattern (the poller bounds and deduplicates).
    Subscribe(String),
    /// Remove a subscription.
    Unsubscribe(String),
    /// Already-encoded replies that must leave after the earlier requests'
    /// answers (a PONG is one: the barrier).
    Reply(Bytes),
}

/// What the hub task hands back to the poller.
#[derive(Debug)]
pub(crate) enum FromHub {
    /// Frames to write.
    Frames(Bytes),
    /// A last ERROR frame: write it, then close (no linger).
    Close(Bytes),
}

/// Wakes the poller thread when it parks on epoll.
#[derive(Debug)]
pub(crate) struct Wake {
    waker: mio::Waker,
    /// True while the poller is (about to be) parked; only then is a wake-up
    /// worth a syscall.
    parked: AtomicBool,
}

impl Wake {
    pub(crate) fn new(waker: mio::Waker) -> Self {
        Wake {
            waker,
            parked: AtomicBool::new(false),
        }
    }

    /// Wakes the poller if it is parked.
    pub(crate) fn wake(&self) {
        // SeqCst pairs with `set_parked`: either the poller sees what was
        // queued before it parks, or this load sees it parked.
        if self.parked.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }

    /// Wakes the poller unconditionally (new connection, shutdown).
    pub(crate) fn wake_always(&self) {
        let _ = self.waker.wake();
    }

    pub(crate) fn set_parked(&self, parked: bool) {
        self.parked.store(parked, Ordering::SeqCst);
    }
}

/// The poller's end of one connection's link.
///
/// Ordering rule: a reply the poller produces itself (ECHO, PONG, AUTH_OK,
/// an ERROR) may be written directly only when every request sent to the
/// hub task has been completed and its answers are in the write buffer;
/// otherwise it is queued behind them as [`ToHub::Reply`].
#[derive(Debug)]
pub(crate) struct LinkEnd {
    pub(crate) to_hub: mpsc::Sender<ToHub>,
    pub(crate) from_hub: mpsc::Receiver<FromHub>,
    /// Requests sent to the hub task.
    pub(crate) sent: u64,
    /// Requests the hub task has completed (answers queued before the count).
    pub(crate) done: Arc<AtomicU64>,
    /// What waits for this connection's socket (shared with the hub task).
    pub(crate) backlog: Arc<Backlog>,
}

/// The hub task's end.
pub(crate) struct HubEnd {
    requests: mpsc::Receiver<ToHub>,
    answers: mpsc::Sender<FromHub>,
    done: Arc<AtomicU64>,
    backlog: Arc<Backlog>,
}

/// A new link: the poller's end and the hub task's end.
pub(crate) fn link() -> (LinkEnd, HubEnd) {
    let (to_hub, requests) = mpsc::channel(TO_HUB_CAPACITY);
    let (answers, from_hub) = mpsc::channel(FROM_HUB_CAPACITY);
    let done = Arc::new(AtomicU64::new(0));
    let backlog = Arc::new(Backlog::default());
    (
        LinkEnd {
            to_hub,
            from_hub,
            sent: 0,
            done: done.clone(),
            backlog: backlog.clone(),
        },
        HubEnd {
            requests,
            answers,
            done,
            backlog,
        },
    )
}

/// Serves the hub side of one connection until the poller drops its end
/// (the connection closed).
pub(crate) async fn run(
    mut end: HubEnd,
    hub: Hub,
    config: Arc<WireConfig>,
    metrics: ListenerMetrics,
    wake: Arc<Wake>,
) {
    let batch = config.write_batch.max(1);
    let limit = config.max_outbound_bytes;
    let mut sub: Option<Subscriber> = None;
    let mut msgs: Vec<SharedMessage> = Vec::new();
    loop {
        let deliveries = async {
            if sub.is_some() {
                end.backlog.wait_for_room(limit).await;
            }
            recv_some(sub.as_ref(), &mut msgs, batch).await
        };
        let event = tokio::select! {
            biased;
            req = end.requests.recv() => Event::Request(req),
            r = deliveries => Event::Delivered(r),
        };
        let (answer, completes) = match event {
            Event::Request(None) => break,
            Event::Request(Some(req)) => {
                (handle(req, &hub, &config, &metrics, &mut sub).await, true)
            }
            Event::Delivered(r) => (delivered(r, &mut msgs, &metrics, &mut sub), false),
        };
        if let Some(a) = answer {
            if let FromHub::Frames(b) = &a {
                end.backlog.queue(b.len());
            }
            if end.answers.send(a).await.is_err() {
                break;
            }
        }
        if completes {
            // Counted after the answer is queued: the poller's ordering
            // rule relies on it.
            end.done.fetch_add(1, Ordering::Release);
        }
        wake.wake();
    }
}

/// What woke the hub task.
enum Event {
    /// A request from the poller; `None` when the connection closed.
    Request(Option<ToHub>),
    /// The subscriber delivered (or ended).
    Delivered(Result<usize, tidegate_hub::RecvError>),
}

async fn handle(
    req: ToHub,
    hub: &Hub,
    config: &WireConfig,
    metrics: &ListenerMetrics,
    sub: &mut Option<Subscriber>,
) -> Option<FromHub> {
    match req {
        ToHub::Publish(msg, _held) => match hub.publish(msg).await {
            Ok(()) => None,
            Err(PublishError::BadTopic(e)) => {
                metrics.error("bad_topic");
                Some(FromHub::Frames(error(ErrorCode::BadTopic, &e.to_string())))
            }
            Err(e @ PublishError::ShuttingDown) => {
                metrics.error("shutting_down");
                Some(FromHub::Close(error(
                    ErrorCode::ShuttingDown,
                    &e.to_string(),
                )))
            }
        },
        ToHub::Subscribe(p) => {
            let s = sub.get_or_insert_with(|| {
                hub.subscriber(SubscriberOptions {
                    capacity: config.subscriber_capacity,
                    overflow: config.overflow,
                })
            });
            // Validated by the poller; a failure here cannot happen.
            let _ = s.subscribe(&p);
            None
        }
        ToHub::Unsubscribe(p) => {
            if let Some(s) = sub.as_mut() {
                s.unsubscribe(&p);
            }
            None
        }
        ToHub::Reply(bytes) => Some(FromHub::Frames(bytes)),
    }
}

/// Encodes what the subscriber delivered (or the overflow that ended it).
fn delivered(
    r: Result<usize, tidegate_hub::RecvError>,
    msgs: &mut Vec<SharedMessage>,
    metrics: &ListenerMetrics,
    sub: &mut Option<Subscriber>,
) -> Option<FromHub> {
    if let Err(e) = r {
        if msgs.is_empty() {
            *sub = None;
            if matches!(e, tidegate_hub::RecvError::Closed) {
                // The hub is closing: the shutdown path says goodbye.
                return None;
            }
            metrics.error("slow_consumer");
            return Some(FromHub::Close(error(
                ErrorCode::SlowConsumer,
                &e.to_string(),
            )));
        }
    }
    let mut buf = BytesMut::new();
    metrics.frames_out(msgs.len() as u64);
    for m in msgs.drain(..) {
        // Encoded once per message, shared by all its subscribers' writers.
        let frame = m.encoded(EncodedForm::WireMessage, |m| {
            let mut one = BytesMut::new();
            codec::encode_message(FrameType::Message, m, &mut one).map(|()| one.freeze())
        });
        match frame {
            Ok(bytes) => buf.extend_from_slice(&bytes),
            Err(e) => {
                metrics.error("unencodable_message");
                tracing::debug!("wire: message on {} not deliverable: {e}", m.topic);
            }
        }
    }
    (!buf.is_empty()).then(|| FromHub::Frames(buf.freeze()))
}

fn error(code: ErrorCode, text: &str) -> Bytes {
    let mut b = BytesMut::new();
    codec::encode_error(code, text, &mut b);
    b.freeze()
}

/// Waits for subscriber messages; forever when there is no subscriber yet.
async fn recv_some(
    sub: Option<&Subscriber>,
    msgs: &mut Vec<SharedMessage>,
    batch: usize,
) -> Result<usize, tidegate_hub::RecvError> {
    match sub {
        Some(s) => s.recv_many(msgs, batch).await,
        None => std::future::pending().await,
    }
}
