//! The Kafka sink's counters, shared between the sink (which hands messages
//! to librdkafka), the delivery callback (which completes them) and the
//! recovery thread (which replaces a dead producer).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;

/// Counters of one Kafka sink. Clones share the same values.
#[derive(Debug, Clone, Default)]
pub struct KafkaMetrics {
    /// Messages handed to the producer.
    pub produced: Counter,
    /// Messages the broker acknowledged.
    pub delivered: Counter,
    /// Messages that failed (delivery error or refused by the producer).
    pub failed: Counter,
    /// Of `failed`, the messages the producer refused when handed over
    /// (too large, unknown partition…): never in librdkafka's queue, so no
    /// delivery report, and no sign that the producer is alive.
    pub refused: Counter,
    /// Sends that had to wait because the queue was full.
    pub queue_full_waits: Counter,
    /// Messages handed over and not yet acknowledged or failed.
    pub in_flight: Gauge,
    /// Producers recreated after a fatal error or a stall.
    pub producer_recreations: Counter,
    /// Producers replaced because they held records and reported nothing
    /// for `stall_timeout_ms` (each also counts as a recreation).
    pub producer_stalls: Counter,
    /// Messages produced again through a new producer after theirs died.
    pub resent: Counter,
}

impl KafkaMetrics {
    /// Registers every counter as `tidegate_kafka_*`.
    pub fn register(&self, metrics: &HubMetrics) {
        metrics.register(
            "kafka_produced",
            "Messages handed to the Kafka producer",
            self.produced.clone(),
        );
        metrics.register(
            "kafka_delivered",
            "Messages acknowledged by the Kafka broker",
            self.delivered.clone(),
        );
        metrics.register(
            "kafka_failed",
            "Messages the Kafka sink failed",
            self.failed.clone(),
        );
        metrics.register(
            "kafka_refused",
            "Messages the Kafka producer refused when handed over (also counted in kafka_failed)",
            self.refused.clone(),
        );
        metrics.register(
            "kafka_queue_full_waits",
            "Sends that waited because the Kafka producer queue was full",
            self.queue_full_waits.clone(),
        );
        metrics.register(
            "kafka_in_flight",
            "Messages handed to the Kafka producer and not yet acknowledged",
            self.in_flight.clone(),
        );
        metrics.register(
            "kafka_producer_recreations",
            "Kafka producers recreated after a fatal producer error or a stall",
            self.producer_recreations.clone(),
        );
        metrics.register(
            "kafka_producer_stalls",
            "Kafka producers replaced for holding records with no delivery report for stall_timeout_ms",
            self.producer_stalls.clone(),
        );
        metrics.register(
            "kafka_resent",
            "Messages produced again through a new Kafka producer after a fatal error or a stall",
            self.resent.clone(),
        );
    }
}
