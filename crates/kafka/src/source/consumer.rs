//! [`KafkaSource`]: the consumer loop — records in, hub publishes out,
//! offsets committed only behind the hub's acknowledgements.
//!
//! Each record is published with its own [`AckGroup`] (so a routed sink's
//! acknowledgement is per record) in the order the partition gave it; the
//! group's completion goes back to the [`OffsetTracker`], and the positions
//! it allows are stored for librdkafka's auto-commit every
//! [`STORE_INTERVAL`] (librdkafka also commits them when partitions are
//! revoked, and the loop commits them once more at shutdown). A record a
//! sink failed is published again after [`RETRY_BACKOFF`] — never skipped,
//! so nothing after it is committed until it succeeds.
//!
//! Backpressure: at `max_in_flight` unacknowledged records the consumer
//! pauses its partitions (librdkafka drops what it prefetched for them and
//! fetches again from the last record handed over when resumed) and keeps
//! polling, so rebalances are still served; it resumes at half. A record
//! that arrives while paused (from a partition assigned meanwhile) is
//! published and the new assignment paused too, so the overshoot is at most
//! one record per partition.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientContext, Message as _, Offset, TopicPartitionList};
use thiserror::Error;
use tidegate_hub::{AckGroup, DeliveryError, Hub, HubMetrics, Message, PublishError};
use tracing::{debug, info, warn};

use super::config::{KafkaSourceConfig, SourceConfigError};
use super::metrics::SourceMetrics;
use super::offsets::{OffsetTracker, Ticket};
use super::record::to_message;

/// How often acknowledged positions are handed to librdkafka for the next
/// commit.
pub const STORE_INTERVAL: Duration = Duration::from_millis(100);

/// How long a record a sink failed waits before it is published again.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// How long the loop waits after a consumer error before polling again, so
/// a persistent error (an unreachable broker) does not spin.
pub const ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Why the source could not start.
#[derive(Debug, Error)]
pub enum KafkaSourceError {
    /// The `[sources.kafka]` section is unusable.
    #[error(transparent)]
    Config(#[from] SourceConfigError),
    /// librdkafka refused the configuration or the subscription.
    #[error("[sources.kafka] {0}")]
    Consumer(#[from] KafkaError),
}

/// Counts rebalances and logs them.
pub struct SourceContext {
    metrics: SourceMetrics,
}

impl ClientContext for SourceContext {}

impl ConsumerContext for SourceContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.metrics.rebalances.inc();
        match rebalance {
            Rebalance::Assign(tpl) => info!(partitions = tpl.count(), "kafka source: assigned"),
            Rebalance::Revoke(tpl) => info!(partitions = tpl.count(), "kafka source: revoked"),
            Rebalance::Error(e) => warn!(error = %e, "kafka source: rebalance failed"),
        }
    }
}

type Consumer_ = StreamConsumer<SourceContext>;

/// One record published and waiting for its acknowledgement.
type Pending = Pin<Box<dyn Future<Output = (Ticket, Message, Result<(), DeliveryError>)> + Send>>;

/// Consumes `[sources.kafka]` into the hub.
pub struct KafkaSource {
    consumer: Arc<Consumer_>,
    config: KafkaSourceConfig,
    metrics: SourceMetrics,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("group_id", &self.config.group_id)
            .field("subscription", &self.config.subscription())
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// Creates the consumer; it subscribes (and joins its group) only when
    /// [`KafkaSource::run`] starts, so `tidegate config --check` can build
    /// one without disturbing the group.
    pub fn new(config: KafkaSourceConfig) -> Result<Self, KafkaSourceError> {
        let client_config = config.client_config()?;
        let metrics = SourceMetrics::default();
        let consumer: Consumer_ = client_config.create_with_context(SourceContext {
            metrics: metrics.clone(),
        })?;
        Ok(KafkaSource {
            consumer: Arc::new(consumer),
            config,
            metrics,
        })
    }

    /// The source's counters.
    pub fn metrics(&self) -> &SourceMetrics {
        &self.metrics
    }

    /// Registers the counters (`tidegate_kafka_source_*`) with the hub.
    pub fn register_metrics(&self, metrics: &HubMetrics) {
        self.metrics.register(metrics);
    }

