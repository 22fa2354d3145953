//! The producer context: librdkafka's delivery reports complete the hub's
//! acknowledgement tokens and give back the room their messages held — or,
//! when the producer died of a fatal error, hand the messages to the
//! recovery thread to be produced again. Its error and statistics callbacks
//! feed the broker-link flag behind `/readyz` and report fatal errors.
//!
//! Runs on rdkafka's polling thread, never on the async runtime; it only
//! touches atomics, the tokens and (after a fatal error) the recovery inbox.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tidegate_hub::{AckToken, DeliveryError};

use crate::health::BrokerLink;
use crate::record::InFlight;
use crate::recovery::RecoveryInbox;
use crate::room::Room;
use crate::KafkaMetrics;

/// The sink name used in acknowledgement errors.
pub const SINK_NAME: &str = "kafka";

/// Completes tokens and frees their room: the last step of every message,
/// whether its delivery report or the recovery thread decides its fate.
#[derive(Debug, Clone)]
pub struct Acknowledger {
    /// The bound on handed-over messages; each settled one gives a place back.
    pub(crate) room: Arc<Room>,
    /// Shared counters.
    pub(crate) metrics: KafkaMetrics,
}

impl Acknowledger {
    /// Reports the fate of one handed-over message and frees its room. The
    /// token completes first, so an empty room means every token is done.
    pub fn settle(&self, token: AckToken, result: Result<(), String>) {
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
        self.room.give_back();
    }
}

/// The context of one producer generation.
pub struct DeliveryContext {
    /// Which producer this is (0 for the first, +1 per recreation).
    pub(crate) generation: u64,
    /// Set once this producer reported a fatal error: from then on every
    /// failed delivery is produced again rather than failed.
    pub(crate) fatal: AtomicBool,
    /// Completes tokens.
    pub(crate) acks: Acknowledger,
    /// Whether a broker connection is up.
    pub(crate) link: Arc<BrokerLink>,
    /// Where messages of a dead producer go.
    pub(crate) inbox: Arc<RecoveryInbox>,
}

impl DeliveryContext {
    /// True when a delivery failed because the producer died, not because
    /// of the message: a fatal error, or the purge librdkafka does after one
    /// (and rdkafka on drop).
    fn producer_died(&self, error: &KafkaError) -> bool {
        self.fatal.load(Ordering::Acquire)
            || matches!(
                error.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::Fatal
                        | RDKafkaErrorCode::PurgeQueue
                        | RDKafkaErrorCode::PurgeInflight
                )
            )
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
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::Fatal) => {
                // The producer is unusable (e.g. idempotence lost: fenced,
                // out-of-order sequence). The recovery thread replaces it.
                tracing::error!(
                    target: "librdkafka",
                    %error, reason, generation = self.generation,
                    "fatal Kafka producer error; recreating the producer"
                );
                self.fatal.store(true, Ordering::Release);
                self.inbox.report_fatal(self.generation);
            }
            Some(RDKafkaErrorCode::AllBrokersDown) => {
                self.link.all_down();
                tracing::warn!(target: "librdkafka", %error, reason, "no Kafka broker reachable");
            }
            // Transient (one broker down, a timeout): librdkafka keeps
            // retrying and the messages wait; only their own timeout fails them.
            _ => tracing::warn!(target: "librdkafka", %error, reason, "kafka producer error"),
        }
    }

    fn stats_raw(&self, statistics: &[u8]) {
        self.link.statistics(statistics);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<InFlight>;

    fn delivery(&self, result: &DeliveryResult<'_>, in_flight: Box<InFlight>) {
        match result {
            Ok(_) => {
                self.link.delivered();
                self.acks.settle(in_flight.token, Ok(()));
            }
            Err((e, _)) if self.producer_died(e) => {
                // Keeps its room: it is still handed over, to the next producer.
                if let Err(in_flight) = self.inbox.resend(in_flight) {
                    self.acks
                        .settle(in_flight.token, Err(format!("{e} (the sink stopped)")));
                }
            }
            Err((e, _)) => self.acks.settle(in_flight.token, Err(e.to_string())),
        }
    }
}
