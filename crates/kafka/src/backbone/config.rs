//! `[cluster]`: Tidegate nodes sharing topics through one Kafka topic.
//!
//! ```toml
//! [cluster]
//! backbone = "kafka"
//! brokers = "k1:9092,k2:9092"
//! topic = "tidegate-backbone"     # one Kafka topic, keyed by hub topic
//! topics = [">"]                  # cluster-wide hub topics ($sys.> stays local)
//! node = "web-1"                  # default: <hostname>-<http port>
//! partitions = 1                  # when the topic is created
//! replication_factor = -1         # when the topic is created; -1: the broker's default
//! linger_ms = 0
//! bundle_linger_ms = 2            # several messages per backbone record under load
//! queue_max_messages = 100000
//! [cluster.properties]            # librdkafka, for the producer and the reader
//! "security.protocol" = "ssl"
//! ```
//!
//! `[cluster.properties]` may not name, under any of librdkafka's names
//! ([`crate::properties`]), a property the backbone sets itself: one of its
//! clients would otherwise get either value, changing from run to run.
//! See [`ClusterConfig::OWN_PROPERTIES`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tidegate_hub::Pattern;

use rdkafka::ClientConfig;

use crate::properties::{self, Conflict, PropertyConflict, Section};
use crate::{KafkaConfig, PropertyValue};

/// The distributed engine nodes share topics through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackboneKind {
    /// Apache Kafka (the only one).
    #[default]
    Kafka,
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `"kafka"`.
    pub backbone: BackboneKind,
    /// Bootstrap servers. Default [`ClusterConfig::DEFAULT_BROKERS`].
    pub brokers: String,
    /// The backbone Kafka topic. Default [`ClusterConfig::DEFAULT_TOPIC`].
    pub topic: String,
    /// Hub topic patterns that are cluster-wide. `$sys.` topics are always
    /// local, whatever the patterns. Default `[">"]`.
    pub topics: Vec<String>,
    /// This node's name in the cluster (`tidegate cluster status`, the
    /// `tidegate.node` header, the reader's consumer group
    /// `tidegate-node-<node>`). Unique per node. Default: empty, meaning
    /// `<hostname>-<[http] port>`.
    pub node: String,
    /// Partitions of the backbone topic when a node creates it. Default
    /// [`ClusterConfig::DEFAULT_PARTITIONS`].
    pub partitions: i32,
    /// Replication factor when a node creates the topic; -1 takes the
    /// broker's `default.replication.factor`. Default -1.
    pub replication_factor: i32,
    /// Producer `linger.ms`: cross-node latency is at least this. Default
    /// [`ClusterConfig::DEFAULT_LINGER_MS`].
    pub linger_ms: u32,
    /// Under a steady stream, how often at most the bundler hands a bundle
    /// to the producer, ms ([`super::bundler`]); a message that comes
    /// after a quiet spell goes at once. 0: whenever the writer is free.
    /// Default [`ClusterConfig::DEFAULT_BUNDLE_LINGER_MS`].
    pub bundle_linger_ms: u32,
    /// Bounds what the backbone holds before the broker acknowledges it:
    /// this many messages wait to be bundled (at least 1,024, at most
    /// 16,384), and one bundle per 256 of them (16 at least) may be in the
    /// producer unacknowledged, each of up to 1,024 messages or ~256 KiB;
    /// at the bound, publishes on cluster-wide topics wait. Default
    /// [`ClusterConfig::DEFAULT_QUEUE_MAX_MESSAGES`].
    pub queue_max_messages: usize,
    /// What the reader may fetch ahead, KiB per partition
    /// (`queued.max.messages.kbytes`). Default
    /// [`ClusterConfig::DEFAULT_READ_AHEAD_KBYTES`].
    pub read_ahead_kbytes: u32,
    /// librdkafka properties for the producer, the reader and the
    /// heartbeat. One the backbone sets itself
    /// ([`ClusterConfig::OWN_PROPERTIES`]), under any of its names, is
    /// refused; the producer's guarantees ([`KafkaConfig::GUARANTEES`]) may
    /// only be repeated. Default: none.
    pub properties: BTreeMap<String, PropertyValue>,
}

