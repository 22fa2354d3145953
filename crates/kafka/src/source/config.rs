//! `[sources.kafka]`: which Kafka topics to consume into the hub, and the
//! consumer group that shares them between Tidegate nodes.
//!
//! The source's promise — a record's offset is committed only after the hub
//! accepted it (and every routed sink acknowledged it) — is not
//! configurable: `enable.auto.offset.store=false` is always set, and a
//! `[sources.kafka.properties]` entry that would store or commit offsets on
//! its own is refused. So is a property the source sets from one of its own
//! keys (`group.id`, `auto.offset.reset`, …), under any of librdkafka's
//! names for it ([`crate::properties`]): the error names the key to write.
//!
//! ```toml
//! [sources.kafka]
//! brokers = "127.0.0.1:9092"
//! group_id = "tidegate"              # nodes with the same group share the partitions
//! topics = ["orders", "payments"]    # by name …
//! # topic_regex = "^logs-.*"         # … and/or every topic matching a regex
//! topic_prefix = "kafka."            # hub topic = prefix + Kafka topic
//! start = "earliest"                 # a new group starts at: earliest | latest
//! max_in_flight = 10000              # records published and not yet acknowledged
//! commit_interval_ms = 1000
//! queue_max_kbytes = 16384           # what librdkafka may prefetch
//! [sources.kafka.properties]         # passed to librdkafka as is
//! "session.timeout.ms" = 10000
//! ```

use std::collections::BTreeMap;

use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::properties_with_guarantees;
use crate::properties::{self, Conflict, PropertyConflict, Section};
use crate::PropertyValue;

/// `[sources.kafka]`: what to consume and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// Bootstrap servers, `host:port[,host:port…]`. Default
    /// [`KafkaSourceConfig::DEFAULT_BROKERS`].
    pub brokers: String,
    /// The consumer group (`group.id`): nodes with the same group split the
    /// partitions between them, each record goes to one of them. Default
    /// [`KafkaSourceConfig::DEFAULT_GROUP_ID`].
    pub group_id: String,
    /// Kafka topics consumed, by exact name. Default: none.
    pub topics: Vec<String>,
    /// Every topic whose name matches this regular expression is consumed
    /// too, including topics created later (librdkafka's regex syntax; a
    /// leading `^` is added when missing). Default: none.
    pub topic_regex: Option<String>,
    /// Put before the Kafka topic to make the hub topic: `"kafka."` publishes
    /// Kafka topic `orders` on hub topic `kafka.orders`. May be empty.
    /// Default [`KafkaSourceConfig::DEFAULT_TOPIC_PREFIX`].
    pub topic_prefix: String,
    /// Where a group with no committed offset starts (`auto.offset.reset`).
    /// Default `earliest`.
    pub start: StartFrom,
    /// Records published into the hub and not yet acknowledged by every
    /// routed sink. At the bound the consumer pauses its partitions until
    /// acknowledgements free room. Default
    /// [`KafkaSourceConfig::DEFAULT_MAX_IN_FLIGHT`].
    pub max_in_flight: usize,
    /// How often acknowledged offsets are committed
    /// (`auto.commit.interval.ms`; they are also committed when partitions
    /// are revoked and at shutdown). Default
    /// [`KafkaSourceConfig::DEFAULT_COMMIT_INTERVAL_MS`].
    pub commit_interval_ms: u32,
    /// What librdkafka may fetch ahead of the hub, in KiB per partition
    /// (`queued.max.messages.kbytes`). Default
    /// [`KafkaSourceConfig::DEFAULT_QUEUE_MAX_KBYTES`].
    pub queue_max_kbytes: u32,
    /// Free-form librdkafka consumer properties. One the source sets
    /// itself (see [`KafkaSourceConfig::OWN_PROPERTIES`],
    /// [`KafkaSourceConfig::GUARANTEES`]), under any of its names, is
    /// refused. Default: none.
    pub properties: BTreeMap<String, PropertyValue>,
}

/// Where a consumer group without a committed offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartFrom {
    /// The oldest record still in the partition.
    #[default]
    Earliest,
    /// Only records produced after the group joined.
    Latest,
}

