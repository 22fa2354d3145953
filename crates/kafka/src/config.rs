//! `[sinks.kafka]` configuration section, and its translation into a
//! librdkafka [`ClientConfig`].
//!
//! The sink's promise — a message is acknowledged only once the broker has it
//! on every in-sync replica, exactly once per producer session — is not
//! configurable: `enable.idempotence=true` and `acks=all` are always set, and a
//! `[sinks.kafka.properties]` entry that would weaken them is refused.
//!
//! A property the sink sets from one of its own keys (`linger.ms` from
//! `linger_ms`, …) is refused too, under any of librdkafka's names for it
//! (`queue.buffering.max.ms`, `delivery.timeout.ms`, …): librdkafka would
//! otherwise apply the two in an order that changes from run to run
//! ([`crate::properties`]). The error names the key to write instead.
//!
//! Kafka topics are a bounded set the operator names: every message goes to
//! `topic` unless a `topic_template` derives another one that is on the
//! `topics` allow-list. A new tag never creates a new Kafka topic unless
//! `dynamic_topics = true` says so.
//!
//! ```toml
//! [sinks.kafka]
//! brokers = "127.0.0.1:9092"
//! topic = "tidegate"                     # the default Kafka topic
//! # topic_template = "logs_$TAG[-1]"     # derive a topic from the hub topic …
//! # topics = ["logs_web", "logs_db"]     # … used only when on this list
//! # dynamic_topics = false               # true: any derived topic (one per tag)
//! # topic_strip_prefix = ""              # dropped from the hub topic for `$TOPIC`
//! # topic_separator = "."                # replaces `.` in `$TOPIC`
//! # message_key_field = "user_id"        # JSON payload field → Kafka key
//! linger_ms = 20
//! batch_size = 1000000
//! compression = "none"                   # none | gzip | snappy | lz4 | zstd
//! queue_max_messages = 100000
//! queue_max_kbytes = 262144
//! message_timeout_ms = 300000
//! stall_timeout_ms = 30000               # no delivery report that long: a new producer
//! [sinks.kafka.properties]               # passed to librdkafka as is
//! "socket.keepalive.enable" = true
//! ```

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::properties::{self, Conflict, PropertyConflict, Section};
use crate::template::TopicTemplate;