impl ClusterConfig {
    /// Default bootstrap servers.
    pub const DEFAULT_BROKERS: &'static str = "127.0.0.1:9092";
    /// Default backbone topic.
    pub const DEFAULT_TOPIC: &'static str = "tidegate-backbone";
    /// Default partition count of a created backbone topic: one. Order is
    /// per hub topic, so partitions only spread load between brokers, and
    /// librdkafka batches (and lingers) per partition: at a given rate, N
    /// partitions make N times smaller batches and N times the produce
    /// requests. Measured at the seed's push load on one broker: 4
    /// partitions cost 1.37–1.43× single-node CPU, 1 partition 1.15–1.30×
    /// (BENCHMARKS.md, cluster). With several brokers, one per broker.
    pub const DEFAULT_PARTITIONS: i32 = 1;
    /// Default `linger.ms`: 0. The bundler already gathers messages under
    /// load (`bundle_linger_ms`), so a record waiting again in librdkafka
    /// only adds latency: at 50,000 publishes/s with fan-out 1, linger 0
    /// with a 2 ms bundle linger measured +9.2/+9.6 ms p99 over single-node
    /// at 1.24–1.25× its CPU, and at the seed's push load +6.5 ms at 1.26×;
    /// linger 2 with a 1 ms bundle linger +10.4/+14.3 ms and +9.7 ms
    /// (BENCHMARKS.md, cluster).
    pub const DEFAULT_LINGER_MS: u32 = 0;
    /// Longest `linger_ms`: librdkafka's limit for `linger.ms`.
    pub const MAX_LINGER_MS: u32 = 900_000;

    /// Default `bundle_linger_ms`: 2 (see [`Self::DEFAULT_LINGER_MS`]).
    pub const DEFAULT_BUNDLE_LINGER_MS: u32 = 2;
    /// Default `queue_max_messages`.
    pub const DEFAULT_QUEUE_MAX_MESSAGES: usize = 100_000;
    /// Default reader prefetch per partition, 16 MiB.
    pub const DEFAULT_READ_AHEAD_KBYTES: u32 = 16_384;
    /// The librdkafka properties the backbone's clients set themselves,
    /// each with the `[cluster]` key it comes from (`None`: fixed): a
    /// `[cluster.properties]` entry naming one is refused. The producer's
    /// are the sink's ([`KafkaConfig::OWN_PROPERTIES`]); the reader, the
    /// heartbeat, the replay and `tidegate cluster status` set the group
    /// and how offsets are kept.
    pub const OWN_PROPERTIES: [(&'static str, Option<&'static str>); 12] = [
        ("bootstrap.servers", Some("brokers")),
        ("linger.ms", Some("linger_ms")),
        ("queue.buffering.max.messages", Some("queue_max_messages")),
        ("queued.max.messages.kbytes", Some("read_ahead_kbytes")),
        ("group.id", Some("node")),
        ("batch.size", None),
        ("compression.codec", None),
        ("queue.buffering.max.kbytes", None),
        ("message.timeout.ms", None),
        ("enable.auto.commit", None),
        ("enable.auto.offset.store", None),
        ("enable.partition.eof", None),
    ];

    /// A cluster on `brokers`, everything else default.
    pub fn for_brokers(brokers: impl Into<String>) -> Self {
        ClusterConfig {
            brokers: brokers.into(),
            ..ClusterConfig::default()
        }
    }

    /// The cluster-wide patterns, parsed.
    pub fn patterns(&self) -> Result<Vec<Pattern>, ClusterConfigError> {
        self.topics
            .iter()
            .map(|t| {
                Pattern::parse(t).map_err(|e| ClusterConfigError::BadPattern {
                    pattern: t.clone(),
                    reason: e.to_string(),
                })
            })
            .collect()
    }

