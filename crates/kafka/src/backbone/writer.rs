//! [`KafkaBackbone`]: the hub's [`Backbone`] — which topics are
//! cluster-wide, and where their messages go: the [`Bundler`]'s pending
//! list, from which the writer task ([`super::bundler::BundleWriter`])
//! hands bundles to the producer.
//!
//! The producer is the Kafka sink's (idempotent, `acks=all`, bounded,
//! replaced after a fatal error) with the backbone's record shape. Nobody
//! waits for its acknowledgement: subscriber delivery is best-effort, and a
//! record the broker never took is counted in
//! `tidegate_cluster_produce_failed`.

use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::backbone::{HistoryFuture, Positions, Replay};
use tidegate_hub::{Backbone, Pattern, SharedMessage, Sink, SinkFuture};

use super::bundler::Bundler;
use super::config::ClusterConfig;
use super::history;
use crate::KafkaSink;
use tracing::warn;

/// Writes cluster-wide topics to the backbone.
pub struct KafkaBackbone {
    patterns: Vec<Pattern>,
    bundler: Arc<Bundler>,
    sink: Arc<KafkaSink>,
    config: ClusterConfig,
    delivered: DeliveredPositions,
}

/// How far this node's reader has fanned each backbone partition out (the
/// next position), shared by the reader, which moves it after each record,
/// and the backbone, which answers [`Backbone::delivered`] from it.
#[derive(Debug, Clone, Default)]
pub struct DeliveredPositions(Arc<std::sync::Mutex<Positions>>);

impl DeliveredPositions {
    /// Sets partition `p`'s next position (never backwards).
    pub fn advance(&self, p: i32, next: i64) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = m.entry(p).or_insert(next);
        *at = (*at).max(next);
    }

    /// Every partition's next position.
    pub fn get(&self) -> Positions {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl std::fmt::Debug for KafkaBackbone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaBackbone")
            .field("patterns", &self.patterns)
            .field("sink", &self.sink)
            .finish()
    }
}

impl KafkaBackbone {
    /// A backbone carrying `patterns` through `bundler` to `sink`, its
    /// history read from `config`'s brokers.
    pub fn new(
        patterns: Vec<Pattern>,
        bundler: Arc<Bundler>,
        sink: Arc<KafkaSink>,
        config: ClusterConfig,
        delivered: DeliveredPositions,
    ) -> Self {
        KafkaBackbone {
            patterns,
            bundler,
            sink,
            config,
            delivered,
        }
    }

    /// The producer (its counters, its health).
    pub fn sink(&self) -> &KafkaSink {
        &self.sink
    }

    /// Asks the writer task to hand over what is still pending and stop,
    /// and waits, up to `timeout` for each, for it to finish and for the
    /// broker to take everything (shutdown, once no source publishes any
    /// more: what was published last still reaches the other nodes).
    pub async fn flush(&self, timeout: Duration) {
        self.bundler.close();
        if tokio::time::timeout(timeout, self.bundler.finished())
            .await
            .is_err()
        {
            warn!(
                pending = self.bundler.pending(),
                "cluster: the backbone writer did not hand everything over in time"
            );
        }
        self.sink.flush(timeout).await;
    }
}

impl Backbone for KafkaBackbone {
    fn carries(&self, topic: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(topic))
    }

    fn try_send(&self, msg: SharedMessage) -> Result<(), SharedMessage> {
        self.bundler.try_push(msg)
    }

    fn send(&self, msg: SharedMessage) -> SinkFuture<'_> {
        Box::pin(self.bundler.push(msg))
    }

    fn positions(&self) -> HistoryFuture<'_, Positions> {
        let config = self.config.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || history::positions(&config))
                .await
                .map_err(|e| e.to_string())?
        })
    }

    fn delivered(&self) -> Positions {
        self.delivered.get()
    }

    fn replay(
        &self,
        from: Positions,
        patterns: Vec<Pattern>,
        max: usize,
    ) -> HistoryFuture<'_, Replay> {
        let config = self.config.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || history::replay(&config, &from, &patterns, max))
                .await
                .map_err(|e| e.to_string())?
        })
    }
}