/// `[sinks.kafka]`: where and how to produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]` (`bootstrap.servers`).
    /// Default [`KafkaConfig::DEFAULT_BROKERS`].
    pub brokers: String,
    /// The default Kafka topic: every message goes here unless
    /// `topic_template` derives an allowed other one. Default
    /// [`KafkaConfig::DEFAULT_TOPIC`] (`"tidegate"`).
    pub topic: String,
    /// Derives a Kafka topic from the message's hub topic (see
    /// [`crate::template`] for the syntax: `$TOPIC`, `$TOPIC[N]`, and
    /// Fluent Bit's spelling `$TAG`, `$TAG[N]`), e.g. `"logs_$TAG[-1]"`.
    /// The result is used only if it is on `topics` (or `dynamic_topics` is
    /// on); otherwise the message goes to `topic`. Default: none.
    pub topic_template: Option<String>,
    /// The allow-list of Kafka topics `topic_template` may produce (exact
    /// names). Requires `topic_template`. Default: empty.
    pub topics: Vec<String>,
    /// Lets `topic_template` produce any legal Kafka topic, creating one
    /// Kafka topic per distinct hub topic if the broker auto-creates topics
    /// (`topic_template = "$TOPIC"` with this on is the pre-allow-list
    /// mapping). Requires `topic_template`. Default: `false`.
    pub dynamic_topics: bool,
    /// Removed from the front of the hub topic before `$TOPIC` and
    /// `$TOPIC[N]` see it, e.g. `"logs."` turns `logs.app.web` into
    /// `app.web` (a hub topic that is only the prefix is kept whole).
    /// Requires `topic_template`. Default: empty.
    pub topic_strip_prefix: String,
    /// Written in place of each `.` of the hub topic in `$TOPIC` (`"."`,
    /// `"_"` or `"-"`; Kafka accepts all three). Requires `topic_template`
    /// unless `"."`. Default: `"."`.
    pub topic_separator: String,
    /// A top-level field of the message's JSON payload whose value becomes
    /// the Kafka record key (a string's text; a number, `true`/`false`, an
    /// object or an array as written). A payload that is not a JSON object,
    /// lacks the field or has it `null` keeps the message's own key, if any.
    /// Default: none (the message's own key).
    pub message_key_field: Option<String>,
    /// How long the producer waits to fill a batch (`linger.ms`). Default
    /// [`KafkaConfig::DEFAULT_LINGER_MS`].
    pub linger_ms: u32,
    /// Largest batch in bytes per partition request (`batch.size`). Default
    /// [`KafkaConfig::DEFAULT_BATCH_SIZE`].
    pub batch_size: u32,
    /// Batch compression (`compression.codec`). Default `"none"`.
    pub compression: Compression,
    /// Messages handed over and not yet acknowledged by the broker. When this
    /// many are outstanding `send` waits: the backpressure sources feel, and
    /// the sink reports "queue full" to `/readyz`. Default
    /// [`KafkaConfig::DEFAULT_QUEUE_MAX_MESSAGES`].
    pub queue_max_messages: usize,
    /// Bytes librdkafka may hold in its queue, in KiB
    /// (`queue.buffering.max.kbytes`); a second bound next to the count.
    /// Default [`KafkaConfig::DEFAULT_QUEUE_MAX_KBYTES`].
    pub queue_max_kbytes: u32,
    /// How long librdkafka keeps retrying a message before failing it
    /// (`message.timeout.ms`); a failed message fails its acknowledgement.
    /// Default [`KafkaConfig::DEFAULT_MESSAGE_TIMEOUT_MS`].
    pub message_timeout_ms: u32,
    /// How long the producer may hold records without any delivery report
    /// (delivered or failed) before the sink replaces it with a new one and
    /// produces those records again through it; 0 never replaces it.
    /// librdkafka can be left knowing no broker after an outage and then
    /// delivers nothing until `message_timeout_ms` fails every record
    /// ([`crate::recovery`]). Default
    /// [`KafkaConfig::DEFAULT_STALL_TIMEOUT_MS`].
    pub stall_timeout_ms: u32,
    /// Free-form librdkafka properties. One the sink sets itself (see
    /// [`KafkaConfig::OWN_PROPERTIES`], [`KafkaConfig::GUARANTEES`]), under
    /// any of its names, is refused. Default: none.
    pub properties: BTreeMap<String, PropertyValue>,
}

impl KafkaConfig {
    /// Default bootstrap servers.
    pub const DEFAULT_BROKERS: &'static str = "127.0.0.1:9092";
    /// Default Kafka topic.
    pub const DEFAULT_TOPIC: &'static str = "tidegate";
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
    /// Default `stall_timeout_ms`: far longer than a delivery takes under
    /// load (a broker's GC pause included), far shorter than
    /// `message_timeout_ms`.
    pub const DEFAULT_STALL_TIMEOUT_MS: u32 = 30_000;
    /// Properties the sink sets itself; `properties` may not weaken them.
    pub const GUARANTEES: [(&'static str, &'static str); 2] =
        [("enable.idempotence", "true"), ("acks", "all")];
    /// The librdkafka property behind each of the section's own keys, so an
    /// error librdkafka reports about a property can name the key written.
    pub const OWN_PROPERTIES: [(&'static str, &'static str); 7] = [
        ("bootstrap.servers", "brokers"),
        ("linger.ms", "linger_ms"),
        ("batch.size", "batch_size"),
        ("compression.codec", "compression"),
        ("queue.buffering.max.messages", "queue_max_messages"),
        ("queue.buffering.max.kbytes", "queue_max_kbytes"),
        ("message.timeout.ms", "message_timeout_ms"),
    ];

