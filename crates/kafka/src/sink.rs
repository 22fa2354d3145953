//! The Kafka [`Sink`]. (Skeleton.)

use tidegate_hub::{AckToken, DeliveryError, SharedMessage, Sink, SinkFuture};

use crate::KafkaConfig;

/// Produces routed messages to Kafka.
pub struct KafkaSink {
    config: KafkaConfig,
}

impl KafkaSink {
    /// Creates the producer.
    pub fn new(config: KafkaConfig) -> Result<Self, String> {
        Ok(KafkaSink { config })
    }
}

impl Sink for KafkaSink {
    fn name(&self) -> &str {
        "kafka"
    }

    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        let _ = &self.config;
        ack.complete(Err(DeliveryError::Failed {
            sink: "kafka".into(),
            reason: "not implemented".into(),
        }));
        Box::pin(async {})
    }
}