impl StartFrom {
    /// The `auto.offset.reset` value.
    pub fn as_str(self) -> &'static str {
        match self {
            StartFrom::Earliest => "earliest",
            StartFrom::Latest => "latest",
        }
    }
}

impl KafkaSourceConfig {
    /// Default bootstrap servers.
    pub const DEFAULT_BROKERS: &'static str = "127.0.0.1:9092";
    /// Default consumer group.
    pub const DEFAULT_GROUP_ID: &'static str = "tidegate";
    /// Default hub topic prefix.
    pub const DEFAULT_TOPIC_PREFIX: &'static str = "kafka.";
    /// Default bound on unacknowledged records: enough to keep a sink's
    /// batches full, small enough that a stalled sink holds a few MB.
    pub const DEFAULT_MAX_IN_FLIGHT: usize = 10_000;
    /// Default commit interval (librdkafka's own default is 5 s; a shorter
    /// one means fewer duplicates after a crash).
    pub const DEFAULT_COMMIT_INTERVAL_MS: u32 = 1_000;
    /// Default prefetch bound per partition, 16 MiB (librdkafka's own is
    /// 64 MiB).
    pub const DEFAULT_QUEUE_MAX_KBYTES: u32 = 16_384;
    /// Properties the source sets itself; `properties` may not change them.
    pub const GUARANTEES: [(&'static str, &'static str); 2] = [
        ("enable.auto.offset.store", "false"),
        ("enable.auto.commit", "true"),
    ];
    /// The librdkafka property behind each of the source's own keys: a
    /// `properties` entry naming one is refused.
    pub const OWN_PROPERTIES: [(&'static str, &'static str); 5] = [
        ("bootstrap.servers", "brokers"),
        ("group.id", "group_id"),
        ("auto.offset.reset", "start"),
        ("auto.commit.interval.ms", "commit_interval_ms"),
        ("queued.max.messages.kbytes", "queue_max_kbytes"),
    ];

    /// A source consuming `topics` from `brokers`, everything else default.
    pub fn for_topics(brokers: impl Into<String>, topics: &[&str]) -> Self {
        KafkaSourceConfig {
            brokers: brokers.into(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            ..KafkaSourceConfig::default()
        }
    }

    /// What the consumer subscribes to: the names, then the regex (with its
    /// leading `^`, which is how librdkafka tells a regex from a name).
    pub fn subscription(&self) -> Vec<String> {
        let mut out = self.topics.clone();
        if let Some(r) = &self.topic_regex {
            out.push(if r.starts_with('^') {
                r.clone()
            } else {
                format!("^{r}")
            });
        }
        out
    }

    /// Checks the keys the source interprets itself.
    pub fn check(&self) -> Result<(), SourceConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(SourceConfigError::NoBrokers);
        }
        if self.group_id.trim().is_empty() {
            return Err(SourceConfigError::NoGroup);
        }
        if self.topics.is_empty() && self.topic_regex.is_none() {
            return Err(SourceConfigError::NoTopics);
        }
        for t in &self.topics {
            crate::topic::check_kafka_topic(t).map_err(|reason| SourceConfigError::BadTopic {
                topic: t.clone(),
                reason,
            })?;
        }
        if matches!(self.topic_regex.as_deref(), Some("" | "^")) {
            return Err(SourceConfigError::EmptyRegex);
        }
        if !self.topic_prefix.is_empty() {
            // The prefix and any Kafka topic must make a valid hub topic.
            let sample = format!("{}x", self.topic_prefix);
            tidegate_hub::topic::validate_topic(&sample).map_err(|e| {
                SourceConfigError::BadPrefix {
                    prefix: self.topic_prefix.clone(),
                    reason: e.to_string(),
                }
            })?;
        }
        if self.max_in_flight == 0 {
            return Err(SourceConfigError::ZeroInFlight);
        }
        if self.commit_interval_ms == 0 {
            return Err(SourceConfigError::ZeroCommitInterval);
        }
        let owned = Self::OWN_PROPERTIES.map(|(property, key)| (property, Some(key)));
        let section = Section {
            name: "sources.kafka",
            who: "the source",
        };
        properties::check(
            section,
            &self.properties,
            &owned,
            &Self::GUARANTEES,
            |_, v, want| v == want,
        )
        .map_err(|c| match c {
            Conflict::Guarantee { property, value } => SourceConfigError::WeakensGuarantee {
                key: property,
                value,
            },
            Conflict::Property(p) => SourceConfigError::Properties(p),
        })
    }

    /// Checks the section and builds the librdkafka consumer configuration.
    pub fn client_config(&self) -> Result<ClientConfig, SourceConfigError> {
        self.check()?;
        let mut cfg =
            properties_with_guarantees(&self.properties, &Self::GUARANTEES, |_, v, want| v == want)
                .map_err(|(key, value)| SourceConfigError::WeakensGuarantee { key, value })?;
        cfg.set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id)
            .set("auto.offset.reset", self.start.as_str())
            .set(
                "auto.commit.interval.ms",
                self.commit_interval_ms.to_string(),
            )
            .set(
                "queued.max.messages.kbytes",
                self.queue_max_kbytes.to_string(),
            );
        Ok(cfg)
    }
}