    /// A config producing to `brokers`, everything else default.
    pub fn for_brokers(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            ..KafkaConfig::default()
        }
    }

    /// Checks the keys the sink interprets itself (not librdkafka's).
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::NoBrokers);
        }
        if self.queue_max_messages == 0 {
            return Err(ConfigError::ZeroQueue);
        }
        if self.stall_timeout_ms != 0
            && u64::from(self.stall_timeout_ms) < u64::from(self.linger_ms) + 1_000
        {
            // A producer holds records for linger_ms by design, then waits
            // a round trip to the broker (acks=all) for their report.
            return Err(ConfigError::StallWithinLinger {
                stall_timeout_ms: self.stall_timeout_ms,
                linger_ms: self.linger_ms,
            });
        }
        if !matches!(self.topic_separator.as_str(), "." | "_" | "-") {
            return Err(ConfigError::BadSeparator(self.topic_separator.clone()));
        }
        check_topic("topic", &self.topic)?;
        for t in &self.topics {
            check_topic("topics", t)?;
        }
        match &self.topic_template {
            Some(t) => {
                TopicTemplate::parse(t).map_err(|e| ConfigError::BadTemplate {
                    template: t.clone(),
                    reason: e.to_string(),
                })?;
                if self.topics.is_empty() && !self.dynamic_topics {
                    return Err(ConfigError::TemplateWithoutAllowList);
                }
            }
            None => {
                let needs_template = [
                    ("topics", !self.topics.is_empty()),
                    ("dynamic_topics", self.dynamic_topics),
                    ("topic_strip_prefix", !self.topic_strip_prefix.is_empty()),
                    ("topic_separator", self.topic_separator != "."),
                ];
                if let Some((key, _)) = needs_template.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::NeedsTemplate(key));
                }
            }
        }
        if self.message_key_field.as_deref() == Some("") {
            return Err(ConfigError::EmptyKeyField);
        }
        self.check_properties()
    }

    /// Refuses a property the sink sets itself, under any of its names,
    /// one that would weaken [`Self::GUARANTEES`], and two names of one
    /// property.
    fn check_properties(&self) -> Result<(), ConfigError> {
        let owned = Self::OWN_PROPERTIES.map(|(property, key)| (property, Some(key)));
        let section = Section {
            name: "sinks.kafka",
            who: "the sink",
        };
        properties::check(
            section,
            &self.properties,
            &owned,
            &Self::GUARANTEES,
            acks_same,
        )
        .map_err(|c| match c {
            Conflict::Guarantee { property, value } => ConfigError::WeakensGuarantee {
                key: property,
                value,
            },
            Conflict::Property(p) => ConfigError::Properties(p),
        })
    }

    /// Checks the section and builds the librdkafka configuration.
    pub fn client_config(&self) -> Result<ClientConfig, ConfigError> {
        self.check()?;
        let mut cfg = properties_with_guarantees(&self.properties, &Self::GUARANTEES, acks_same)
            .map_err(|(key, value)| ConfigError::WeakensGuarantee { key, value })?;
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

    /// Says which key of the section a librdkafka property error is about:
    /// `[sinks.kafka] linger_ms` for a property the sink sets from its own
    /// key, `[sinks.kafka.properties] "name"` for a free-form one.
    pub fn key_of_property(&self, property: &str) -> String {
        match Self::OWN_PROPERTIES
            .iter()
            .find(|(p, _)| properties::same_property(p, property))
        {
            Some((_, key)) => format!("[sinks.kafka] {key}"),
            None => format!("[sinks.kafka.properties] {property:?}"),
        }
    }
}

/// Whether `value` keeps guarantee `key` at `want` (`acks = -1` is `all`).
pub(crate) fn acks_same(key: &str, value: &str, want: &str) -> bool {
    value == want || (key == "acks" && value == "-1")
}

