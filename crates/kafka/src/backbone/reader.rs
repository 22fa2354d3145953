//! [`BackboneReader`]: every partition of the backbone topic, read by this
//! node and fanned out to its local subscribers.
//!
//! Each node reads all partitions itself (manual assignment, no shared
//! group), from the end as it was when the node started: a node serves
//! live subscribers, and history is for recovery, not for a restart to
//! replay. How far it has fanned each partition out is kept in
//! [`DeliveredPositions`]: where a subscription made now starts. Its position is committed under its own group,
//! `tidegate-node-<node>`, so `tidegate cluster status` can say how far
//! behind each node is. Reading is bounded by librdkafka's prefetch bound
//! (`read_ahead_kbytes`); fan-out never waits (subscriber queues have their
//! own overflow policy).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use tidegate_hub::Hub;
use tracing::{debug, info, warn};

use super::config::ClusterConfig;
use super::decode_kafka_record;
use super::metrics::ClusterMetrics;
use super::writer::DeliveredPositions;
use tidegate_hub::backbone::bundle;

/// How often the reader re-reads the partition ends for its lag gauge and
/// forgets nodes it has not heard from.
pub const LAG_INTERVAL: Duration = Duration::from_secs(2);

/// A node is "seen" while its records arrived within this window.
pub const NODE_SEEN_WINDOW: Duration = Duration::from_secs(60);

/// How long to wait before asking for the backbone topic's partitions
/// again when the broker does not answer.
pub const METADATA_RETRY: Duration = Duration::from_secs(1);

/// What one fetch may take of one backbone partition.
pub const MAX_PARTITION_FETCH_BYTES: usize = 8 * 1024 * 1024;

/// The consumer group a node commits its backbone position under.
pub fn node_group(node: &str) -> String {
    format!("tidegate-node-{node}")
}

/// Reads the backbone into the hub.
pub struct BackboneReader {
    consumer: Arc<StreamConsumer>,
    topic: String,
    node: String,
    metrics: ClusterMetrics,
    delivered: DeliveredPositions,
}