    /// Subscribes, then consumes into `hub` until `shutdown` resolves; then
    /// gives what is in flight up to `drain` to be acknowledged, commits
    /// what was, and leaves the group. An unreachable broker delays
    /// records; it is not an error.
    pub async fn run(
        self,
        hub: Hub,
        shutdown: impl Future<Output = ()>,
        drain: Duration,
    ) -> Result<(), KafkaSourceError> {
        let subscription = self.config.subscription();
        let topics: Vec<&str> = subscription.iter().map(String::as_str).collect();
        self.consumer.subscribe(&topics)?;
        info!(group = %self.config.group_id, topics = ?subscription, "kafka source: subscribed");
        let mut state = LoopState {
            hub,
            tracker: OffsetTracker::default(),
            pending: FuturesUnordered::new(),
            paused: false,
        };
        let max = self.config.max_in_flight;
        let mut store_tick = tokio::time::interval(STORE_INTERVAL);
        store_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            if state.pending.len() >= max && !state.paused {
                self.metrics.pauses.inc();
                self.pause(&mut state);
            } else if state.paused && state.pending.len() <= max / 2 {
                self.resume(&mut state);
            }
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                Some((ticket, msg, result)) = state.pending.next(), if !state.pending.is_empty() => {
                    self.settle(&mut state, ticket, msg, result);
                }
                _ = store_tick.tick() => self.store(&mut state.tracker),
                record = self.consumer.recv() => {
                    let stop = match record {
                        Ok(record) => {
                            let ticket = state.tracker.received(
                                record.topic(),
                                record.partition(),
                                record.offset(),
                            );
                            let converted = to_message(&self.config.topic_prefix, &record);
                            drop(record);
                            self.metrics.consumed.inc();
                            if converted.dropped_headers > 0 {
                                self.metrics
                                    .dropped_headers
                                    .inc_by(converted.dropped_headers as u64);
                            }
                            if state.paused {
                                // From a partition assigned while paused.
                                self.pause(&mut state);
                            }
                            self.publish(&mut state, ticket, converted.message).await
                        }
                        Err(e) => {
                            warn!(error = %e, "kafka source: consumer error");
                            tokio::time::sleep(ERROR_PAUSE).await;
                            false
                        }
                    };
                    if stop {
                        break;
                    }
                }
            }
        }
        self.finish(state, drain).await;
        Ok(())
    }

    /// Publishes one record; true when the hub is shutting down.
    async fn publish(&self, state: &mut LoopState, ticket: Ticket, msg: Message) -> bool {
        let group = AckGroup::new();
        match state.hub.publish_acked(msg.clone(), &group).await {
            Ok(()) => {
                self.metrics.in_flight.inc();
                state.pending.push(Box::pin(async move {
                    let result = group.wait().await;
                    (ticket, msg, result)
                }));
                false
            }
            Err(PublishError::BadTopic(e)) => {
                self.metrics.invalid.inc();
                warn!(topic = %ticket.topic, partition = ticket.partition, offset = ticket.offset,
                      error = %e, "kafka source: record skipped, its topic makes no valid hub topic");
                state.tracker.done(&ticket);
                false
            }
            Err(PublishError::ShuttingDown) => true,
        }
    }

    /// One record's acknowledgement came back.
    fn settle(
        &self,
        state: &mut LoopState,
        ticket: Ticket,
        msg: Message,
        result: Result<(), DeliveryError>,
    ) {
        self.metrics.in_flight.dec();
        match result {
            Ok(()) => {
                self.metrics.acknowledged.inc();
                state.tracker.done(&ticket);
            }
            Err(e) => {
                // Not committed past: published again until a sink takes it.
                self.metrics.retried.inc();
                self.metrics.in_flight.inc();
                debug!(topic = %ticket.topic, partition = ticket.partition, offset = ticket.offset,
                       error = %e, "kafka source: a routed sink failed the record; retrying");
                let hub = state.hub.clone();
                state.pending.push(Box::pin(async move {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                    let group = AckGroup::new();
                    let result = match hub.publish_acked(msg.clone(), &group).await {
                        Ok(()) => group.wait().await,
                        Err(_) => Err(DeliveryError::ShuttingDown),
                    };
                    (ticket, msg, result)
                }));
            }
        }
    }

    /// Hands the positions acknowledged since the last call to librdkafka,
    /// which commits them with the next auto-commit.
    fn store(&self, tracker: &mut OffsetTracker) {
        let positions = tracker.take_committable();
        if positions.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::with_capacity(positions.len());
        for (topic, partition, offset) in &positions {
            if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
                warn!(error = %e, "kafka source: bad offset position");
            }
        }
        match self.consumer.store_offsets(&tpl) {
            Ok(()) => {
                self.metrics.offsets_stored.inc_by(positions.len() as u64);
            }
            // A partition revoked meanwhile: its new owner reads from the
            // last commit (duplicates, never a loss).
            Err(e) => debug!(error = %e, "kafka source: offsets not stored"),
        }
    }

    fn pause(&self, state: &mut LoopState) {
        match self.consumer.assignment() {
            Ok(tpl) => {
                if let Err(e) = self.consumer.pause(&tpl) {
                    warn!(error = %e, "kafka source: pausing failed");
                }
            }
            Err(e) => warn!(error = %e, "kafka source: no assignment to pause"),
        }
        state.paused = true;
    }

    fn resume(&self, state: &mut LoopState) {
        if let Ok(tpl) = self.consumer.assignment() {
            if let Err(e) = self.consumer.resume(&tpl) {
                warn!(error = %e, "kafka source: resuming failed");
            }
        }
        state.paused = false;
    }

    /// Stops consuming: waits up to `drain` for what is in flight, commits
    /// every acknowledged position of the partitions still assigned, and
    /// closes the consumer (leaving the group) off the runtime.
    async fn finish(self, mut state: LoopState, drain: Duration) {
        let deadline = tokio::time::sleep(drain);
        tokio::pin!(deadline);
        while !state.pending.is_empty() {
            tokio::select! {
                _ = &mut deadline => break,
                Some((ticket, _, result)) = state.pending.next() => {
                    self.metrics.in_flight.dec();
                    if result.is_ok() {
                        self.metrics.acknowledged.inc();
                        state.tracker.done(&ticket);
                    }
                }
            }
        }
        let unsettled = state.pending.len();
        self.store(&mut state.tracker);
        let consumer = self.consumer.clone();
        drop(self);
        let committed = tokio::task::spawn_blocking(move || {
            let r = consumer.commit_consumer_state(CommitMode::Sync);
            drop(consumer);
            r
        })
        .await;
        match committed {
            // Nothing was acknowledged since the last commit.
            Ok(Ok(())) | Ok(Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset))) => {}
            Ok(Err(e)) => warn!(error = %e, "kafka source: final commit failed"),
            Err(e) => warn!(error = %e, "kafka source: final commit task failed"),
        }
        info!(
            unsettled,
            "kafka source stopped (unsettled records are consumed again)"
        );
    }
}

struct LoopState {
    hub: Hub,
    tracker: OffsetTracker,
    pending: FuturesUnordered<Pending>,
    paused: bool,
}
