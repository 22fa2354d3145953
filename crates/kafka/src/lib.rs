//! Tidegate and Apache Kafka: the sink (routed hub messages produced with
//! `rdkafka`, idempotent, `acks=all`, acknowledged back to the source only
//! when the broker has them — across fatal producer errors too), the source
//! (a consumer group's records published into the hub, at least once), and
//! cluster mode (nodes sharing hub topics through one backbone topic).
//!
//! - [`backbone`]: cluster mode, `[cluster] backbone = "kafka"`: nodes
//!   sharing hub topics through one Kafka topic.
//! - [`config`]: the `[sinks.kafka]` section and its librdkafka translation.
//! - [`topic`], [`template`]: hub topic → Kafka topic (default topic,
//!   `topic_template`, allow-list).
//! - [`key`]: `message_key_field`, the record key from the JSON payload.
//! - [`record`]: hub message → Kafka record.
//! - [`sink`]: [`KafkaSink`], the [`tidegate_hub::Sink`] itself.
//! - [`producer`]: the producer in use, replaceable whole.
//! - [`delivery`]: delivery reports → acknowledgement tokens.
//! - [`recovery`]: a dead producer replaced, its records produced again.
//! - [`room`]: the bound on unacknowledged messages (backpressure).
//! - [`health`]: broker connection, for readiness.
//! - [`probe`](mod@probe): [`validate`] and [`probe`](fn@probe) a section before serving with it.
//! - [`properties`]: librdkafka property names and aliases; a section's
//!   `properties` kept off what the section sets itself.
//! - [`metrics`]: the sink's counters.
//! - [`source`]: the Kafka source, `[sources.kafka]`: a consumer group's
//!   records published into the hub, committed behind its acknowledgements.
//! - `testing` (feature `test-broker`): a real single-node broker for tests.

#![warn(missing_docs)]

pub mod backbone;
pub mod config;
pub mod delivery;
pub mod health;
pub mod key;
pub mod metrics;
pub mod probe;
pub mod producer;
pub mod properties;
pub mod rebootstrap;
pub mod record;
pub mod recovery;
pub mod room;
pub mod sink;
pub mod source;
pub mod template;
#[cfg(feature = "test-broker")]
pub mod testing;
pub mod topic;

pub use config::{Compression, ConfigError, KafkaConfig, PropertyValue};
pub use metrics::KafkaMetrics;
pub use probe::{probe, validate, ProbeBroker, ProbeReport, ProbeTopic};
pub use sink::{KafkaSink, KafkaSinkError};
pub use source::{KafkaSource, KafkaSourceConfig, KafkaSourceError};
pub use template::{TemplateError, TopicTemplate};
pub use topic::TopicMapper;
