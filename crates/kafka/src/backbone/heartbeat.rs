//! Node heartbeats: every [`HEARTBEAT_INTERVAL`] each node writes one small
//! record about itself to the nodes topic (`<backbone topic>-nodes`, one
//! partition), keyed by its name. `tidegate cluster status` reads the last
//! minute of that topic to list the nodes alive and what each reports.
//!
//! A separate topic, not the backbone: reading "the last minute of
//! heartbeats" must not mean reading the last minute of all traffic. The
//! record itself ([`Heartbeat`]) is pure and lives in the hub, where it is
//! fuzzed.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::producer::{FutureProducer, FutureRecord};
pub use tidegate_hub::backbone::heartbeat::Heartbeat;
use tracing::debug;

use super::config::ClusterConfig;
use super::metrics::ClusterMetrics;

/// How often a node reports itself.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// The nodes topic of a backbone topic.
pub fn nodes_topic(backbone_topic: &str) -> String {
    format!("{backbone_topic}-nodes")
}

/// Writes this node's heartbeat until `shutdown`.
pub struct HeartbeatWriter {
    producer: FutureProducer,
    topic: String,
    node: String,
    version: String,
    metrics: ClusterMetrics,
    produced: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for HeartbeatWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatWriter")
            .field("topic", &self.topic)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl HeartbeatWriter {
    /// A writer for node `node` reporting `metrics` and `produced`, the
    /// messages this node handed to the backbone.
    pub fn new(
        config: &ClusterConfig,
        node: &str,
        version: &str,
        metrics: ClusterMetrics,
        produced: prometheus_client::metrics::counter::Counter,
    ) -> Result<Self, rdkafka::error::KafkaError> {
        let producer = config
            .client_config()
            .set(
                "message.timeout.ms",
                HEARTBEAT_INTERVAL.as_millis().to_string(),
            )
            .create()?;
        Ok(HeartbeatWriter {
            producer,
            topic: nodes_topic(&config.topic),
            node: node.to_owned(),
            version: version.to_owned(),
            metrics,
            produced,
        })
    }

    /// Writes a heartbeat now and every [`HEARTBEAT_INTERVAL`] until
    /// `shutdown`. A heartbeat the broker does not take is dropped (the
    /// next one says the same). `shutdown` also ends the wait for the
    /// broker's answer (up to [`HEARTBEAT_INTERVAL`] with the broker
    /// unreachable), and the producer's close is waited for at most
    /// [`super::CLOSE_TIMEOUT`].
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        self.beat_until(shutdown).await;
        super::close_within("heartbeat producer", self.producer, super::CLOSE_TIMEOUT).await;
    }

    async fn beat_until(&self, mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>) {
        let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            let beat = Heartbeat {
                node: self.node.clone(),
                ts_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
                lag: self.metrics.lag.get(),
                partitions: self.metrics.partitions.get(),
                received: self.metrics.received.get(),
                produced: self.produced.get(),
                version: self.version.clone(),
            };
            let value = beat.encode();
            let record = FutureRecord::to(&self.topic)
                .key(self.node.as_bytes())
                .payload(&value);
            tokio::select! {
                biased;
                _ = &mut shutdown => return,
                sent = self.producer.send(record, HEARTBEAT_INTERVAL) => {
                    if let Err((e, _)) = sent {
                        debug!(error = %e, "cluster: heartbeat not written");
                    }
                }
            }
        }
    }
}
