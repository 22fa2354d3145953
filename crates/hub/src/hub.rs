//! [`Hub`]: publish in, subscriber queues and routed sinks out.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use thiserror::Error;

use crate::ack::{AckGroup, AckToken};
use crate::backbone::{Backbone, SESSIONS_TOPIC};
use crate::budget::InflightBudget;
use crate::bus::TopicBus;
use crate::history::{History, HistoryLimits};
use crate::metrics::HubMetrics;
use crate::publisher::TopicPublisher;
use crate::routes::RouteTable;
use crate::sink::Sink;
use crate::subscriber::{PushOutcome, Subscriber, SubscriberOptions};
use crate::topic::{is_system_topic, validate_topic, TopicError};
use crate::{Message, SharedMessage};

/// Why a publish was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PublishError {
    /// The topic is malformed.
    #[error(transparent)]
    BadTopic(#[from] TopicError),
    /// The hub is shutting down.
    #[error("the hub is shutting down")]
    ShuttingDown,
}

#[derive(Debug)]
pub(crate) struct HubInner {
    pub(crate) bus: TopicBus,
    pub(crate) metrics: HubMetrics,
    budget: InflightBudget,
    routes: ArcSwap<RouteTable>,
    next_subscriber: AtomicU64,
    closed: AtomicBool,
    /// Woken once at close, so waiting subscribers see `RecvError::Closed`.
    pub(crate) closing: tokio::sync::Notify,
    /// Zero of the publish stamps subscriber queues keep (delivery latency).
    epoch: std::time::Instant,
    /// Cluster mode: where cluster-wide topics go instead of local fan-out.
    backbone: std::sync::OnceLock<Arc<dyn Backbone>>,
    /// Recovery: the recent messages per topic, and the order of fan-out.
    history: std::sync::OnceLock<Arc<History>>,
    /// Cluster mode: who is told what is read on the backbone's
    /// [`SESSIONS_TOPIC`] (the push server's registry of sessions other
    /// nodes may recover).
    cluster_sessions: std::sync::OnceLock<SessionsSlot>,
}

/// The installed [`ClusterSessionsHandler`] (a closure has no `Debug`).
struct SessionsSlot(ClusterSessionsHandler);

impl std::fmt::Debug for SessionsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSessionsHandler")
    }
}

/// What [`Hub::on_cluster_sessions`] installs: called with every message
/// read on the backbone's [`SESSIONS_TOPIC`], on the reader's task (so it
/// must not block).
pub type ClusterSessionsHandler = Arc<dyn Fn(&Message) + Send + Sync>;

impl HubInner {
    /// Now, in microseconds since the hub's epoch, wrapping (see
    /// `subscriber::Stamped`).
    pub(crate) fn stamp(&self) -> u32 {
        self.epoch.elapsed().as_micros() as u32
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The core every source publishes into. Cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct Hub {
    pub(crate) inner: Arc<HubInner>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new(RouteTable::default())
    }
}

impl Hub {
    /// A hub whose publishes also go to the sinks of `routes`, with the
    /// default in-flight budget.
    pub fn new(routes: RouteTable) -> Self {
        Hub::with_budget(routes, InflightBudget::default())
    }

