//! Node heartbeats: every [`HEARTBEAT_INTERVAL`] each node writes one small
//! record about itself to the nodes topic (`<backbone topic>-nodes`, one
//! partition), keyed by its name. `tidegate cluster status` reads the last
//! minute of that topic to list the nodes alive and what each reports.
//!
//! A separate topic, not the backbone: reading "the last minute of
//! heartbeats" must not mean reading the last minute of all traffic.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use tracing::debug;

use super::config::ClusterConfig;
use super::metrics::ClusterMetrics;

/// How often a node reports itself.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// Largest heartbeat record `tidegate cluster status` reads (a record
/// larger than this on the nodes topic is skipped).
pub const MAX_HEARTBEAT_BYTES: usize = 4096;

/// The nodes topic of a backbone topic.
pub fn nodes_topic(backbone_topic: &str) -> String {
    format!("{backbone_topic}-nodes")
}

/// What a node says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The node's name.
    pub node: String,
    /// When it was written, ms since the Unix epoch.
    pub ts_ms: u64,
    /// Backbone records the node has not read yet, all partitions.
    pub lag: i64,
    /// Backbone partitions the node reads.
    pub partitions: i64,
    /// Messages read from the backbone and fanned out since the node
    /// started.
    pub received: u64,
    /// Messages of cluster-wide topics this node produced since it started.
    pub produced: u64,
    /// The node's Tidegate version.
    pub version: String,
}

impl Heartbeat {
    /// Parses a heartbeat record's value; `None` for anything else.
    pub fn parse(value: &[u8]) -> Option<Heartbeat> {
        if value.len() > MAX_HEARTBEAT_BYTES {
            return None;
        }
        serde_json::from_slice(value).ok()
    }
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
            let value = serde_json::to_vec(&beat).expect("a heartbeat serialises");
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// What the writer puts on the nodes topic reads back as written.
        #[test]
        fn heartbeats_round_trip(
            node in "\\PC{0,64}",
            ts_ms in any::<u64>(),
            lag in any::<i64>(),
            partitions in any::<i64>(),
            received in any::<u64>(),
            produced in any::<u64>(),
            version in "\\PC{0,32}",
        ) {
            let beat = Heartbeat { node, ts_ms, lag, partitions, received, produced, version };
            let value = serde_json::to_vec(&beat).unwrap();
            prop_assert_eq!(Heartbeat::parse(&value), Some(beat));
        }

        /// Whatever else is on the topic is skipped, never a panic.
        #[test]
        fn any_bytes_parse_or_are_skipped(value in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Heartbeat::parse(&value);
        }
    }

    #[test]
    fn an_oversized_record_is_skipped_unread() {
        let beat = Heartbeat {
            node: "n".repeat(MAX_HEARTBEAT_BYTES),
            ts_ms: 1,
            lag: 0,
            partitions: 1,
            received: 0,
            produced: 0,
            version: "0".into(),
        };
        let value = serde_json::to_vec(&beat).unwrap();
        assert!(value.len() > MAX_HEARTBEAT_BYTES);
        assert_eq!(Heartbeat::parse(&value), None);
        assert_eq!(Heartbeat::parse(b"{}"), None);
    }
}