    /// Checks the keys the cluster interprets itself.
    pub fn check(&self) -> Result<(), ClusterConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ClusterConfigError::NoBrokers);
        }
        crate::topic::check_kafka_topic(&self.topic).map_err(|reason| {
            ClusterConfigError::BadTopic {
                topic: self.topic.clone(),
                reason,
            }
        })?;
        if self.topics.is_empty() {
            return Err(ClusterConfigError::NoPatterns);
        }
        self.patterns()?;
        if self.partitions < 1 {
            return Err(ClusterConfigError::Partitions(self.partitions));
        }
        if self.replication_factor == 0 || self.replication_factor < -1 {
            return Err(ClusterConfigError::Replication(self.replication_factor));
        }
        if self
            .node
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ClusterConfigError::BadNode(self.node.clone()));
        }
        if self.queue_max_messages == 0 {
            return Err(ClusterConfigError::ZeroQueue);
        }
        if self.linger_ms > Self::MAX_LINGER_MS {
            return Err(ClusterConfigError::LingerTooLong(self.linger_ms));
        }
        let section = Section {
            name: "cluster",
            who: "the backbone",
        };
        properties::check(
            section,
            &self.properties,
            &Self::OWN_PROPERTIES,
            &KafkaConfig::GUARANTEES,
            crate::config::acks_same,
        )
        .map_err(|c| match c {
            Conflict::Guarantee { property, value } => ClusterConfigError::WeakensGuarantee {
                key: property,
                value,
            },
            Conflict::Property(p) => ClusterConfigError::Properties(p),
        })
    }

    /// The librdkafka configuration every backbone client starts from:
    /// `[cluster.properties]`, the quick re-bootstrap
    /// ([`crate::rebootstrap`]) unless those set it, and the brokers.
    pub fn client_config(&self) -> ClientConfig {
        let mut cc = ClientConfig::new();
        for (k, v) in &self.properties {
            cc.set(k, v.to_string());
        }
        crate::rebootstrap::rebootstrap_soon(&mut cc).set("bootstrap.servers", &self.brokers);
        cc
    }

    /// Messages the bundler holds before publishes wait.
    pub fn pending_max_messages(&self) -> usize {
        self.queue_max_messages.min(16_384)
    }

    /// The producer side as a `[sinks.kafka]`-like section (the sink's
    /// guarantees: idempotent, `acks=all`); its queue bound counts
    /// bundles. It passes [`KafkaConfig::check`] whenever [`Self::check`]
    /// passes: the stall watch's quiet time grows with `linger_ms`, which
    /// `[cluster]` has no key of its own for, so a long linger never
    /// surfaces as an error about `[sinks.kafka]`.
    pub fn producer_config(&self) -> KafkaConfig {
        KafkaConfig {
            topic: self.topic.clone(),
            linger_ms: self.linger_ms,
            stall_timeout_ms: KafkaConfig::DEFAULT_STALL_TIMEOUT_MS
                .max(self.linger_ms.saturating_add(1_000)),
            queue_max_messages: (self.queue_max_messages / 256).max(16),
            properties: self.properties.clone(),
            ..KafkaConfig::for_brokers(self.brokers.clone())
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            backbone: BackboneKind::Kafka,
            brokers: Self::DEFAULT_BROKERS.to_owned(),
            topic: Self::DEFAULT_TOPIC.to_owned(),
            topics: vec![">".to_owned()],
            node: String::new(),
            partitions: Self::DEFAULT_PARTITIONS,
            replication_factor: -1,
            linger_ms: Self::DEFAULT_LINGER_MS,
            bundle_linger_ms: Self::DEFAULT_BUNDLE_LINGER_MS,
            queue_max_messages: Self::DEFAULT_QUEUE_MAX_MESSAGES,
            read_ahead_kbytes: Self::DEFAULT_READ_AHEAD_KBYTES,
            properties: BTreeMap::new(),
        }
    }
}

