//! Cluster mode, `[cluster] backbone = "kafka"`: Tidegate nodes share
//! hub topics through one Kafka topic.
//!
//! A publish on a cluster-wide topic, on any node and from any source, is
//! produced to the backbone topic keyed by its hub topic (so one hub topic
//! keeps one partition and one order); every node reads every partition
//! and fans each record out to its own subscribers — the publishing node
//! too, from the record, so it delivers its own messages once and in the
//! same order as everyone else. Routes to sinks stay where the message was
//! published. `$sys.` topics are always local.
//!
//! - [`config`]: the `[cluster]` section.
//! - [`codec`]: backbone record ↔ hub messages.
//! - [`writer`]: [`KafkaBackbone`], the hub's [`tidegate_hub::Backbone`].
//! - [`bundler`]: messages gathered into bundles, several per record, and
//!   the writer task that hands them to the producer.
//! - [`reader`]: [`BackboneReader`], the backbone back into the hub.
//! - [`history`]: the backbone read back from a client's positions
//!   (recovery on any node).
//! - [`heartbeat`]: each node's record about itself on the nodes topic.
//! - [`status`](mod@status): `tidegate cluster status`, read from the brokers.
//! - [`metrics`]: the `tidegate_cluster_*` counters.
//!
//! Not for: consuming application topics into the hub (that is
//! [`crate::source`], with a shared consumer group).

pub mod bundler;
pub mod codec;
pub mod config;
pub mod heartbeat;
pub mod history;
pub mod metrics;
pub mod reader;
pub mod status;
pub mod writer;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use thiserror::Error;
use tidegate_hub::Hub;
use tracing::{info, warn};

pub use bundler::BundleWriter;
pub use config::{BackboneKind, ClusterConfig, ClusterConfigError};
pub use heartbeat::{Heartbeat, HeartbeatWriter};
pub use metrics::ClusterMetrics;
pub use reader::BackboneReader;
pub use status::{status, ClusterStatus};
pub use writer::{DeliveredPositions, KafkaBackbone};

/// Decodes a record read from the backbone topic (the live reader and the
/// replay read the same records). Kept here, not in [`codec`], so that the
/// codec stays free of rdkafka.
pub(crate) fn decode_kafka_record(
    r: &impl rdkafka::message::Message,
) -> Result<codec::Decoded, codec::DecodeError> {
    use rdkafka::message::Headers;
    codec::decode(codec::RecordParts {
        key: r.key(),
        value: r.payload(),
        timestamp_ms: r.timestamp().to_millis(),
        headers: r
            .headers()
            .into_iter()
            .flat_map(|h| h.iter().map(|x| (x.key, x.value))),
        partition: r.partition(),
        offset: r.offset(),
    })
}

use crate::record::RecordShape;
use crate::{KafkaSink, KafkaSinkError};
use bundler::Bundler;

