//! [`KafkaBackbone`]: the hub's [`Backbone`] — which topics are
//! cluster-wide, and the producer that writes them to the backbone topic.
//!
//! The producer is the Kafka sink's (idempotent, `acks=all`, bounded,
//! replaced after a fatal error) with the backbone's record shape. Nobody
//! waits for its acknowledgement: subscriber delivery is best-effort, and a
//! record the broker never took is counted in
//! `tidegate_cluster_produce_failed`.

use tidegate_hub::backbone::{HistoryFuture, Positions, Replay};
use tidegate_hub::{AckToken, Backbone, Pattern, SharedMessage, Sink, SinkFuture};

use super::config::ClusterConfig;
use super::history;
use crate::KafkaSink;

/// Writes cluster-wide topics to the backbone.
pub struct KafkaBackbone {
    patterns: Vec<Pattern>,
    sink: KafkaSink,
    config: ClusterConfig,
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
    /// A backbone carrying `patterns` through `sink`, its history read
    /// from `config`'s brokers.
    pub fn new(patterns: Vec<Pattern>, sink: KafkaSink, config: ClusterConfig) -> Self {
        KafkaBackbone {
            patterns,
            sink,
            config,
        }
    }

    /// The producer (its counters, its health).
    pub fn sink(&self) -> &KafkaSink {
        &self.sink
    }
}

impl Backbone for KafkaBackbone {
    fn carries(&self, topic: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(topic))
    }

    fn try_send(&self, msg: SharedMessage) -> Result<(), SharedMessage> {
        self.sink
            .try_send(msg, AckToken::detached())
            .map_err(|(msg, _)| msg)
    }

    fn send(&self, msg: SharedMessage) -> SinkFuture<'_> {
        self.sink.send(msg, AckToken::detached())
    }

    fn positions(&self) -> HistoryFuture<'_, Positions> {
        let config = self.config.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || history::positions(&config))
                .await
                .map_err(|e| e.to_string())?
        })
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
