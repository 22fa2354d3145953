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
//! - [`status`]: `tidegate cluster status`, read from the brokers.
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
pub async fn ensure_topic(config: &ClusterConfig) {
    let admin: Result<AdminClient<DefaultClientContext>, _> = config.client_config().create();
    let admin = match admin {
        Ok(a) => a,
        Err(e) => {
            warn!(error = %e, "cluster: no admin client to create the backbone topic");
            return;
        }
    };
    let topic = NewTopic::new(
        &config.topic,
        config.partitions,
        TopicReplication::Fixed(config.replication_factor),
    );
    let opts = AdminOptions::new().request_timeout(Some(CREATE_TIMEOUT));
    match admin.create_topics([&topic], &opts).await {
        Ok(results) => match results.into_iter().next() {
            Some(Ok(_)) => info!(topic = %config.topic, partitions = config.partitions,
                                 "cluster: created the backbone topic"),
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => {}
            Some(Err((_, code))) => {
                warn!(topic = %config.topic, error = %code, "cluster: creating the backbone topic failed")
            }
        },
        Err(e) => {
            warn!(topic = %config.topic, error = %e, "cluster: creating the backbone topic failed")
        }
    }
}