/// How long start-up waits for the broker to create the backbone topic.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why cluster mode could not start.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// The `[cluster]` section is unusable.
    #[error(transparent)]
    Config(#[from] ClusterConfigError),
    /// The backbone producer could not be created.
    #[error("[cluster] {0}")]
    Producer(#[from] KafkaSinkError),
    /// The backbone reader could not be created.
    #[error("[cluster] backbone reader: {0}")]
    Reader(#[from] KafkaError),
}

/// A node's two halves of the backbone.
#[derive(Debug)]
pub struct ClusterNode {
    /// What the hub writes cluster-wide topics to.
    pub backbone: Arc<KafkaBackbone>,
    /// What reads them back; run it with [`BackboneReader::run`].
    pub reader: BackboneReader,
    /// Writes this node's heartbeat; run it with [`HeartbeatWriter::run`].
    pub heartbeat: HeartbeatWriter,
    /// Hands bundles to the producer; run it with [`BundleWriter::run`] on
    /// a task of its own, stopped by [`KafkaBackbone::flush`].
    pub writer: BundleWriter,
    /// The reader's counters (the producer's are on `backbone.sink()`).
    pub metrics: ClusterMetrics,
}

impl ClusterNode {
    /// Creates both halves for node `node` and installs the backbone in
    /// `hub`, registering `tidegate_cluster_*`. Nothing connects yet.
    pub fn new(config: &ClusterConfig, node: &str, hub: &Hub) -> Result<Self, ClusterError> {
        config.check()?;
        let patterns = config.patterns()?;
        let producer = config.producer_config();
        let shape = RecordShape::backbone(&producer, node);
        let sink = Arc::new(KafkaSink::with_shape(producer, shape)?);
        let metrics = ClusterMetrics::default();
        metrics.register(hub.metrics(), sink.metrics());
        let produced = metrics.produced.clone();
        let bundler = Arc::new(Bundler::new(config.pending_max_messages()));
        let delivered = DeliveredPositions::default();
        let backbone = Arc::new(KafkaBackbone::new(
            patterns,
            bundler.clone(),
            sink.clone(),
            config.clone(),
            delivered.clone(),
        ));
        let writer = BundleWriter {
            bundler,
            sink,
            config: config.clone(),
            metrics: metrics.clone(),
        };
        let reader = BackboneReader::new(config, node, metrics.clone(), delivered)?;
        let heartbeat = HeartbeatWriter::new(
            config,
            node,
            env!("CARGO_PKG_VERSION"),
            metrics.clone(),
            produced,
        )?;
        if hub.set_backbone(backbone.clone()).is_err() {
            warn!("cluster: the hub already had a backbone; keeping it");
        }
        Ok(ClusterNode {
            backbone,
            reader,
            heartbeat,
            writer,
            metrics,
        })
    }
}

/// How long the nodes topic keeps heartbeats.
pub const NODES_RETENTION_MS: &str = "3600000";

/// Creates the backbone topic with `config`'s partitions and replication,
/// and the nodes topic (one partition), unless they exist; a broker that does not answer within
/// [`CREATE_TIMEOUT`] is logged, not fatal (the reader waits for the topic,
/// and a broker that auto-creates topics makes it on the first record).
///
/// Does not give way to a shutdown: [`ensure_topic_until`] does.
pub async fn ensure_topic(config: &ClusterConfig) {
    ensure_topic_until(config, std::future::pending()).await;
}

/// [`ensure_topic`], given up as soon as `shutdown` completes: with the
/// broker unreachable, creating the topic waits up to [`CREATE_TIMEOUT`],
/// which a node asked to stop must not sit out. True when it was not
/// interrupted.
pub async fn ensure_topic_until(
    config: &ClusterConfig,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let admin: Result<AdminClient<DefaultClientContext>, _> = config.client_config().create();
    let admin = match admin {
        Ok(a) => a,
        Err(e) => {
            warn!(error = %e, "cluster: no admin client to create the backbone topic");
            return true;
        }
    };
    let nodes = heartbeat::nodes_topic(&config.topic);
    let topics = [
        NewTopic::new(
            &config.topic,
            config.partitions,
            TopicReplication::Fixed(config.replication_factor),
        ),
        // One partition: every node reads all heartbeats, in order. Kept an
        // hour: a node's status needs the last minute only, and a broker's
        // default (a week) would keep every heartbeat of every node.
        NewTopic::new(
            &nodes,
            1,
            TopicReplication::Fixed(config.replication_factor),
        )
        .set("retention.ms", NODES_RETENTION_MS),
    ];
    let opts = AdminOptions::new().request_timeout(Some(CREATE_TIMEOUT));
    let created = tokio::select! {
        biased;
        _ = shutdown => None,
        r = admin.create_topics(&topics, &opts) => Some(r),
    };
    let finished = created.is_some();
    match created {
        None => {
            info!(topic = %config.topic, "cluster: shutting down; not creating the backbone topics")
        }
        Some(Ok(results)) => {
            for result in results {
                match result {
                    Ok(topic) => info!(%topic, "cluster: created a backbone topic"),
                    Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((topic, code)) => {
                        warn!(%topic, error = %code, "cluster: creating a backbone topic failed")
                    }
                }
            }
        }
        Some(Err(e)) => {
            warn!(topic = %config.topic, error = %e, "cluster: creating the backbone topics failed")
        }
    }
    close_within("admin", admin, CLOSE_TIMEOUT).await;
    finished
}

/// How long a backbone client may take to close (the reader commits its
/// position) before the task that owned it ends without waiting more: a
/// shutdown with the broker unreachable must end within `[hub]
/// shutdown_grace_ms`.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs `f` on a thread of its own and waits for what it returns; `None`
/// if the thread could not start or panicked. For librdkafka's blocking
/// calls: not on the runtime's blocking pool, whose shutdown — the process's
/// exit — waits for every call in it, however long the broker makes it
/// wait, even when the task that wanted the answer is gone.
pub(crate) async fn off_runtime<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("tidegate-{name}"))
        .spawn(move || {
            let _ = tx.send(f());
        });
    if let Err(e) = spawned {
        warn!(error = %e, thread = name, "cluster: could not start a thread");
        return None;
    }
    rx.await.ok()
}

