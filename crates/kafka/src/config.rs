//! `[sinks.kafka]` configuration section, and its translation into a
//! librdkafka [`ClientConfig`].
//!
//! The sink's promise — a message is acknowledged only once the broker has it
//! on every in-sync replica, exactly once per producer session — is not
//! configurable: `enable.idempotence=true` and `acks=all` are always set, and a
//! `[sinks.kafka.properties]` entry that would weaken them is refused.
//!
//! ```toml
//! [sinks.kafka]
//! brokers = "127.0.0.1:9092"
//! # topic = "logs"            # one fixed Kafka topic; default: from the message topic
//! topic_strip_prefix = ""      # dropped from the hub topic before mapping
//! topic_separator = "."        # replaces the hub's `.` separator
//! linger_ms = 20
//! batch_size = 1000000
//! compression = "none"         # none | gzip | snappy | lz4 | zstd
//! queue_max_messages = 100000
//! message_timeout_ms = 300000
//! [sinks.kafka.properties]     # passed to librdkafka as is
//! "socket.keepalive.enable" = true
//! ```

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// `[sinks.kafka]`: where and how to produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]` (`bootstrap.servers`).
    pub brokers: String,
    /// One fixed Kafka topic for every message. When absent the Kafka topic
    /// is derived from the message's hub topic (see [`crate::TopicMapper`]).
    pub topic: Option<String>,
    /// Removed from the front of the hub topic before it is mapped, e.g.
    /// `"logs."` turns `logs.app.web` into the Kafka topic `app.web`.
    pub topic_strip_prefix: String,
    /// Written in place of each `.` of the hub topic (`"."`, `"_"` or `"-"`;
    /// Kafka accepts all three).
    pub topic_separator: String,
    /// How long the producer waits to fill a batch (`linger.ms`).
    pub linger_ms: u32,
    /// Largest batch in bytes per partition request (`batch.size`).
    pub batch_size: u32,
    /// Batch compression (`compression.codec`).
    pub compression: Compression,
    /// Messages handed over and not yet acknowledged by the broker. When this
    /// many are outstanding `send` waits: the backpressure sources feel.
    pub queue_max_messages: usize,
    /// Bytes librdkafka may hold in its queue, in KiB
    /// (`queue.buffering.max.kbytes`); a second bound next to the count.
    pub queue_max_kbytes: u32,
    /// How long librdkafka keeps retrying a message before failing it
    /// (`message.timeout.ms`); a failed message fails its acknowledgement.
    pub message_timeout_ms: u32,
    /// Free-form librdkafka properties, applied before the sink's own.
    pub properties: BTreeMap<String, PropertyValue>,
}

impl KafkaConfig {
    /// Default bootstrap servers.
    pub const DEFAULT_BROKERS: &'static str = "127.0.0.1:9092";
    /// Default `linger.ms`. A Forward chunk is acknowledged only when its
    /// last record is on the broker, so the wait is paid once per chunk and
    /// buys large batches: into the local broker on the 2-core box, 20 ms
    /// gave ~1.4× the records/s of librdkafka's own 5 ms, at a lower ack p99
    /// (BENCHMARKS.md, "kafka").
    pub const DEFAULT_LINGER_MS: u32 = 20;
    /// Default `batch.size` (librdkafka's own default).
    pub const DEFAULT_BATCH_SIZE: u32 = 1_000_000;
    /// Default bound on unacknowledged messages.
    pub const DEFAULT_QUEUE_MAX_MESSAGES: usize = 100_000;
    /// Default bound on librdkafka's queue in KiB (256 MiB).
    pub const DEFAULT_QUEUE_MAX_KBYTES: u32 = 262_144;
    /// Default `message.timeout.ms` (librdkafka's own default, 5 minutes).
    pub const DEFAULT_MESSAGE_TIMEOUT_MS: u32 = 300_000;
    /// Properties the sink sets itself; `properties` may not weaken them.
    pub const GUARANTEES: [(&'static str, &'static str); 2] =
        [("enable.idempotence", "true"), ("acks", "all")];

