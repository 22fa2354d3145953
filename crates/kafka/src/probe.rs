//! Checking a `[sinks.kafka]` section before serving with it:
//! [`validate`] without a broker (what `tidegate config --check` and
//! start-up run), [`probe`] against the cluster (`tidegate config --probe`).
//!
//! Neither produces anything. `probe` reads the metadata of every topic —
//! never of named ones, which a broker with `auto.create.topics.enable`
//! would create on the spot.

use std::fmt;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer as _};
use rdkafka::ClientConfig;

use crate::{KafkaConfig, TopicMapper};

/// Checks everything about `config` that can be checked without a broker:
/// the sink's own keys, then every property as librdkafka reads it, by
/// creating a producer and dropping it at once (it never waits for a
/// connection). The error names the key: `[sinks.kafka] linger_ms = …`,
/// `[sinks.kafka.properties] "name" …`.
pub fn validate(config: &KafkaConfig) -> Result<(), String> {
    producer(config).map(drop)
}

/// A producer for `config`, errors explained in the config's own words.
fn producer(config: &KafkaConfig) -> Result<BaseProducer, String> {
    let client_config = config.client_config().map_err(|e| e.to_string())?;
    create(config, &client_config)
}

fn create(config: &KafkaConfig, client_config: &ClientConfig) -> Result<BaseProducer, String> {
    client_config
        .create::<BaseProducer>()
        .map_err(|e| explain(config, &e))
}

/// librdkafka's refusal, pointing at the key that caused it.
fn explain(config: &KafkaConfig, e: &KafkaError) -> String {
    match e {
        KafkaError::ClientConfig(_, description, property, value) => format!(
            "{} = {value:?}: {description}",
            config.key_of_property(property)
        ),
        KafkaError::ClientCreation(reason) => {
            format!("[sinks.kafka] librdkafka refused the configuration: {reason}")
        }
        other => format!("[sinks.kafka] {other}"),
    }
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// Every broker of the cluster, as the metadata lists them.
    pub brokers: Vec<ProbeBroker>,
    /// The configured topics: the default `topic`, then the `topics`
    /// allow-list.
    pub topics: Vec<ProbeTopic>,
    /// True when `dynamic_topics` lets the template name topics not listed
    /// here (which then cannot be checked in advance).
    pub dynamic_topics: bool,
}

/// One broker in the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeBroker {
    /// Its node id.
    pub id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its advertised port.
    pub port: i32,
}

/// One configured topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTopic {
    /// The Kafka topic.
    pub name: String,
    /// Whether the cluster has it (without it, the first record creates it
    /// only if the broker auto-creates topics).
    pub exists: bool,
    /// Its partition count (0 when missing).
    pub partitions: usize,
}

impl ProbeReport {
    /// The configured topics the cluster does not have.
    pub fn missing_topics(&self) -> Vec<&str> {
        self.topics
            .iter()
            .filter(|t| !t.exists)
            .map(|t| t.name.as_str())
            .collect()
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} broker(s):", self.brokers.len())?;
        for b in &self.brokers {
            write!(f, " {}@{}:{}", b.id, b.host, b.port)?;
        }
        for t in &self.topics {
            if t.exists {
                write!(
                    f,
                    "\ntopic {}: exists, {} partition(s)",
                    t.name, t.partitions
                )?;
            } else {
                write!(f, "\ntopic {}: missing", t.name)?;
            }
        }
        if self.dynamic_topics {
            write!(
                f,
                "\ndynamic_topics: topics derived by the template are not checked"
            )?;
        }
        Ok(())
    }
}

/// Connects to `config`'s cluster, reads its metadata (waiting at most
/// `timeout`), and reports the brokers and whether each configured topic
/// exists. An error when no broker answered in time, or the section is
/// unusable ([`validate`]'s errors).
pub async fn probe(config: &KafkaConfig, timeout: Duration) -> Result<ProbeReport, String> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || probe_blocking(&config, timeout))
        .await
        .map_err(|e| format!("[sinks.kafka] probe task failed: {e}"))?
}

fn probe_blocking(config: &KafkaConfig, timeout: Duration) -> Result<ProbeReport, String> {
    let producer = producer(config)?;
    let metadata = producer
        .client()
        .fetch_metadata(None, timeout)
        .map_err(|e| {
            format!(
                "[sinks.kafka] brokers = {:?}: no metadata within {timeout:?}: {e}",
                config.brokers
            )
        })?;
    let brokers = metadata
        .brokers()
        .iter()
        .map(|b| ProbeBroker {
            id: b.id(),
            host: b.host().to_owned(),
            port: b.port(),
        })
        .collect();
    let topics = TopicMapper::new(config)
        .known_topics()
        .into_iter()
        .map(|name| {
            let found = metadata
                .topics()
                .iter()
                .find(|t| t.name() == name && t.error().is_none());
            ProbeTopic {
                name: name.to_owned(),
                exists: found.is_some(),
                partitions: found.map_or(0, |t| t.partitions().len()),
            }
        })
        .collect();
    Ok(ProbeReport {
        brokers,
        topics,
        dynamic_topics: config.topic_template.is_some() && config.dynamic_topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PropertyValue;

    /// A port nothing listens on: validation must not need a broker.
    fn dead_brokers() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    }

    #[test]
    fn a_good_section_validates_without_a_broker() {
        let mut c = KafkaConfig::for_brokers(dead_brokers());
        c.properties
            .insert("socket.keepalive.enable".into(), PropertyValue::Bool(true));
        let started = std::time::Instant::now();
        validate(&c).unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn an_unknown_or_out_of_range_property_is_named_by_its_key() {
        let mut c = KafkaConfig::for_brokers(dead_brokers());
        c.properties
            .insert("no.such.property".into(), PropertyValue::Integer(1));
        let e = validate(&c).unwrap_err();
        assert!(
            e.starts_with("[sinks.kafka.properties] \"no.such.property\""),
            "{e}"
        );
        let c = KafkaConfig {
            linger_ms: 2_000_000,
            // Off, so librdkafka's own range check is what answers.
            stall_timeout_ms: 0,
            ..KafkaConfig::for_brokers(dead_brokers())
        };
        let e = validate(&c).unwrap_err();
        assert!(
            e.starts_with("[sinks.kafka] linger_ms = \"2000000\""),
            "{e}"
        );
        let mut c = KafkaConfig::for_brokers(dead_brokers());
        c.properties.insert(
            "security.protocol".into(),
            PropertyValue::Text("carrier-pigeon".into()),
        );
        let e = validate(&c).unwrap_err();
        assert!(e.contains("\"security.protocol\""), "{e}");
    }

    #[test]
    fn the_sinks_own_checks_come_first() {
        let c = KafkaConfig {
            topic_template: Some("$nope".into()),
            ..KafkaConfig::default()
        };
        let e = validate(&c).unwrap_err();
        assert!(e.contains("topic_template"), "{e}");
    }

    #[tokio::test]
    async fn probing_an_unreachable_cluster_fails_in_time_and_says_where() {
        let brokers = dead_brokers();
        let started = std::time::Instant::now();
        let e = probe(
            &KafkaConfig::for_brokers(brokers.clone()),
            Duration::from_millis(1500),
        )
        .await
        .unwrap_err();
        assert!(e.contains(&brokers), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
