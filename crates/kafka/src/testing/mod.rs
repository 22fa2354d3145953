//! Real-broker test support (feature `test-broker`): a single-node Apache
//! Kafka 3.9.1 broker in KRaft mode, started from Maven Central jars in a
//! temp dir on free ports, plus helpers to read back what reached a topic.
//!
//! Needs `java` (17+) and `mvn` on `PATH`; `scripts/setup/kafka.sh` installs
//! and pre-fetches everything. A missing peer is an error, never a skip.

mod broker;
mod consume;
mod hub;
mod maven;
mod produce;

pub use broker::{TestBroker, TestBrokerError};
pub use consume::{read_topic, record_count};
pub use hub::hub_routing_to;
pub use maven::{cache_dir, classpath, fluency_classpath, java_dir, kafka_classpath};
pub use produce::{create_topic, group_progress, produce, producer, send, TestRecord};