impl std::fmt::Debug for BackboneReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackboneReader")
            .field("topic", &self.topic)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl BackboneReader {
    /// A reader for `config` as node `node` (nothing is assigned until
    /// [`BackboneReader::run`]).
    pub fn new(
        config: &ClusterConfig,
        node: &str,
        metrics: ClusterMetrics,
        delivered: DeliveredPositions,
    ) -> Result<Self, KafkaError> {
        let mut cc = config.client_config();
        // Latency over batching: a record is fetched as soon as it is on
        // the broker. A default only: `[cluster.properties]` may change it.
        crate::config::set_default(&mut cc, "fetch.wait.max.ms", "10".into());
        // A fetch takes up to this much of one partition (librdkafka's
        // default is 1 MiB): with one backbone partition (the default) and
        // 1 KiB records at 50,000/s, 1 MiB per round trip to a busy broker
        // could not keep up — cross-node p50 380 ms, against 8 ms with 8 MiB
        // (BENCHMARKS.md, cluster). Memory stays bounded by
        // `read_ahead_kbytes`.
        crate::config::set_default(
            &mut cc,
            "max.partition.fetch.bytes",
            MAX_PARTITION_FETCH_BYTES.to_string(),
        );
        cc.set("group.id", node_group(node))
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "true")
            .set("enable.partition.eof", "false")
            .set(
                "queued.max.messages.kbytes",
                config.read_ahead_kbytes.to_string(),
            );
        let consumer: StreamConsumer = cc.create()?;
        Ok(BackboneReader {
            consumer: Arc::new(consumer),
            topic: config.topic.clone(),
            node: node.to_owned(),
            metrics,
            delivered,
        })
    }

    /// Assigns every partition from its current end (waiting for the broker
    /// as long as it takes, or until `shutdown`), then fans records out
    /// into `hub` until `shutdown`. Then the consumer closes, committing
    /// its position; with the broker unreachable that is waited for at
    /// most [`super::CLOSE_TIMEOUT`].
    pub async fn run(self, hub: Hub, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        self.read_until(hub, shutdown).await;
        let what = format!("backbone reader ({})", self.node);
        super::close_within(&what, self.consumer, super::CLOSE_TIMEOUT).await;
    }

    async fn read_until(
        &self,
        hub: Hub,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) {
        let partitions = tokio::select! {
            biased;
            _ = &mut shutdown => return,
            p = self.partitions() => p,
        };
        let mut tpl = TopicPartitionList::new();
        for (p, end) in &partitions {
            if let Err(e) = tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*end)) {
                warn!(error = %e, "cluster: bad partition");
            }
            self.delivered
                .advance(*p, bundle::position(*end, 0).unwrap_or(i64::MAX));
        }
        let partitions: Vec<i32> = partitions.into_iter().map(|(p, _)| p).collect();
        if let Err(e) = self.consumer.assign(&tpl) {
            warn!(error = %e, "cluster: assigning the backbone partitions failed");
            return;
        }
        self.metrics.partitions.set(partitions.len() as i64);
        info!(topic = %self.topic, partitions = partitions.len(), node = %self.node,
              "cluster: reading the backbone");

        let mut seen: HashMap<String, Instant> = HashMap::new();
        let mut lag_tick = tokio::time::interval(LAG_INTERVAL);
        lag_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = lag_tick.tick() => {
                    seen.retain(|_, at| at.elapsed() < NODE_SEEN_WINDOW);
                    self.metrics.nodes_seen.set(seen.len() as i64);
                    // Up to a second per partition with the broker away.
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => break,
                        _ = self.update_lag(&partitions) => {}
                    }
                }
                record = self.consumer.recv() => match record {
                    Ok(r) => {
                        let decoded = decode_kafka_record(&r);
                        let (partition, offset) = (r.partition(), r.offset());
                        drop(r);
                        self.metrics.records_received.inc();
                        match decoded {
                            Ok(d) => {
                                let own = d.node.as_deref() == Some(self.node.as_str());
                                if let Some(node) = d.node {
                                    match seen.get_mut(&node) {
                                        Some(at) => *at = Instant::now(),
                                        None => {
                                            seen.insert(node, Instant::now());
                                            self.metrics.nodes_seen.set(seen.len() as i64);
                                        }
                                    }
                                }
                                for m in d.messages {
                                    let delivered = m
                                        .map_err(|e| e.to_string())
                                        .and_then(|m| hub.deliver_from_backbone(m).map_err(|e| e.to_string()));
                                    match delivered {
                                        Ok(()) => {
                                            self.metrics.received.inc();
                                            if own {
                                                self.metrics.received_own.inc();
                                            }
                                        }
                                        Err(e) => {
                                            self.metrics.invalid.inc();
                                            debug!(error = %e, "cluster: backbone message refused");
                                        }
                                    }
                                }
                            }
                            Err(e) => {
                                self.metrics.invalid.inc();
                                debug!(error = %e, "cluster: backbone record not decodable");
                            }
                        }
                        // After the fan-out: a subscription that reads this
                        // position was in place for everything after it.
                        if let Some(next) = bundle::position(offset + 1, 0) {
                            self.delivered.advance(partition, next);
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "cluster: backbone reader error");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }

    /// The backbone topic's partitions with their ends (the record offset
    /// reading starts at), asked until the broker answers.
    async fn partitions(&self) -> Vec<(i32, i64)> {
        loop {
            let (consumer, topic) = (self.consumer.clone(), self.topic.clone());
            // Off the runtime: a fetch left behind by a shutdown must not
            // hold the process's exit for its timeouts.
            let found = super::off_runtime("backbone-metadata", move || {
                let timeout = Duration::from_secs(5);
                let md = consumer.fetch_metadata(Some(&topic), timeout)?;
                md.topics()
                    .iter()
                    .filter(|t| t.name() == topic && t.error().is_none())
                    .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                    .map(|p| {
                        let (_, hi) = consumer.fetch_watermarks(&topic, p, timeout)?;
                        Ok::<_, KafkaError>((p, hi))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .await;
            match found {
                Some(Ok(p)) if !p.is_empty() => return p,
                Some(Ok(_)) => {
                    warn!(topic = %self.topic, "cluster: the backbone topic has no partitions yet")
                }
                Some(Err(e)) => warn!(error = %e, "cluster: no backbone metadata yet"),
                None => warn!("cluster: the metadata request failed"),
            }
            tokio::time::sleep(METADATA_RETRY).await;
        }
    }

    /// Sets the lag gauge: partition ends minus this node's positions.
    async fn update_lag(&self, partitions: &[i32]) {
        let (consumer, topic, parts) = (
            self.consumer.clone(),
            self.topic.clone(),
            partitions.to_vec(),
        );
        let lag = super::off_runtime("backbone-lag", move || {
            let positions = consumer.position().ok()?;
            let mut lag = 0i64;
            for p in parts {
                let (_, hi) = consumer
                    .fetch_watermarks(&topic, p, Duration::from_secs(1))
                    .ok()?;
                if let Some(Offset::Offset(at)) =
                    positions.find_partition(&topic, p).map(|e| e.offset())
                {
                    lag += (hi - at).max(0);
                }
            }
            Some(lag)
        })
        .await;
        if let Some(Some(lag)) = lag {
            self.metrics.lag.set(lag);
        }
    }
}
