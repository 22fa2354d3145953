//! The S2S sink's counters (`tidegate_s2s_sink_*`), shared by the sink
//! (which queues messages) and its workers (which confirm or fail them).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;

/// Label of a failed transaction: why.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    /// `ClientError::kind()` (`connection_refused`, `destination_full`, …).
    pub kind: String,
}

/// Counters of one S2S sink. Clones share the same values.
#[derive(Debug, Clone, Default)]
pub struct SinkMetrics {
    /// Messages taken and not yet confirmed by NiFi or failed.
    pub queued: Gauge,
    /// FlowFiles NiFi confirmed (TRANSACTION_FINISHED).
    pub delivered: Counter,
    /// Content bytes NiFi confirmed.
    pub delivered_bytes: Counter,
    /// Transactions NiFi confirmed.
    pub transactions: Counter,
    /// Messages failed (the sink stopped with them unconfirmed).
    pub failed: Counter,
    /// Transactions that failed and were retried, by cause.
    pub errors: Family<ErrorLabel, Counter>,
    /// Waits because NiFi said the port's destination is full.
    pub destination_full: Counter,
    /// Sends that waited because `queue_max_messages` were queued.
    pub queue_full_waits: Counter,
    /// Peer list fetches that succeeded.
    pub peer_refreshes: Counter,
}

impl SinkMetrics {
    /// Counts a failed transaction of `kind`.
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabel { kind: kind.into() })
            .inc();
    }

    /// Failed transactions of `kind` so far.
    pub fn error_count(&self, kind: &str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabel { kind: kind.into() })
            .get()
    }

    /// Registers every counter as `tidegate_s2s_sink_*`.
    pub fn register(&self, metrics: &HubMetrics) {
        metrics.register(
            "s2s_sink_queued",
            "Messages taken by the S2S sink and not yet confirmed by NiFi",
            self.queued.clone(),
        );
        metrics.register(
            "s2s_sink_delivered",
            "FlowFiles NiFi confirmed to the S2S sink",
            self.delivered.clone(),
        );
        metrics.register(
            "s2s_sink_delivered_bytes",
            "Content bytes NiFi confirmed to the S2S sink",
            self.delivered_bytes.clone(),
        );
        metrics.register(
            "s2s_sink_transactions",
            "S2S sink transactions NiFi confirmed",
            self.transactions.clone(),
        );
        metrics.register(
            "s2s_sink_failed",
            "Messages the S2S sink failed",
            self.failed.clone(),
        );
        metrics.register(
            "s2s_sink_errors",
            "S2S sink transactions that failed and were retried, by cause",
            self.errors.clone(),
        );
        metrics.register(
            "s2s_sink_destination_full",
            "Waits because NiFi said the input port's destination is full",
            self.destination_full.clone(),
        );
        metrics.register(
            "s2s_sink_queue_full_waits",
            "Sends that waited because the S2S sink's queue was full",
            self.queue_full_waits.clone(),
        );
        metrics.register(
            "s2s_sink_peer_refreshes",
            "Peer lists the S2S sink fetched",
            self.peer_refreshes.clone(),
        );
    }
}