fn check_topic(key: &'static str, topic: &str) -> Result<(), ConfigError> {
    crate::topic::check_kafka_topic(topic).map_err(|reason| ConfigError::BadTopic {
        key,
        topic: topic.to_owned(),
        reason,
    })
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: Self::DEFAULT_BROKERS.to_owned(),
            topic: Self::DEFAULT_TOPIC.to_owned(),
            topic_template: None,
            topics: Vec::new(),
            dynamic_topics: false,
            topic_strip_prefix: String::new(),
            topic_separator: ".".to_owned(),
            message_key_field: None,
            linger_ms: Self::DEFAULT_LINGER_MS,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            compression: Compression::None,
            queue_max_messages: Self::DEFAULT_QUEUE_MAX_MESSAGES,
            queue_max_kbytes: Self::DEFAULT_QUEUE_MAX_KBYTES,
            message_timeout_ms: Self::DEFAULT_MESSAGE_TIMEOUT_MS,
            stall_timeout_ms: Self::DEFAULT_STALL_TIMEOUT_MS,
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

/// A librdkafka configuration from a section's free-form `properties`, with
/// each of `guarantees` set on top, and the quick re-bootstrap
/// ([`crate::rebootstrap`]) unless the properties set it. A property that
/// names a guarantee, under any of its names, must keep it (`same(key,
/// value, wanted)`, `key` the guarantee's name); otherwise `Err((property,
/// value))`: a user cannot turn off what the sink or source promises.
pub(crate) fn properties_with_guarantees(
    properties: &BTreeMap<String, PropertyValue>,
    guarantees: &[(&str, &str)],
    same: impl Fn(&str, &str, &str) -> bool,
) -> Result<ClientConfig, (String, String)> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v.to_string());
    }
    for &(k, want) in guarantees {
        for (name, v) in properties
            .iter()
            .filter(|(name, _)| properties::same_property(name, k))
        {
            let v = v.to_string();
            if !same(k, &v, want) {
                return Err((name.clone(), v));
            }
        }
        cfg.set(k, want);
    }
    crate::rebootstrap::rebootstrap_soon(&mut cfg);
    Ok(cfg)
}

pub(crate) use crate::properties::set_default;