/// A `[cluster]` section that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClusterConfigError {
    /// `brokers` is empty.
    #[error("[cluster] brokers is empty")]
    NoBrokers,
    /// `topic` is not a legal Kafka topic.
    #[error("[cluster] topic {topic:?} is not a valid Kafka topic: {reason}")]
    BadTopic {
        /// The topic.
        topic: String,
        /// Why.
        reason: &'static str,
    },
    /// `topics = []`.
    #[error("[cluster] topics is empty: name the cluster-wide hub topics (\">\" for all)")]
    NoPatterns,
    /// A pattern of `topics` does not parse.
    #[error("[cluster] topics: {pattern:?}: {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
    /// `partitions < 1`.
    #[error("[cluster] partitions = {0}: must be at least 1")]
    Partitions(i32),
    /// `replication_factor` neither -1 nor positive.
    #[error("[cluster] replication_factor = {0}: must be -1 (the broker's default) or at least 1")]
    Replication(i32),
    /// `node` with whitespace or control characters.
    #[error("[cluster] node {0:?} contains whitespace or control characters")]
    BadNode(String),
    /// `linger_ms` over librdkafka's own maximum.
    #[error("[cluster] linger_ms = {0}: at most 900000 (librdkafka's linger.ms limit)")]
    LingerTooLong(u32),
    /// `queue_max_messages = 0`.
    #[error("[cluster] queue_max_messages must be at least 1")]
    ZeroQueue,
    /// A property names one the backbone sets itself, or one property twice.
    #[error(transparent)]
    Properties(#[from] PropertyConflict),
    /// A property would weaken the producer's idempotence or `acks=all`.
    #[error(
        "[cluster.properties] {key} = {value:?} would weaken the backbone producer's \
         delivery guarantee"
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
    fn the_defaults_make_every_topic_cluster_wide() {
        let c: ClusterConfig = toml::from_str("backbone = \"kafka\"").unwrap();
        c.check().unwrap();
        assert_eq!(c, ClusterConfig::default());
        let p = c.patterns().unwrap();
        assert!(p[0].matches("a.b") && !p[0].matches("$sys.stats"));
        let k = c.producer_config();
        assert_eq!(k.topic, ClusterConfig::DEFAULT_TOPIC);
        assert_eq!(k.linger_ms, 0);
        k.client_config().unwrap();
        k.check().unwrap();
    }

    #[test]
    fn a_long_linger_gives_the_producer_a_longer_stall_timeout_not_an_error() {
        let c = ClusterConfig {
            linger_ms: 45_000,
            ..ClusterConfig::default()
        };
        c.check().unwrap();
        let k = c.producer_config();
        assert_eq!(k.stall_timeout_ms, 46_000);
        k.check().unwrap();
        let longest = ClusterConfig {
            linger_ms: ClusterConfig::MAX_LINGER_MS,
            ..ClusterConfig::default()
        };
        longest.check().unwrap();
        longest.producer_config().check().unwrap();
        let too_long = ClusterConfig {
            linger_ms: ClusterConfig::MAX_LINGER_MS + 1,
            ..ClusterConfig::default()
        };
        assert_eq!(
            too_long.check(),
            Err(ClusterConfigError::LingerTooLong(900_001))
        );
    }

    #[test]
    fn unusable_sections_are_refused_naming_the_key() {
        let err = |t: &str| {
            toml::from_str::<ClusterConfig>(t)
                .unwrap()
                .check()
                .unwrap_err()
                .to_string()
        };
        assert!(err("topics = []").contains("topics is empty"));
        assert!(err("topics = [\"a.>.b\"]").contains("a.>.b"));
        assert!(err("topic = \"a b\"").contains("topic"));
        assert!(err("partitions = 0").contains("partitions"));
        assert!(err("replication_factor = 0").contains("replication_factor"));
        assert!(err("node = \"a b\"").contains("node"));
        assert!(toml::from_str::<ClusterConfig>("backbone = \"redis\"").is_err());
    }

    #[test]
    fn a_property_the_backbone_sets_itself_is_refused_under_any_of_its_names() {
        let keyed = [
            ("bootstrap.servers", "brokers"),
            ("metadata.broker.list", "brokers"),
            ("linger.ms", "linger_ms"),
            ("queue.buffering.max.ms", "linger_ms"),
            ("queue.buffering.max.messages", "queue_max_messages"),
            ("queued.max.messages.kbytes", "read_ahead_kbytes"),
            ("group.id", "node"),
        ];
        let check = |property: &str| {
            let mut c = ClusterConfig::default();
            c.properties
                .insert(property.into(), PropertyValue::Integer(1000));
            let e = c.check().unwrap_err();
            // The same refusal every time.
            for _ in 0..10 {
                assert_eq!(c.check().unwrap_err(), e);
            }
            e
        };
        for (property, key) in keyed {
            let e = check(property);
            assert!(
                matches!(&e, ClusterConfigError::Properties(PropertyConflict::SetBySection { property: p, key: k, .. })
                    if p == property && *k == key),
                "{property}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("[cluster.properties] {property:?}"))
                    && text.contains(&format!("[cluster] {key}; set {key} instead")),
                "{text}"
            );
        }
        let fixed = [
            "batch.size",
            "compression.codec",
            "compression.type",
            "queue.buffering.max.kbytes",
            "message.timeout.ms",
            "delivery.timeout.ms",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "enable.partition.eof",
        ];
        for property in fixed {
            let e = check(property);
            assert!(
                matches!(&e, ClusterConfigError::Properties(PropertyConflict::Fixed { property: p, .. }) if p == property),
                "{property}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("[cluster.properties] {property:?}"))
                    && text.ends_with("the backbone sets it itself; it cannot be changed"),
                "{text}"
            );
        }
        assert_eq!(
            check("delivery.timeout.ms").to_string(),
            "[cluster.properties] \"delivery.timeout.ms\" (another name for message.timeout.ms): \
             the backbone sets it itself; it cannot be changed"
        );
    }

    #[test]
    fn the_producers_guarantees_are_checked_with_the_section() {
        let with = |property: &str, value: PropertyValue| {
            let mut c = ClusterConfig::default();
            c.properties.insert(property.into(), value);
            c
        };
        for (property, value) in [
            ("acks", PropertyValue::Integer(1)),
            ("request.required.acks", PropertyValue::Integer(0)),
            ("enable.idempotence", PropertyValue::Bool(false)),
        ] {
            let e = with(property, value).check().unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("[cluster.properties] {property} = ")),
                "{e}"
            );
        }
        let c = with("acks", PropertyValue::Text("all".into()));
        c.check().unwrap();
        c.producer_config().client_config().unwrap();
        // What the backbone only defaults stays the user's to change.
        let c = with("fetch.message.max.bytes", PropertyValue::Integer(1 << 20));
        c.check().unwrap();
        let c = with("security.protocol", PropertyValue::Text("ssl".into()));
        c.check().unwrap();
    }
}