/// Drops (closes) librdkafka client `client` off the runtime, waiting for
/// the close at most `limit`; true if it finished in time. A close that
/// takes longer goes on by itself.
pub(crate) async fn close_within<T: Send + 'static>(
    what: &str,
    client: T,
    limit: Duration,
) -> bool {
    let closed = tokio::time::timeout(limit, off_runtime("close", move || drop(client))).await;
    if closed.is_err() {
        warn!(
            client = what,
            ?limit,
            "cluster: closing a backbone client takes too long; not waiting for it"
        );
    }
    closed.is_ok()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tidegate_hub::RouteTable;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A port nothing listens on.
    fn dead_brokers() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    }

    /// The backbone's task as `tidegate serve` runs it, from `create`
    /// (creating the topic first) until `token` is cancelled.
    async fn serve_backbone(create: bool, token: CancellationToken) {
        let config = ClusterConfig::for_brokers(dead_brokers());
        let hub = Hub::new(RouteTable::default());
        let node = ClusterNode::new(&config, "n1", &hub).unwrap();
        if create {
            ensure_topic_until(&config, token.clone().cancelled_owned()).await;
        }
        tokio::join!(
            node.reader.run(hub, token.clone().cancelled_owned()),
            node.heartbeat.run(token.cancelled_owned()),
        );
    }

    /// How long the task takes to end once cancelled `after` its start.
    async fn stop_time(create: bool, after: Duration) -> Duration {
        let token = CancellationToken::new();
        let task = tokio::spawn(serve_backbone(create, token.clone()));
        tokio::time::sleep(after).await;
        let cancelled = Instant::now();
        token.cancel();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the backbone task ended")
            .unwrap();
        cancelled.elapsed()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_no_broker_the_backbone_task_ends_as_soon_as_it_is_cancelled() {
        // Creating the topic (up to CREATE_TIMEOUT, 10 s, against a broker
        // that does not answer).
        let t = stop_time(true, Duration::from_millis(500)).await;
        assert!(
            t < Duration::from_secs(1),
            "while creating the topic: {t:?}"
        );
        // The reader asking for partitions (5 s per request) and the
        // heartbeat waiting for the broker to take its record (5 s).
        let t = stop_time(false, Duration::from_millis(1500)).await;
        assert!(
            t < Duration::from_secs(1),
            "while reading and beating: {t:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn creating_the_topic_gives_way_to_a_shutdown() {
        let config = ClusterConfig::for_brokers(dead_brokers());
        let started = Instant::now();
        let finished =
            ensure_topic_until(&config, tokio::time::sleep(Duration::from_millis(200))).await;
        assert!(!finished);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_close_that_takes_too_long_is_not_waited_for() {
        struct Slow;
        impl Drop for Slow {
            fn drop(&mut self) {
                std::thread::sleep(Duration::from_secs(3));
            }
        }
        let started = Instant::now();
        assert!(!close_within("slow", Slow, Duration::from_millis(100)).await);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(close_within("quick", (), Duration::from_secs(1)).await);
    }
}
