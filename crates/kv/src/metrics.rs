//! The KV store's counters, registered with the hub's Prometheus registry
//! (so `/metrics` shows them as `tidegate_kv_…`): what the coordinator did
//! that an operator needs to see — quorums missed, replicas failing, read
//! repairs, hinted handoff's backlog, and what anti-entropy compared and
//! repaired.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;

/// Counters shared by the coordinator, read repair and hinted handoff.
#[derive(Clone, Default)]
pub struct KvMetrics {
    /// Client requests answered 504 (fewer than `ack` replicas in time).
    pub not_enough_replicas: Counter,
    /// Replica reads or writes that failed or timed out.
    pub replica_errors: Counter,
    /// Records written back to a stale replica after a read.
    pub read_repairs: Counter,
    /// Hints stored for a replica that did not take a write.
    pub hints_stored: Counter,
    /// Hints delivered to their replica.
    pub hints_delivered: Counter,
    /// Hints dropped because a replica's bound (keys or bytes) was
    /// reached, or too many of its hints, or bytes of them, were waiting
    /// for the disk ([`crate::hints::MAX_KEEPS_IN_FLIGHT`],
    /// [`crate::hints::MAX_KEEP_BYTES_IN_FLIGHT`]).
    pub hints_dropped: Counter,
    /// Hints dropped because their replica refused them (400, 413), or
    /// never answered them in several rounds while answering the others,
    /// or their record could not be decoded from disk: they could never
    /// be delivered as they are.
    pub hints_refused: Counter,
    /// Keys with a pending hint, all replicas together.
    pub hints_pending: Gauge,
    /// Bytes (key + stored record) of the pending hints, all replicas
    /// together: what the `[kv] max_hint_bytes_per_node` bound counts.
    pub hints_pending_bytes: Gauge,
    /// Anti-entropy exchanges with a peer that completed.
    pub ae_exchanges: Counter,
    /// Anti-entropy exchanges that failed (peer away, bad answer).
    pub ae_failures: Counter,
    /// Key ranges (tree leaves) compared with a peer.
    pub ae_ranges_compared: Counter,
    /// Key ranges found different and streamed.
    pub ae_ranges_differing: Counter,
    /// Keys repaired by anti-entropy: a newer version received and stored
    /// here, or a stale version on the peer overwritten with ours.
    pub ae_keys_repaired: Counter,
}

impl KvMetrics {
    /// Registers every counter with the hub's registry.
    pub fn register(&self, hub: &HubMetrics) {
        hub.register(
            "kv_not_enough_replicas",
            "KV requests answered 504: fewer than ack replicas answered in time",
            self.not_enough_replicas.clone(),
        );
        hub.register(
            "kv_replica_errors",
            "KV replica reads or writes that failed or timed out",
            self.replica_errors.clone(),
        );
        hub.register(
            "kv_read_repairs",
            "KV records written back to a stale replica after a read",
            self.read_repairs.clone(),
        );
        hub.register(
            "kv_hints_stored",
            "KV hints stored for a replica that did not take a write",
            self.hints_stored.clone(),
        );
        hub.register(
            "kv_hints_delivered",
            "KV hints delivered to their replica",
            self.hints_delivered.clone(),
        );
        hub.register(
            "kv_hints_dropped",
            "KV hints dropped because the replica's hint bound (keys or bytes) was reached, or too many (or too many bytes) were waiting for the disk",
            self.hints_dropped.clone(),
        );
        hub.register(
            "kv_hints_refused",
            "KV hints dropped because their replica refused them (400, 413) or never answered them, or they could not be decoded",
            self.hints_refused.clone(),
        );
        hub.register(
            "kv_hints_pending",
            "KV keys with a hint waiting for their replica",
            self.hints_pending.clone(),
        );
        hub.register(
            "kv_hints_pending_bytes",
            "KV bytes (key + record) of the hints waiting for their replica",
            self.hints_pending_bytes.clone(),
        );
        hub.register(
            "kv_ae_exchanges",
            "KV anti-entropy exchanges with a peer that completed",
            self.ae_exchanges.clone(),
        );
        hub.register(
            "kv_ae_failures",
            "KV anti-entropy exchanges that failed",
            self.ae_failures.clone(),
        );
        hub.register(
            "kv_ae_ranges_compared",
            "KV key ranges (hash-tree leaves) compared with a peer by anti-entropy",
            self.ae_ranges_compared.clone(),
        );
        hub.register(
            "kv_ae_ranges_differing",
            "KV key ranges found different and streamed by anti-entropy",
            self.ae_ranges_differing.clone(),
        );
        hub.register(
            "kv_ae_keys_repaired",
            "KV keys repaired by anti-entropy (received newer, or pushed to a stale peer)",
            self.ae_keys_repaired.clone(),
        );
    }
}
