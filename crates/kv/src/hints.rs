//! Hinted handoff: when a replica does not take a write, the coordinator
//! keeps the stamped record on its own disk (the engine's `hints`
//! keyspace, one hint per node and key, the newest wins) and a background
//! task delivers it when the replica answers again, then forgets it.
//!
//! Bounded: at most [`MAX_HINTS_PER_NODE`] keys are kept per node; past
//! that a hint is dropped and counted (the replica then catches up
//! through read repair, anti-entropy or later writes). Hints are kept whatever the write's
//! outcome for the client (201 or 504): the record is newer than what the
//! replica has, so delivering it is always safe under last-write-wins.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::client::ReplicaClient;
use crate::engine::Engine;
use crate::metrics::KvMetrics;
use crate::record::Record;

/// Most keys with a pending hint per replica.
pub const MAX_HINTS_PER_NODE: usize = 100_000;
/// How often pending hints are offered to their replicas.
pub const REPLAY_INTERVAL: Duration = Duration::from_millis(500);
/// Hints read from disk and sent per batch.
const REPLAY_BATCH: usize = 256;

/// Hint bookkeeping of one coordinator.
pub struct Hints {
    engine: Arc<Engine>,
    /// Peer URLs, by ring index (this node's entry is never used).
    nodes: Vec<String>,
    /// Pending hints per node (keys).
    pending: Vec<AtomicUsize>,
    /// Stored, delivered, dropped and pending hints.
    metrics: KvMetrics,
}

impl Hints {
    /// Bookkeeping for `nodes`, counting the hints already on disk.
    pub fn new(engine: Arc<Engine>, nodes: Vec<String>, metrics: KvMetrics) -> Self {
        let pending: Vec<AtomicUsize> = nodes
            .iter()
            .map(|n| AtomicUsize::new(engine.count_hints(n).unwrap_or(0)))
            .collect();
        let total: usize = pending.iter().map(|p| p.load(Ordering::Relaxed)).sum();
        metrics.hints_pending.set(total as i64);
        Hints {
            engine,
            nodes,
            pending,
            metrics,
        }
    }

    /// Keeps `record` for node `node` (blocking: call off the runtime).
    pub fn keep(&self, node: usize, key: &[u8], record: &Record) {
        if self.pending[node].load(Ordering::Relaxed) >= MAX_HINTS_PER_NODE {
            self.metrics.hints_dropped.inc();
            tracing::warn!(node = %self.nodes[node], "kv: hint dropped, the node's hint bound is reached");
            return;
        }
        match self.engine.put_hint(&self.nodes[node], key, record) {
            Ok(new) => {
                if new {
                    self.pending[node].fetch_add(1, Ordering::Relaxed);
                    self.metrics.hints_pending.inc();
                }
                self.metrics.hints_stored.inc();
            }
            Err(e) => tracing::error!(error = %e, "kv: storing a hint failed"),
        }
    }

    /// Offers `node`'s pending hints to it until one fails or none is left.
    async fn replay(&self, node: usize, client: &ReplicaClient, timeout: Duration) {
        while self.pending[node].load(Ordering::Relaxed) > 0 {
            let engine = self.engine.clone();
            let url = self.nodes[node].clone();
            let batch = tokio::task::spawn_blocking(move || engine.hints_for(&url, REPLAY_BATCH))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            if batch.is_empty() {
                let gone = self.pending[node].swap(0, Ordering::Relaxed);
                self.metrics.hints_pending.dec_by(gone as i64);
                return;
            }
            for (key, record) in batch {
                let sent = client.put(&self.nodes[node], &key, &record);
                if !matches!(tokio::time::timeout(timeout, sent).await, Ok(Ok(()))) {
                    return; // still away: try again next round
                }
                self.forget(node, key, record).await;
            }
        }
    }

    async fn forget(&self, node: usize, key: Bytes, record: Record) {
        let engine = self.engine.clone();
        let url = self.nodes[node].clone();
        let removed =
            tokio::task::spawn_blocking(move || engine.remove_hint(&url, &key, &record)).await;
        if let Ok(Ok(true)) = removed {
            self.pending[node].fetch_sub(1, Ordering::Relaxed);
            self.metrics.hints_pending.dec();
            self.metrics.hints_delivered.inc();
        }
    }

    /// Replays every node's hints every [`REPLAY_INTERVAL`], for as long as
    /// the store lives (the task holds only a weak reference).
    pub fn spawn_replay(
        hints: &Arc<Hints>,
        client: ReplicaClient,
        self_index: usize,
        timeout: Duration,
    ) {
        let weak = Arc::downgrade(hints);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REPLAY_INTERVAL).await;
                let Some(hints) = weak.upgrade() else { return };
                for node in 0..hints.nodes.len() {
                    if node != self_index {
                        hints.replay(node, &client, timeout).await;
                    }
                }
            }
        });
    }
}
