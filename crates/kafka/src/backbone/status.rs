//! `tidegate cluster status`: what the brokers say about the cluster — the
//! backbone's partitions, the nodes that wrote a heartbeat in the last
//! [`SEEN_WINDOW`], what each reports, and how far each is behind by the
//! position it committed. Reads only; joins no group.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use super::config::ClusterConfig;
use super::heartbeat::{nodes_topic, Heartbeat};
use super::reader::node_group;

/// A node is listed when its last heartbeat is at most this old.
pub const SEEN_WINDOW: Duration = Duration::from_secs(60);

/// One partition of the backbone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    /// Its id.
    pub partition: i32,
    /// Oldest offset still kept.
    pub low: i64,
    /// The next offset to be written.
    pub high: i64,
}

/// One node seen recently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// Its last heartbeat.
    pub heartbeat: Heartbeat,
    /// How long ago it was written, ms.
    pub seen_ms_ago: u64,
    /// Records behind the end, by the position the node committed (None
    /// when it committed none yet).
    pub committed_lag: Option<i64>,
}

/// The cluster as the brokers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// The backbone topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<PartitionStatus>,
    /// Nodes with a heartbeat in the last [`SEEN_WINDOW`], by name.
    pub nodes: Vec<NodeStatus>,
}

impl fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records: i64 = self.partitions.iter().map(|p| p.high - p.low).sum();
        writeln!(
            f,
            "backbone {}: {} partition(s), {} record(s) kept",
            self.topic,
            self.partitions.len(),
            records
        )?;
        for p in &self.partitions {
            writeln!(
                f,
                "  partition {:>3}: offsets {}..{}",
                p.partition, p.low, p.high
            )?;
        }
        writeln!(
            f,
            "{} node(s) seen in the last {} s:",
            self.nodes.len(),
            SEEN_WINDOW.as_secs()
        )?;
        writeln!(
            f,
            "  {:<24} {:>10} {:>10} {:>14} {:>11} {:>12} {:>12}",
            "node", "seen", "lag", "committed lag", "partitions", "received", "produced"
        )?;
        for n in &self.nodes {
            let committed = n
                .committed_lag
                .map_or_else(|| "-".to_owned(), |l| l.to_string());
            writeln!(
                f,
                "  {:<24} {:>8.1}s {:>10} {:>14} {:>11} {:>12} {:>12}",
                n.heartbeat.node,
                n.seen_ms_ago as f64 / 1000.0,
                n.heartbeat.lag,
                committed,
                n.heartbeat.partitions,
                n.heartbeat.received,
                n.heartbeat.produced
            )?;
        }
        Ok(())
    }
}

/// Asks the brokers of `config` (blocking; each request waits at most
/// `timeout`).
pub fn status(config: &ClusterConfig, timeout: Duration) -> Result<ClusterStatus, KafkaError> {
    let consumer = consumer(config, "tidegate-cluster-status")?;
    let md = consumer.fetch_metadata(Some(&config.topic), timeout)?;
    let ids: Vec<i32> = md
        .topics()
        .iter()
        .filter(|t| t.name() == config.topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut partitions = Vec::with_capacity(ids.len());
    for p in ids {
        let (low, high) = consumer.fetch_watermarks(&config.topic, p, timeout)?;
        partitions.push(PartitionStatus {
            partition: p,
            low,
            high,
        });
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let beats = recent_heartbeats(&consumer, &nodes_topic(&config.topic), now_ms, timeout)?;
    let mut nodes = Vec::with_capacity(beats.len());
    for heartbeat in beats.into_values() {
        let committed_lag = committed_lag(config, &heartbeat.node, &partitions, timeout)?;
        nodes.push(NodeStatus {
            seen_ms_ago: now_ms.saturating_sub(heartbeat.ts_ms),
            heartbeat,
            committed_lag,
        });
    }
    Ok(ClusterStatus {
        topic: config.topic.clone(),
        partitions,
        nodes,
    })
}

fn consumer(config: &ClusterConfig, group: &str) -> Result<BaseConsumer, KafkaError> {
    config
        .client_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
}

/// The newest heartbeat of each node written in the last [`SEEN_WINDOW`].
fn recent_heartbeats(
    consumer: &BaseConsumer,
    topic: &str,
    now_ms: u64,
    timeout: Duration,
) -> Result<BTreeMap<String, Heartbeat>, KafkaError> {
    let mut beats = BTreeMap::new();
    let (_, high) = match consumer.fetch_watermarks(topic, 0, timeout) {
        Ok(w) => w,
        // No nodes topic yet: no node ever wrote a heartbeat.
        Err(_) => return Ok(beats),
    };
    let since = now_ms.saturating_sub(SEEN_WINDOW.as_millis() as u64) as i64;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(since))?;
    let start = consumer.offsets_for_times(tpl, timeout)?;
    let from = match start.find_partition(topic, 0).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => o,
        _ => return Ok(beats),
    };
    if from >= high {
        return Ok(beats);
    }
    let mut assign = TopicPartitionList::new();
    assign.add_partition_offset(topic, 0, Offset::Offset(from))?;
    consumer.assign(&assign)?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let done = m.offset() + 1 >= high;
                if let Some(beat) = m.payload().and_then(Heartbeat::parse) {
                    if beat.ts_ms as i64 >= since {
                        beats.insert(beat.node.clone(), beat);
                    }
                }
                if done {
                    break;
                }
            }
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(beats)
}

/// Sum over partitions of (end − the node's committed position).
fn committed_lag(
    config: &ClusterConfig,
    node: &str,
    partitions: &[PartitionStatus],
    timeout: Duration,
) -> Result<Option<i64>, KafkaError> {
    let c = consumer(config, &node_group(node))?;
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(&config.topic, p.partition);
    }
    let committed = c.committed_offsets(tpl, timeout)?;
    let mut lag = 0;
    let mut any = false;
    for p in partitions {
        if let Some(Offset::Offset(at)) = committed
            .find_partition(&config.topic, p.partition)
            .map(|e| e.offset())
        {
            any = true;
            lag += (p.high - at).max(0);
        }
    }
    Ok(any.then_some(lag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_partitions_and_nodes_with_their_lag() {
        let s = ClusterStatus {
            topic: "tidegate-backbone".into(),
            partitions: vec![
                PartitionStatus {
                    partition: 0,
                    low: 0,
                    high: 10,
                },
                PartitionStatus {
                    partition: 1,
                    low: 5,
                    high: 7,
                },
            ],
            nodes: vec![NodeStatus {
                heartbeat: Heartbeat {
                    node: "web-1".into(),
                    ts_ms: 1,
                    lag: 3,
                    partitions: 2,
                    received: 12,
                    produced: 6,
                    version: "0.1.0".into(),
                },
                seen_ms_ago: 1500,
                committed_lag: None,
            }],
        };
        let text = s.to_string();
        assert!(
            text.starts_with("backbone tidegate-backbone: 2 partition(s), 12 record(s) kept"),
            "{text}"
        );
        assert!(text.contains("partition   1: offsets 5..7"), "{text}");
        let row = text.lines().find(|l| l.contains("web-1")).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols, ["web-1", "1.5s", "3", "-", "2", "12", "6"], "{text}");
    }
}
