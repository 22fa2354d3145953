//! The Kafka source's counters (`tidegate_kafka_source_*`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;

/// Counters of one Kafka source. Clones share the same values.
#[derive(Debug, Clone, Default)]
pub struct SourceMetrics {
    /// Records received from Kafka.
    pub consumed: Counter,
    /// Records the hub (and every routed sink) accepted.
    pub acknowledged: Counter,
    /// Records published again after a routed sink failed them.
    pub retried: Counter,
    /// Records the hub refused for good (a Kafka topic that makes no valid
    /// hub topic); skipped and committed past.
    pub invalid: Counter,
    /// Headers dropped over the per-record bound.
    pub dropped_headers: Counter,
    /// Records published and not yet acknowledged.
    pub in_flight: Gauge,
    /// Times the consumer paused because `max_in_flight` was reached.
    pub pauses: Counter,
    /// Offset positions handed to librdkafka for the next commit.
    pub offsets_stored: Counter,
    /// Partition assignments and revocations.
    pub rebalances: Counter,
}

impl SourceMetrics {
    /// Registers every counter as `tidegate_kafka_source_*`.
    pub fn register(&self, m: &HubMetrics) {
        m.register(
            "kafka_source_consumed",
            "Records received from Kafka",
            self.consumed.clone(),
        );
        m.register(
            "kafka_source_acknowledged",
            "Kafka records accepted by the hub and every routed sink",
            self.acknowledged.clone(),
        );
        m.register(
            "kafka_source_retried",
            "Kafka records published again after a routed sink failed them",
            self.retried.clone(),
        );
        m.register(
            "kafka_source_invalid",
            "Kafka records skipped because their topic makes no valid hub topic",
            self.invalid.clone(),
        );
        m.register(
            "kafka_source_dropped_headers",
            "Kafka record headers dropped over the per-record bound",
            self.dropped_headers.clone(),
        );
        m.register(
            "kafka_source_in_flight",
            "Kafka records published and not yet acknowledged",
            self.in_flight.clone(),
        );
        m.register(
            "kafka_source_pauses",
            "Times the Kafka source paused at max_in_flight",
            self.pauses.clone(),
        );
        m.register(
            "kafka_source_offsets_stored",
            "Kafka source offset positions stored for commit",
            self.offsets_stored.clone(),
        );
        m.register(
            "kafka_source_rebalances",
            "Kafka source partition assignments and revocations",
            self.rebalances.clone(),
        );
    }
}