    /// A config producing to `brokers`, everything else default.
    pub fn for_brokers(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            ..KafkaConfig::default()
        }
    }

    /// Checks the section and builds the librdkafka configuration.
    pub fn client_config(&self) -> Result<ClientConfig, ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::NoBrokers);
        }
        if self.queue_max_messages == 0 {
            return Err(ConfigError::ZeroQueue);
        }
        if !matches!(self.topic_separator.as_str(), "." | "_" | "-") {
            return Err(ConfigError::BadSeparator(self.topic_separator.clone()));
        }
        if let Some(t) = &self.topic {
            crate::topic::check_kafka_topic(t).map_err(|reason| ConfigError::BadTopic {
                topic: t.clone(),
                reason,
            })?;
        }
        let mut cfg = ClientConfig::new();
        for (k, v) in &self.properties {
            cfg.set(k, v.to_string());
        }
        for (k, want) in Self::GUARANTEES {
            if let Some(v) = self.properties.get(k) {
                let v = v.to_string();
                let same = v == want || (k == "acks" && v == "-1");
                if !same {
                    return Err(ConfigError::WeakensGuarantee {
                        key: k.to_owned(),
                        value: v,
                    });
                }
            }
            cfg.set(k, want);
        }
        // librdkafka's own count bound sits above ours, so our semaphore is the
        // bound that bites and `send` waits instead of failing.
        let rd_queue = self
            .queue_max_messages
            .saturating_add(1024)
            .min(2_147_483_647);
        cfg.set("bootstrap.servers", &self.brokers)
            .set("linger.ms", self.linger_ms.to_string())
            .set("batch.size", self.batch_size.to_string())
            .set("compression.codec", self.compression.as_str())
            .set("queue.buffering.max.messages", rd_queue.to_string())
            .set(
                "queue.buffering.max.kbytes",
                self.queue_max_kbytes.to_string(),
            )
            .set("message.timeout.ms", self.message_timeout_ms.to_string());
        if !self.properties.contains_key("partitioner") {
            // The Java client's partitioner: the same key lands on the same
            // partition whichever client produced it.
            cfg.set("partitioner", "murmur2_random");
        }
        Ok(cfg)
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: Self::DEFAULT_BROKERS.to_owned(),
            topic: None,
            topic_strip_prefix: String::new(),
            topic_separator: ".".to_owned(),
            linger_ms: Self::DEFAULT_LINGER_MS,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            compression: Compression::None,
            queue_max_messages: Self::DEFAULT_QUEUE_MAX_MESSAGES,
            queue_max_kbytes: Self::DEFAULT_QUEUE_MAX_KBYTES,
            message_timeout_ms: Self::DEFAULT_MESSAGE_TIMEOUT_MS,
            properties: BTreeMap::new(),
        }
    }
}

/// Batch compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression (Kafka's default).
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// The `compression.codec` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// A `[sinks.kafka.properties]` value: TOML strings, integers and booleans
/// are passed to librdkafka as their text (write a fraction as a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PropertyValue {
    /// `"text"`.
    Text(String),
    /// `42`.
    Integer(i64),
    /// `true`.
    Bool(bool),
}

