//! `[sinks.kafka]` configuration section.

use serde::{Deserialize, Serialize};

/// `[sinks.kafka]`: where and how to produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: String,
}