/// A `[sinks.kafka]` section that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// `brokers` is empty.
    #[error("[sinks.kafka] brokers is empty")]
    NoBrokers,
    /// `queue_max_messages = 0` would block every send forever.
    #[error("[sinks.kafka] queue_max_messages must be at least 1")]
    ZeroQueue,
    /// `stall_timeout_ms` would replace a producer that only lingers.
    #[error(
        "[sinks.kafka] stall_timeout_ms = {stall_timeout_ms} must be 0 (never) or at least linger_ms + 1000 (linger_ms = {linger_ms})"
    )]
    StallWithinLinger {
        /// As configured.
        stall_timeout_ms: u32,
        /// As configured.
        linger_ms: u32,
    },
    /// `topic_separator` is not one of `.`, `_`, `-`.
    #[error("[sinks.kafka] topic_separator {0:?} must be \".\", \"_\" or \"-\"")]
    BadSeparator(String),
    /// `topic` or an entry of `topics` is not a legal Kafka topic name.
    #[error("[sinks.kafka] {key}: {topic:?} is not a valid Kafka topic: {reason}")]
    BadTopic {
        /// `topic` or `topics`.
        key: &'static str,
        /// The topic as written.
        topic: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `topic_template` does not parse.
    #[error("[sinks.kafka] topic_template {template:?}: {reason}")]
    BadTemplate {
        /// The template as written.
        template: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A template with neither an allow-list nor `dynamic_topics` would send
    /// everything to `topic`.
    #[error(
        "[sinks.kafka] topic_template needs `topics` (the Kafka topics it may produce) \
         or `dynamic_topics = true`"
    )]
    TemplateWithoutAllowList,
    /// A key that only shapes `topic_template`'s result, without a template.
    #[error(
        "[sinks.kafka] {0} only applies to topic_template, which is not set (every message \
         goes to `topic`; for one Kafka topic per hub topic set \
         topic_template = \"$TOPIC\" and dynamic_topics = true)"
    )]
    NeedsTemplate(&'static str),
    /// `message_key_field = ""`.
    #[error("[sinks.kafka] message_key_field is empty")]
    EmptyKeyField,
    /// A property names one the sink sets itself, or one property twice.
    #[error(transparent)]
    Properties(#[from] PropertyConflict),
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
        assert_eq!(
            rd.get(crate::rebootstrap::REBOOTSTRAP_TRIGGER_PROPERTY),
            Some("5000"),
            "a producer that lost every broker bootstraps again within seconds"
        );
        assert_eq!(rd.get("partitioner"), Some("murmur2_random"));
    }

    #[test]
    fn the_section_prints_and_reads_back_unchanged() {
        let mut c = KafkaConfig::for_brokers("k:9092");
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<KafkaConfig>(&text).unwrap(), c);
        c.topic = "t".into();
        c.topic_template = Some("t_$TOPIC[-1]".into());
        c.topics = vec!["t_a".into(), "t_b".into()];
        c.message_key_field = Some("user".into());
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
        assert_eq!(c.topic, "all-logs");
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
            topic_template: Some("$TOPIC".into()),
            dynamic_topics: true,
            topic_separator: "/".into(),
            ..KafkaConfig::default()
        };
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::BadSeparator(_))
        ));
        let c = KafkaConfig {
            topic: "a b".into(),
            ..KafkaConfig::default()
        };
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::BadTopic { key: "topic", .. })
        ));
        assert!(toml::from_str::<KafkaConfig>("brokers = \"b\"\nbrokerz = 1").is_err());
        assert!(toml::from_str::<KafkaConfig>("compression = \"brotli\"").is_err());
    }

    #[test]
    fn the_default_is_one_kafka_topic_not_one_per_tag() {
        let c = KafkaConfig::default();
        assert_eq!(c.topic, KafkaConfig::DEFAULT_TOPIC);
        assert_eq!(c.topic_template, None);
        assert!(!c.dynamic_topics);
    }

    #[test]
    fn topic_keys_are_checked_and_errors_name_the_key() {
        let err = |text: &str| {
            toml::from_str::<KafkaConfig>(text)
                .unwrap()
                .check()
                .unwrap_err()
                .to_string()
        };
        let e = err("topic_template = \"logs_$TAG\"");
        assert!(e.contains("topic_template needs `topics`"), "{e}");
        let e = err("topic_template = \"logs_$host\"\ntopics = [\"a\"]");
        assert!(e.contains("topic_template \"logs_$host\""), "{e}");
        let e = err("topic_template = \"$TAG\"\ntopics = [\"ok\", \"not ok\"]");
        assert!(e.contains("topics: \"not ok\""), "{e}");
        let e = err("topics = [\"a\"]");
        assert!(
            e.starts_with("[sinks.kafka] topics only applies to topic_template"),
            "{e}"
        );
        let e = err("topic_strip_prefix = \"logs.\"");
        assert!(e.contains("topic_strip_prefix only applies"), "{e}");
        assert!(
            e.contains("dynamic_topics = true"),
            "says how to keep the old mapping: {e}"
        );
        let e = err("dynamic_topics = true");
        assert!(e.contains("dynamic_topics only applies"), "{e}");
        let e = err("message_key_field = \"\"");
        assert!(e.contains("message_key_field"), "{e}");
        toml::from_str::<KafkaConfig>(
            "topic_template = \"$TAG\"\ndynamic_topics = true\nmessage_key_field = \"id\"",
        )
        .unwrap()
        .check()
        .unwrap();
    }

    /// Every name librdkafka reads as a property the sink sets, with the
    /// key that sets it.
    const OWN_NAMES: [(&str, &str); 11] = [
        ("bootstrap.servers", "brokers"),
        ("metadata.broker.list", "brokers"),
        ("linger.ms", "linger_ms"),
        ("queue.buffering.max.ms", "linger_ms"),
        ("batch.size", "batch_size"),
        ("compression.codec", "compression"),
        ("compression.type", "compression"),
        ("queue.buffering.max.messages", "queue_max_messages"),
        ("queue.buffering.max.kbytes", "queue_max_kbytes"),
        ("message.timeout.ms", "message_timeout_ms"),
        ("delivery.timeout.ms", "message_timeout_ms"),
    ];

    #[test]
    fn a_property_the_sink_sets_itself_is_refused_under_any_of_its_names() {
        for (property, key) in OWN_NAMES {
            let mut c = KafkaConfig::default();
            c.properties
                .insert(property.into(), PropertyValue::Integer(1000));
            let e = c.check().unwrap_err();
            assert!(
                matches!(&e, ConfigError::Properties(PropertyConflict::SetBySection { property: p, key: k, .. })
                    if p == property && *k == key),
                "{property}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("[sinks.kafka.properties] {property:?}")),
                "{text}"
            );
            assert!(
                text.contains(&format!("[sinks.kafka] {key}; set {key} instead")),
                "{text}"
            );
            // What `tidegate config --check` and start-up run.
            assert_eq!(crate::validate(&c).unwrap_err(), text);
        }
        let e = toml::from_str::<KafkaConfig>("[properties]\n\"delivery.timeout.ms\" = 1000")
            .unwrap()
            .check()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "[sinks.kafka.properties] \"delivery.timeout.ms\" (another name for \
             message.timeout.ms): the sink sets it from [sinks.kafka] message_timeout_ms; \
             set message_timeout_ms instead"
        );
        // Not silently overridden by the sink's own value any more.
        let e = toml::from_str::<KafkaConfig>("[properties]\n\"linger.ms\" = \"abc\"")
            .unwrap()
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"linger.ms\"") && e.contains("linger_ms"),
            "{e}"
        );
    }

    #[test]
    fn an_alias_against_the_sinks_own_key_fails_the_same_way_every_time() {
        // Measured before: linger_ms = 5000 with "delivery.timeout.ms" =
        // 1000 passed validation or failed it depending on the order
        // librdkafka got the two in, a different one per ClientConfig.
        let c: KafkaConfig =
            toml::from_str("linger_ms = 5000\n[properties]\n\"delivery.timeout.ms\" = 1000")
                .unwrap();
        let first = crate::validate(&c).unwrap_err();
        assert!(
            first.contains("\"delivery.timeout.ms\"") && first.contains("message_timeout_ms"),
            "{first}"
        );
        for _ in 0..30 {
            assert_eq!(crate::validate(&c).unwrap_err(), first);
        }
        // The sink's own keys alone conflict the same way every time too.
        let c: KafkaConfig = toml::from_str("linger_ms = 5000\nmessage_timeout_ms = 1000").unwrap();
        let first = crate::validate(&c).unwrap_err();
        for _ in 0..30 {
            assert_eq!(crate::validate(&c).unwrap_err(), first);
        }
    }

    #[test]
    fn a_guarantee_is_kept_under_any_of_its_names() {
        let with = |property: &str, value: PropertyValue| {
            let mut c = KafkaConfig::default();
            c.properties.insert(property.into(), value);
            c
        };
        let c = with("request.required.acks", PropertyValue::Integer(1));
        assert_eq!(
            c.check().unwrap_err(),
            ConfigError::WeakensGuarantee {
                key: "request.required.acks".into(),
                value: "1".into()
            }
        );
        assert!(matches!(
            c.client_config(),
            Err(ConfigError::WeakensGuarantee { .. })
        ));
        for v in [
            PropertyValue::Integer(-1),
            PropertyValue::Text("all".into()),
        ] {
            let rd = with("request.required.acks", v).client_config().unwrap();
            assert_eq!(rd.get("acks"), Some("all"));
        }
        let e = with("enable.idempotence", PropertyValue::Bool(false))
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("enable.idempotence"), "{e}");
    }

    #[test]
    fn two_names_of_one_property_are_refused() {
        let c: KafkaConfig =
            toml::from_str("[properties]\nretries = 5\n\"message.send.max.retries\" = 6").unwrap();
        assert_eq!(
            c.check().unwrap_err().to_string(),
            "[sinks.kafka.properties] \"message.send.max.retries\" and \"retries\" are names \
             of one librdkafka property; keep one"
        );
    }

    #[test]
    fn a_property_error_names_the_sections_own_key_when_there_is_one() {
        let c = KafkaConfig::default();
        assert_eq!(c.key_of_property("linger.ms"), "[sinks.kafka] linger_ms");
        assert_eq!(
            c.key_of_property("socket.timeout.ms"),
            "[sinks.kafka.properties] \"socket.timeout.ms\""
        );
    }
}
