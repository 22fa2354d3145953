//! The producer context: librdkafka's delivery reports complete the hub's
//! acknowledgement tokens, and return the room the message held.
//!
//! Runs on rdkafka's polling thread, never on the async runtime; it only
//! touches atomics and the tokens.

use std::sync::Arc;

use crate::room::Room;
use crate::KafkaMetrics;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tidegate_hub::{AckToken, DeliveryError};

/// The sink name used in acknowledgement errors.
pub const SINK_NAME: &str = "kafka";

/// Completes tokens from delivery reports.
pub struct DeliveryContext {
    /// The bound on handed-over messages; each report gives a place back.
    pub(crate) room: Arc<Room>,
    /// Shared counters.
    pub(crate) metrics: KafkaMetrics,
}

impl DeliveryContext {
    /// Reports the fate of one handed-over message and frees its room.
    pub(crate) fn settle(&self, token: AckToken, result: Result<(), String>) {
        self.room.give_back();
        match result {
            Ok(()) => {
                self.metrics.delivered.inc();
                token.succeed();
            }
            Err(reason) => {
                self.metrics.failed.inc();
                token.complete(Err(DeliveryError::Failed {
                    sink: SINK_NAME.to_owned(),
                    reason,
                }));
            }
        }
    }
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", "{fac} {message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", "{fac} {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "{fac} {message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{fac} {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Transient (broker down, all brokers down): librdkafka keeps retrying
        // and the messages wait; only their own timeout fails them.
        tracing::warn!(target: "librdkafka", %error, reason, "kafka producer error");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<AckToken>;

    fn delivery(&self, result: &DeliveryResult<'_>, token: Box<AckToken>) {
        let outcome = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.to_string()),
        };
        self.settle(*token, outcome);
    }
}
