//! The Kafka source, `[sources.kafka]`: a consumer group's records published
//! into the hub, at least once — a record's offset is committed only after
//! the hub accepted it and every sink its topic is routed to acknowledged
//! it.
//!
//! - [`config`]: the section and its librdkafka translation.
//! - [`record`]: Kafka record → hub message (topic, key, timestamp,
//!   headers, and the record's topic/partition/offset as attributes).
//! - [`offsets`]: which offsets may be committed, acknowledgements arriving
//!   in any order.
//! - [`consumer`]: [`KafkaSource`], the loop, with its bound on records in
//!   flight (the consumer pauses at it).
//! - [`metrics`]: the `tidegate_kafka_source_*` counters.
//!
//! Not for: Kafka as the cluster backbone (`crate::backbone`), which reads
//! every partition on every node without a shared group.

pub mod config;
pub mod consumer;
pub mod metrics;
pub mod offsets;
pub mod record;

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;

pub use config::{KafkaSourceConfig, SourceConfigError, StartFrom};
pub use consumer::{KafkaSource, KafkaSourceError};
pub use metrics::SourceMetrics;

/// Checks everything about `config` that can be checked without a broker:
/// the source's own keys, then every property as librdkafka reads it (a
/// consumer is created and dropped at once). The error names the key.
pub fn validate_source(config: &KafkaSourceConfig) -> Result<(), String> {
    let client_config = config.client_config().map_err(|e| e.to_string())?;
    client_config
        .create::<BaseConsumer>()
        .map(drop)
        .map_err(|e| match e {
            KafkaError::ClientConfig(_, description, property, value) => {
                format!("[sources.kafka.properties] {property:?} = {value:?}: {description}")
            }
            other => format!("[sources.kafka] {other}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PropertyValue;

    #[test]
    fn validation_needs_no_broker_and_names_a_bad_property() {
        let mut c = KafkaSourceConfig::for_topics("127.0.0.1:1", &["t"]);
        validate_source(&c).unwrap();
        c.properties
            .insert("no.such.property".into(), PropertyValue::Integer(1));
        let e = validate_source(&c).unwrap_err();
        assert!(e.contains("no.such.property"), "{e}");
    }
}