impl Default for KafkaSourceConfig {
    fn default() -> Self {
        KafkaSourceConfig {
            brokers: Self::DEFAULT_BROKERS.to_owned(),
            group_id: Self::DEFAULT_GROUP_ID.to_owned(),
            topics: Vec::new(),
            topic_regex: None,
            topic_prefix: Self::DEFAULT_TOPIC_PREFIX.to_owned(),
            start: StartFrom::Earliest,
            max_in_flight: Self::DEFAULT_MAX_IN_FLIGHT,
            commit_interval_ms: Self::DEFAULT_COMMIT_INTERVAL_MS,
            queue_max_kbytes: Self::DEFAULT_QUEUE_MAX_KBYTES,
            properties: BTreeMap::new(),
        }
    }
}

/// A `[sources.kafka]` section that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SourceConfigError {
    /// `brokers` is empty.
    #[error("[sources.kafka] brokers is empty")]
    NoBrokers,
    /// `group_id` is empty.
    #[error("[sources.kafka] group_id is empty")]
    NoGroup,
    /// Neither `topics` nor `topic_regex`.
    #[error("[sources.kafka] names no topic: set `topics` or `topic_regex`")]
    NoTopics,
    /// An entry of `topics` is not a legal Kafka topic.
    #[error("[sources.kafka] topics: {topic:?} is not a valid Kafka topic: {reason}")]
    BadTopic {
        /// The topic as written.
        topic: String,
        /// Why.
        reason: &'static str,
    },
    /// `topic_regex = ""`.
    #[error("[sources.kafka] topic_regex is empty")]
    EmptyRegex,
    /// `topic_prefix` cannot start a hub topic.
    #[error("[sources.kafka] topic_prefix {prefix:?} cannot start a hub topic: {reason}")]
    BadPrefix {
        /// The prefix.
        prefix: String,
        /// Why.
        reason: String,
    },
    /// `max_in_flight = 0` would never publish.
    #[error("[sources.kafka] max_in_flight must be at least 1")]
    ZeroInFlight,
    /// `commit_interval_ms = 0` would turn committing off.
    #[error("[sources.kafka] commit_interval_ms must be at least 1")]
    ZeroCommitInterval,
    /// A property names one the source sets itself, or one property twice.
    #[error(transparent)]
    Properties(#[from] PropertyConflict),
    /// A property would commit offsets the hub has not accepted.
    #[error(
        "[sources.kafka.properties] {key} = {value:?} would commit records before the hub accepted them"
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
    fn a_section_with_topics_takes_the_defaults_and_keeps_the_guarantee() {
        let c: KafkaSourceConfig =
            toml::from_str("brokers = \"k:9092\"\ntopics = [\"orders\"]").unwrap();
        assert_eq!(c, KafkaSourceConfig::for_topics("k:9092", &["orders"]));
        let rd = c.client_config().unwrap();
        assert_eq!(rd.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(rd.get("enable.auto.commit"), Some("true"));
        assert_eq!(rd.get("group.id"), Some("tidegate"));
        assert_eq!(rd.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(c.subscription(), vec!["orders"]);
    }

    #[test]
    fn a_regex_is_subscribed_with_its_caret() {
        let c: KafkaSourceConfig = toml::from_str("topic_regex = \"logs-.*\"").unwrap();
        c.check().unwrap();
        assert_eq!(c.subscription(), vec!["^logs-.*"]);
    }

    #[test]
    fn unusable_sections_are_refused_naming_the_key() {
        let err = |t: &str| {
            toml::from_str::<KafkaSourceConfig>(t)
                .unwrap()
                .client_config()
                .unwrap_err()
                .to_string()
        };
        assert!(err("").contains("names no topic"));
        assert!(err("topics = [\"a b\"]").contains("\"a b\""));
        assert!(err("topics = [\"a\"]\ntopic_prefix = \"x..\"").contains("topic_prefix"));
        assert!(err("topics = [\"a\"]\nmax_in_flight = 0").contains("max_in_flight"));
        assert!(err("topics = [\"a\"]\ngroup_id = \"\"").contains("group_id"));
        let e = err("topics = [\"a\"]\n[properties]\n\"enable.auto.offset.store\" = true");
        assert!(e.contains("enable.auto.offset.store"), "{e}");
        assert!(toml::from_str::<KafkaSourceConfig>("start = \"middle\"").is_err());
        assert!(toml::from_str::<KafkaSourceConfig>("topicz = []").is_err());
    }

    #[test]
    fn a_property_the_source_sets_itself_is_refused_under_any_of_its_names() {
        let names = [
            ("bootstrap.servers", "brokers"),
            ("metadata.broker.list", "brokers"),
            ("group.id", "group_id"),
            ("auto.offset.reset", "start"),
            ("auto.commit.interval.ms", "commit_interval_ms"),
            ("queued.max.messages.kbytes", "queue_max_kbytes"),
        ];
        for (property, key) in names {
            let mut c = KafkaSourceConfig::for_topics("k:9092", &["t"]);
            c.properties
                .insert(property.into(), PropertyValue::Text("x".into()));
            let e = c.check().unwrap_err();
            assert!(
                matches!(&e, SourceConfigError::Properties(PropertyConflict::SetBySection { property: p, key: k, .. })
                    if p == property && *k == key),
                "{property}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("[sources.kafka.properties] {property:?}"))
                    && text.contains(&format!("[sources.kafka] {key}; set {key} instead")),
                "{text}"
            );
            // Refused the same way every time, and before librdkafka sees it.
            for _ in 0..10 {
                assert_eq!(super::super::validate_source(&c).unwrap_err(), text);
            }
        }
        let e = toml::from_str::<KafkaSourceConfig>(
            "topics = [\"a\"]\n[properties]\n\"metadata.broker.list\" = \"b:1\"",
        )
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "[sources.kafka.properties] \"metadata.broker.list\" (another name for \
             bootstrap.servers): the source sets it from [sources.kafka] brokers; set brokers \
             instead"
        );
    }

    #[test]
    fn the_guarantees_are_checked_with_the_section_and_other_properties_pass() {
        let mut c = KafkaSourceConfig::for_topics("k:9092", &["t"]);
        c.properties
            .insert("enable.auto.commit".into(), PropertyValue::Bool(false));
        assert!(matches!(
            c.check(),
            Err(SourceConfigError::WeakensGuarantee { .. })
        ));
        let mut c = KafkaSourceConfig::for_topics("k:9092", &["t"]);
        c.properties
            .insert("enable.auto.commit".into(), PropertyValue::Bool(true));
        c.properties
            .insert("session.timeout.ms".into(), PropertyValue::Integer(10_000));
        c.properties.insert(
            "max.partition.fetch.bytes".into(),
            PropertyValue::Integer(1 << 20),
        );
        let rd = c.client_config().unwrap();
        assert_eq!(rd.get("session.timeout.ms"), Some("10000"));
        c.properties.insert(
            "fetch.message.max.bytes".into(),
            PropertyValue::Integer(1 << 21),
        );
        assert!(matches!(
            c.check(),
            Err(SourceConfigError::Properties(
                PropertyConflict::SameProperty { .. }
            ))
        ));
    }
}
