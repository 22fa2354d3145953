//! The Forward listener's own counters (`tidegate_forward_*`), beside the
//! per-listener connection and error counters the hub keeps.

use prometheus_client::metrics::counter::Counter;
use tidegate_hub::HubMetrics;

/// Counters of events and chunks.
#[derive(Debug, Clone, Default)]
pub struct ForwardCounters {
    /// Events published into the hub.
    pub events: Counter,
    /// Events skipped as invalid (record not a map, bad time, bad tag).
    pub invalid_events: Counter,
    /// Chunks acknowledged to clients.
    pub chunks_acked: Counter,
    /// Chunks whose sinks failed or timed out (never acknowledged).
    pub chunks_failed: Counter,
}

impl ForwardCounters {
    /// New counters registered in the hub's registry.
    pub fn register(metrics: &HubMetrics) -> Self {
        let c = ForwardCounters::default();
        metrics.register(
            "forward_events",
            "Forward events published into the hub",
            c.events.clone(),
        );
        metrics.register(
            "forward_invalid_events",
            "Forward events skipped as invalid",
            c.invalid_events.clone(),
        );
        metrics.register(
            "forward_chunks_acked",
            "Forward chunks acknowledged",
            c.chunks_acked.clone(),
        );
        metrics.register(
            "forward_chunks_failed",
            "Forward chunks not acknowledged because delivery failed or timed out",
            c.chunks_failed.clone(),
        );
        c
    }
}
