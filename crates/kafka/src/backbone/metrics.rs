//! Cluster counters (`tidegate_cluster_*`): what this node wrote to the
//! backbone and read back, and from which nodes.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;

use crate::KafkaMetrics;

/// Counters of the backbone reader. Clones share the same values.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetrics {
    /// Messages of cluster-wide topics this node handed to the backbone
    /// (bundled).
    pub produced: Counter,
    /// Backbone records read (every node's, this one's included).
    pub records_received: Counter,
    /// Messages in them fanned out to local subscribers.
    pub received: Counter,
    /// Of those, the ones this node published.
    pub received_own: Counter,
    /// Records, or messages of a record, that could not be delivered
    /// (undecodable, or refused by the hub).
    pub invalid: Counter,
    /// Partitions of the backbone topic this node reads.
    pub partitions: Gauge,
    /// Nodes whose records were read in the last minute.
    pub nodes_seen: Gauge,
    /// Records behind the end of the backbone, all partitions.
    pub lag: Gauge,
}

impl ClusterMetrics {
    /// Registers the reader's counters and the backbone producer's
    /// (`producer`) as `tidegate_cluster_*`.
    pub fn register(&self, m: &HubMetrics, producer: &KafkaMetrics) {
        m.register(
            "cluster_produced",
            "Messages of cluster-wide topics handed to the backbone (in bundles)",
            self.produced.clone(),
        );
        m.register(
            "cluster_records_produced",
            "Backbone records (bundles) handed to the producer",
            producer.produced.clone(),
        );
        m.register(
            "cluster_produce_acked",
            "Backbone records the broker acknowledged",
            producer.delivered.clone(),
        );
        m.register(
            "cluster_produce_failed",
            "Backbone records (bundles, each of up to 1,024 messages) the broker never took: lost to subscribers",
            producer.failed.clone(),
        );
        m.register(
            "cluster_produce_refused",
            "Of those, backbone records the producer refused when handed over (too large…)",
            producer.refused.clone(),
        );
        m.register(
            "cluster_produce_in_flight",
            "Backbone records handed to the producer and not yet acknowledged",
            producer.in_flight.clone(),
        );
        m.register(
            "cluster_records_received",
            "Backbone records (bundles) read",
            self.records_received.clone(),
        );
        m.register(
            "cluster_received",
            "Messages read from the backbone and fanned out to local subscribers",
            self.received.clone(),
        );
        m.register(
            "cluster_received_own",
            "Messages read back from the backbone that this node published",
            self.received_own.clone(),
        );
        m.register(
            "cluster_invalid",
            "Backbone records, or messages in them, that could not be delivered",
            self.invalid.clone(),
        );
        m.register(
            "cluster_partitions",
            "Partitions of the backbone topic this node reads",
            self.partitions.clone(),
        );
        m.register(
            "cluster_nodes_seen",
            "Nodes whose backbone records were read in the last minute",
            self.nodes_seen.clone(),
        );
        m.register(
            "cluster_lag",
            "Backbone records not yet read by this node, all partitions",
            self.lag.clone(),
        );
    }
}