impl fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Integer(i) => write!(f, "{i}"),
            PropertyValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A `[sinks.kafka]` section that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// `brokers` is empty.
    #[error("[sinks.kafka] brokers is empty")]
    NoBrokers,
    /// `queue_max_messages = 0` would block every send forever.
    #[error("[sinks.kafka] queue_max_messages must be at least 1")]
    ZeroQueue,
    /// `topic_separator` is not one of `.`, `_`, `-`.
    #[error("[sinks.kafka] topic_separator {0:?} must be \".\", \"_\" or \"-\"")]
    BadSeparator(String),
    /// The fixed `topic` is not a legal Kafka topic name.
    #[error("[sinks.kafka] topic {topic:?} is not a valid Kafka topic: {reason}")]
    BadTopic {
        /// The topic as written.
        topic: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A property would weaken idempotence or `acks=all`.
    #[error(
        "[sinks.kafka.properties] {key} = {value:?} would weaken the sink's delivery guarantee"
    )]
    WeakensGuarantee {
        /// The property.
        key: String,
        /// The refused value.
        value: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_with_only_brokers_takes_the_defaults() {
        let c: KafkaConfig = toml::from_str("brokers = \"k1:9092,k2:9092\"").unwrap();
        assert_eq!(c, KafkaConfig::for_brokers("k1:9092,k2:9092"));
        let rd = c.client_config().unwrap();
        assert_eq!(rd.get("enable.idempotence"), Some("true"));
        assert_eq!(rd.get("acks"), Some("all"));
        assert_eq!(rd.get("bootstrap.servers"), Some("k1:9092,k2:9092"));
        assert_eq!(rd.get("partitioner"), Some("murmur2_random"));
    }

    #[test]
    fn the_section_prints_and_reads_back_unchanged() {
        let mut c = KafkaConfig::for_brokers("k:9092");
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<KafkaConfig>(&text).unwrap(), c);
        c.topic = Some("t".into());
        c.properties
            .insert("client.id".into(), PropertyValue::Text("x".into()));
        c.properties
            .insert("retries".into(), PropertyValue::Integer(3));
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<KafkaConfig>(&text).unwrap(), c);
    }

    #[test]
    fn every_key_and_free_form_properties_reach_librdkafka() {
        let c: KafkaConfig = toml::from_str(
            r#"
            brokers = "b:1"
            topic = "all-logs"
            linger_ms = 7
            batch_size = 65536
            compression = "zstd"
            queue_max_messages = 10
            [properties]
            "socket.keepalive.enable" = true
            "retry.backoff.ms" = 50
            "client.id" = "tg"
            acks = -1
            "#,
        )
        .unwrap();
        assert_eq!(c.topic.as_deref(), Some("all-logs"));
        let rd = c.client_config().unwrap();
        assert_eq!(rd.get("linger.ms"), Some("7"));
        assert_eq!(rd.get("batch.size"), Some("65536"));
        assert_eq!(rd.get("compression.codec"), Some("zstd"));
        assert_eq!(rd.get("socket.keepalive.enable"), Some("true"));
        assert_eq!(rd.get("retry.backoff.ms"), Some("50"));
        assert_eq!(rd.get("client.id"), Some("tg"));
        assert_eq!(rd.get("acks"), Some("all"));
    }

    #[test]
    fn properties_that_weaken_the_guarantee_are_refused() {
        let mut c = KafkaConfig::default();
        c.properties
            .insert("acks".into(), PropertyValue::Integer(1));
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::WeakensGuarantee { .. })
        ));
        let mut c = KafkaConfig::default();
        c.properties
            .insert("enable.idempotence".into(), PropertyValue::Bool(false));
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::WeakensGuarantee { .. })
        ));
    }

    #[test]
    fn unusable_sections_are_refused() {
        assert_eq!(
            KafkaConfig::for_brokers(" ").client_config().unwrap_err(),
            ConfigError::NoBrokers
        );
        let c = KafkaConfig {
            queue_max_messages: 0,
            ..KafkaConfig::default()
        };
        assert_eq!(c.client_config().unwrap_err(), ConfigError::ZeroQueue);
        let c = KafkaConfig {
            topic_separator: "/".into(),
            ..KafkaConfig::default()
        };
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::BadSeparator(_))
        ));
        let c = KafkaConfig {
            topic: Some("a b".into()),
            ..KafkaConfig::default()
        };
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::BadTopic { .. })
        ));
        assert!(toml::from_str::<KafkaConfig>("brokers = \"b\"\nbrokerz = 1").is_err());
        assert!(toml::from_str::<KafkaConfig>("compression = \"brotli\"").is_err());
    }
}
