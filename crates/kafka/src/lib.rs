//! Tidegate's Kafka sink: routed hub messages produced to Apache Kafka with
//! `rdkafka` (idempotent, `acks=all`), acknowledged back to the source only
//! when the broker has them.
//!
//! - [`config`]: the `[sinks.kafka]` section and its librdkafka translation.
//! - [`topic`]: hub topic → Kafka topic name.
//! - [`sink`]: [`KafkaSink`], the [`tidegate_hub::Sink`] itself.
//! - [`delivery`]: delivery reports → acknowledgement tokens.
//! - [`room`]: the bound on unacknowledged messages (backpressure).
//! - [`metrics`]: the sink's counters.
//! - `testing` (feature `test-broker`): a real single-node broker for tests.

#![warn(missing_docs)]

pub mod config;
pub mod delivery;
pub mod metrics;
pub mod room;
pub mod sink;
#[cfg(feature = "test-broker")]
pub mod testing;
pub mod topic;

pub use config::{Compression, ConfigError, KafkaConfig, PropertyValue};
pub use metrics::KafkaMetrics;
pub use sink::{KafkaSink, KafkaSinkError};
pub use topic::TopicMapper;