    /// A hub whose sources draw the bytes they read from `budget`.
    pub fn with_budget(routes: RouteTable, budget: InflightBudget) -> Self {
        let metrics = HubMetrics::default();
        metrics.register_budget(&budget);
        Hub {
            inner: Arc::new(HubInner {
                bus: TopicBus::default(),
                metrics,
                budget,
                routes: ArcSwap::from_pointee(routes),
                next_subscriber: AtomicU64::new(1),
                closed: AtomicBool::new(false),
                closing: tokio::sync::Notify::new(),
                epoch: std::time::Instant::now(),
                backbone: std::sync::OnceLock::new(),
                history: std::sync::OnceLock::new(),
                cluster_sessions: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Replaces the route table (sinks come up after the hub in some set-ups).
    pub fn set_routes(&self, routes: RouteTable) {
        self.inner.routes.store(Arc::new(routes));
    }

    /// The process-wide in-flight byte budget every ingress reads against.
    pub fn budget(&self) -> &InflightBudget {
        &self.inner.budget
    }

    /// The hub's metrics and registry.
    pub fn metrics(&self) -> &HubMetrics {
        &self.inner.metrics
    }

    /// A new subscriber with a bounded queue; subscribe it to patterns next.
    pub fn subscriber(&self, options: SubscriberOptions) -> Subscriber {
        let id = self.inner.next_subscriber.fetch_add(1, Ordering::Relaxed);
        self.inner.metrics.subscribers.inc();
        Subscriber::new(self.inner.clone(), id, options)
    }

    /// Shorthand: a subscriber with default options subscribed to `pattern`.
    pub fn subscribe(&self, pattern: &str) -> Result<Subscriber, TopicError> {
        let mut s = self.subscriber(SubscriberOptions::default());
        s.subscribe(pattern)?;
        Ok(s)
    }

    /// Publishes without waiting for durability: queues to subscribers and
    /// hands to routed sinks (waiting only while a sink is full).
    /// Topics under `$sys.` are refused ([`TopicError::Reserved`]): only the
    /// hub itself publishes there ([`Hub::publish_system`]).
    pub async fn publish(&self, msg: Message) -> Result<(), PublishError> {
        self.publish_inner(msg, None).await
    }

    /// Publishes the hub's own report on a `$sys.` topic (`$sys.stats`) to
    /// its subscribers. Never routed to sinks (a catch-all route must not
    /// fill Kafka with reports) and not counted as published. Not for
    /// sources: what clients send goes through [`Hub::publish`].
    pub fn publish_system(&self, msg: Message) -> Result<(), PublishError> {
        if !is_system_topic(&msg.topic) {
            return Err(TopicError::NotSystem(msg.topic).into());
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(PublishError::ShuttingDown);
        }
        validate_topic(&msg.topic)?;
        self.fan_out(&Arc::new(msg));
        Ok(())
    }

    /// Publishes as part of `group`: every routed sink that takes the message
    /// adds a token the group waits for. Subscriber queues never hold a group
    /// back (they are best-effort by design).
    pub async fn publish_acked(&self, msg: Message, group: &AckGroup) -> Result<(), PublishError> {
        self.publish_inner(msg, Some(group)).await
    }

    /// True when a routed sink of `topic` is full, so a source that must not
    /// wait can answer "destination full" instead.
    pub fn is_destination_full(&self, topic: &str) -> bool {
        let routes = self.inner.routes.load();
        if routes.is_empty() {
            return false;
        }
        let full = routes.matching(topic).any(|s| s.is_full());
        full
    }

    /// Installs the cluster backbone (once; a second call hands it back):
    /// from now on topics it carries reach subscribers only through it
    /// ([`crate::backbone`]).
    #[allow(clippy::result_large_err)]
    pub fn set_backbone(&self, backbone: Arc<dyn Backbone>) -> Result<(), Arc<dyn Backbone>> {
        self.inner.backbone.set(backbone)
    }

    /// Starts keeping a history of what is fanned out (once; later calls
    /// return the history already kept): push connection state recovery
    /// replays from it. Fan-out is serialised from then on.
    pub fn enable_history(&self, limits: HistoryLimits) -> Arc<History> {
        self.inner
            .history
            .get_or_init(|| Arc::new(History::new(limits)))
            .clone()
    }

    /// Installs the handler of what the backbone's [`SESSIONS_TOPIC`]
    /// carries (once; a second call hands it back).
    #[allow(clippy::result_large_err)]
    pub fn on_cluster_sessions(
        &self,
        handler: ClusterSessionsHandler,
    ) -> Result<(), ClusterSessionsHandler> {
        self.inner
            .cluster_sessions
            .set(SessionsSlot(handler))
            .map_err(|SessionsSlot(h)| h)
    }

    /// The cluster backbone, when one is installed.
    pub fn backbone(&self) -> Option<&Arc<dyn Backbone>> {
        self.inner.backbone.get()
    }

    /// Fans a message read back from the cluster backbone out to this
    /// node's subscribers. Not a publish: never routed to sinks (the node
    /// that published it did that) and not counted as published. Refuses
    /// what a publish would refuse.
    ///
    /// A message on [`SESSIONS_TOPIC`] goes to the handler installed with
    /// [`Hub::on_cluster_sessions`] (dropped without one), not to
    /// subscribers.
    pub fn deliver_from_backbone(&self, msg: Message) -> Result<(), PublishError> {
        if msg.topic == SESSIONS_TOPIC {
            if let Some(SessionsSlot(handler)) = self.inner.cluster_sessions.get() {
                handler(&msg);
            }
            return Ok(());
        }
        self.check_topic(&msg.topic)?;
        self.fan_out(&Arc::new(msg));
        Ok(())
    }

    /// Local fan-out, or the backbone's when it carries the topic.
    async fn fan_out_or_forward(&self, msg: &SharedMessage) {
        match self.inner.backbone.get() {
            Some(b) if b.carries(&msg.topic) => {
                if let Err(msg) = b.try_send(msg.clone()) {
                    b.send(msg).await;
                }
            }
            _ => self.fan_out(msg),
        }
    }

    /// Stops accepting publishes; later `publish` calls fail, and each
    /// subscriber gets `RecvError::Closed` once its queue is drained.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.closing.notify_waiters();
    }

    /// Flushes every routed sink, each within `timeout`.
    pub async fn flush_sinks(&self, timeout: std::time::Duration) {
        let routes = self.inner.routes.load_full();
        // All at once: one after another, N sinks took N × `timeout`.
        let sinks = routes.sinks();
        let flushes = sinks.iter().map(|s| s.flush(timeout));
        let _ = tokio::time::timeout(timeout, futures::future::join_all(flushes)).await;
    }

    /// A publisher for a batch of messages on one `topic` (a Forward chunk,
    /// an S2S transaction): the topic is checked and its routes looked up
    /// once for the batch instead of once per message.
    pub fn publisher_for(&self, topic: &str) -> Result<TopicPublisher<'_>, PublishError> {
        self.check_topic(topic)?;
        let routes = self.inner.routes.load_full();
        let sinks = routes.matching(topic).cloned().collect();
        Ok(TopicPublisher::new(self, topic, sinks))
    }

    /// Why a source may not publish on `topic` now, if it may not.
    fn check_topic(&self, topic: &str) -> Result<(), PublishError> {
        if is_system_topic(topic) {
            return Err(TopicError::Reserved(topic.to_owned()).into());
        }
        if self.closed() {
            return Err(PublishError::ShuttingDown);
        }
        validate_topic(topic)?;
        Ok(())
    }

    async fn publish_inner(
        &self,
        msg: Message,
        group: Option<&AckGroup>,
    ) -> Result<(), PublishError> {
        self.check_topic(&msg.topic)?;
        let msg: SharedMessage = Arc::new(msg);
        let routes = self.inner.routes.load();
        if routes.is_empty() {
            return self.deliver(&msg, std::iter::empty(), group).await;
        }
        let routes = arc_swap::Guard::into_inner(routes);
        self.deliver(&msg, routes.matching(&msg.topic), group).await
    }

    /// Delivers a checked message: queues it to the topic's subscribers and
    /// hands it to `sinks` (the sinks its topic routes to), each with a
    /// token of `group`.
    pub(crate) async fn deliver<'s>(
        &self,
        msg: &SharedMessage,
        sinks: impl Iterator<Item = &'s Arc<dyn Sink>>,
        group: Option<&AckGroup>,
    ) -> Result<(), PublishError> {
        let m = &self.inner.metrics;
        m.published.inc();
        self.fan_out_or_forward(msg).await;
        for sink in sinks {
            let token = match group {
                Some(g) => g.token(),
                None => AckToken::detached(),
            }
            .counting_failures(&m.route_failures);
            m.routed.inc();
            // The synchronous path first: no boxed future when there is room.
            if let Err((msg, token)) = sink.try_send(msg.clone(), token) {
                sink.send(msg, token).await;
            }
        }
        Ok(())
    }

    /// Whether [`Hub::close`] has run.
    pub(crate) fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn fan_out(&self, msg: &SharedMessage) {
        match self.inner.history.get() {
            Some(h) => {
                // Sequence, log and queues under one lock: every queue gets
                // messages in sequence order (see `history`).
                let mut recording = h.lock();
                let evicted = recording.record(msg);
                self.fan_out_to_queues(msg);
                drop(recording);
                // Freed outside the lock.
                drop(evicted);
            }
            None => self.fan_out_to_queues(msg),
        }
    }

    fn fan_out_to_queues(&self, msg: &SharedMessage) {
        let (mut delivered, mut dropped, mut disconnected) = (0u64, 0u64, 0u64);
        // The clock is read only when someone subscribed (sources publishing
        // to sinks alone pay nothing), and once for all subscribers.
        let mut stamp = None;
        self.inner.bus.for_each_subscriber(&msg.topic, |q| {
            let at = *stamp.get_or_insert_with(|| self.inner.stamp());
            match q.push(msg, at) {
                PushOutcome::Queued => delivered += 1,
                PushOutcome::DroppedOldest => {
                    delivered += 1;
                    dropped += 1
                }
                PushOutcome::Disconnected => disconnected += 1,
                PushOutcome::AlreadyClosed => {}
            }
        });
        let m = &self.inner.metrics;
        if delivered > 0 {
            m.delivered.inc_by(delivered);
        }
        if dropped > 0 {
            m.dropped_oldest.inc_by(dropped);
        }
        if disconnected > 0 {
            m.disconnected_slow.inc_by(disconnected);
        }
    }
}
