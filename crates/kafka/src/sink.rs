//! The Kafka [`Sink`]: routed hub messages become Kafka records, and the
//! broker's acknowledgement becomes the hub's.
//!
//! One record per message ([`crate::record`]). Producing is idempotent with
//! `acks=all`; the message and its [`AckToken`] ride along as the delivery
//! opaque and the delivery report completes the token
//! ([`crate::delivery`]). A producer that dies of a fatal error is replaced
//! and its unacknowledged records produced again ([`crate::recovery`]).
//!
//! Backpressure: at most `queue_max_messages` messages are handed over and
//! unacknowledged at once. When that many are out, `send` waits for a
//! delivery report to free room; a source waiting in `send` is a source that
//! stops reading. If librdkafka itself reports its queue full (its byte
//! bound), `send` retries after a short sleep instead of failing; if the
//! producer is dead, `send` waits for its replacement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;
use thiserror::Error;
use tidegate_hub::{
    AckToken, HubMetrics, SharedMessage, Sink, SinkCounters, SinkFuture, SinkHealth,
};

use crate::delivery::{Acknowledger, SINK_NAME};
use crate::health::BrokerLink;
use crate::producer::{ProducerFactory, ProducerSlot};
use crate::record::{InFlight, Record, RecordShape};
use crate::recovery::{Recovery, RecoveryInbox};
use crate::room::Room;
use crate::{ConfigError, KafkaConfig, KafkaMetrics};

/// How long `send` sleeps before retrying when librdkafka's own queue is full.
pub const QUEUE_FULL_RETRY: Duration = Duration::from_millis(2);

/// How long one step of [`Sink::flush`] lets librdkafka flush before
/// checking whether every handed-over message is settled.
const FLUSH_STEP: Duration = Duration::from_millis(100);

/// `/readyz` reason: librdkafka has no broker connection.
pub const NOT_READY_NO_BROKER: &str = "no broker connection";

/// `/readyz` reason: `queue_max_messages` messages are unacknowledged.
pub const NOT_READY_QUEUE_FULL: &str = "queue full";

/// Why the sink could not be created.
#[derive(Debug, Error)]
pub enum KafkaSinkError {
    /// The `[sinks.kafka]` section is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused the configuration.
    #[error("creating the Kafka producer: {0}")]
    Producer(#[from] KafkaError),
    /// The recovery thread could not be started.
    #[error("starting the Kafka recovery thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Produces routed messages to Kafka.
pub struct KafkaSink {
    slot: Arc<ProducerSlot>,
    shape: Arc<RecordShape>,
    room: Arc<Room>,
    link: Arc<BrokerLink>,
    inbox: Arc<RecoveryInbox>,
    metrics: KafkaMetrics,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("shape", &self.shape)
            .field("generation", &self.slot.number())
            .field("in_flight", &self.room.taken())
            .finish_non_exhaustive()
    }
}

/// What one attempt to hand a record over came to.
enum Handed<'a> {
    /// librdkafka has it.
    Taken,
    /// Its queue is full; try again shortly.
    QueueFull(Record<'a>),
    /// Generation `number` is dead; try again with the next one.
    ProducerDead(Record<'a>, u64),
    /// Refused for good.
    Refused(Record<'a>, KafkaError),
}

impl KafkaSink {
    /// Creates the producer (it connects in the background; an unreachable
    /// broker makes sends wait, not this call fail) and the recovery thread.
    pub fn new(config: KafkaConfig) -> Result<Self, KafkaSinkError> {
        let shape = RecordShape::new(&config);
        Self::with_shape(config, shape)
    }

    /// [`KafkaSink::new`] with records shaped by `shape` instead of
    /// `config`'s topic mapping (the cluster backbone's producer).
    pub fn with_shape(config: KafkaConfig, shape: RecordShape) -> Result<Self, KafkaSinkError> {
        let client_config = config.client_config()?;
        let metrics = KafkaMetrics::default();
        let room = Arc::new(Room::new(
            config.queue_max_messages,
            metrics.in_flight.clone(),
        ));
        let acks = Acknowledger {
            room: room.clone(),
            metrics: metrics.clone(),
        };
        let link = Arc::new(BrokerLink::default());
        let inbox = Arc::new(RecoveryInbox::default());
        let factory =
            ProducerFactory::new(client_config, acks.clone(), link.clone(), inbox.clone());
        let slot = Arc::new(ProducerSlot::new(factory.create(0)?));
        let shape = Arc::new(shape);
        Recovery {
            slot: slot.clone(),
            factory,
            inbox: inbox.clone(),
            shape: shape.clone(),
            acks,
            last_recreation: None,
            stall_timeout: (config.stall_timeout_ms > 0)
                .then(|| Duration::from_millis(config.stall_timeout_ms.into())),
            message_timeout: Duration::from_millis(config.message_timeout_ms.into()),
            installed: Instant::now(),
        }
        .spawn()?;
        Ok(KafkaSink {
            slot,
            shape,
            room,
            link,
            inbox,
            metrics,
        })
    }

    /// Registers the sink's counters (`tidegate_kafka_*`) with the hub.
    pub fn register_metrics(&self, metrics: &HubMetrics) {
        self.metrics.register(metrics);
    }

    /// The sink's counters (tests and benchmarks read them).
    pub fn metrics(&self) -> &KafkaMetrics {
        &self.metrics
    }

    /// Messages handed over and not yet acknowledged.
    pub fn in_flight(&self) -> i64 {
        self.room.taken()
    }

    /// How many times the producer was replaced (0 until a fatal error).
    pub fn producer_generation(&self) -> u64 {
        self.slot.number()
    }

    async fn produce(&self, msg: SharedMessage, ack: AckToken) {
        // The place is held by a guard until librdkafka took the record: a
        // send cancelled while waiting gives it back.
        let place = match self.room.try_take() {
            Some(p) => p,
            None => {
                self.metrics.queue_full_waits.inc();
                self.room.take().await
            }
        };
        let address = self.shape.address(&msg);
        let in_flight = Box::new(InFlight {
            msg: msg.clone(),
            token: ack,
            handed_over: Instant::now(),
        });
        let mut record = address.record(&msg, in_flight);
        loop {
            match self.hand_over(record) {
                Handed::Taken => {
                    // From here the delivery report gives the place back.
                    place.hand_over();
                    self.metrics.produced.inc();
                    return;
                }
                Handed::QueueFull(back) => {
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_RETRY).await;
                }
                Handed::ProducerDead(back, number) => {
                    record = back;
                    self.inbox.report_fatal(number);
                    self.slot.replaced_after(number).await;
                }
                Handed::Refused(back, e) => {
                    // `refused` first: the stall watch subtracts it from
                    // the reports, and in between it sees one fewer (no
                    // progress) rather than one more.
                    self.metrics.refused.inc();
                    self.metrics.failed.inc();
                    back.delivery_opaque
                        .token
                        .complete(Err(tidegate_hub::DeliveryError::Failed {
                            sink: SINK_NAME.to_owned(),
                            reason: e.to_string(),
                        }));
                    // Never handed over: the guard gives the place back.
                    drop(place);
                    return;
                }
            }
        }
    }

    /// One attempt to give `record` to the current producer.
    fn hand_over<'a>(&self, record: Record<'a>) -> Handed<'a> {
        let current = self.slot.load();
        match current.producer.send(record) {
            Ok(()) => Handed::Taken,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                Handed::QueueFull(back)
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), back)) => {
                Handed::ProducerDead(back, current.number)
            }
            Err((e, back)) => Handed::Refused(back, e),
        }
    }

    /// Raises a fatal error in the current producer, as librdkafka does when
    /// an idempotent producer loses its guarantee (here: out-of-order
    /// sequence), through librdkafka's own test hook. For tests of the
    /// recovery path; returns false if the producer already had one.
    #[cfg(feature = "test-broker")]
    pub fn inject_fatal_error(&self, reason: &str) -> bool {
        use rdkafka::bindings::{rd_kafka_resp_err_t, rd_kafka_test_fatal_error};
        let reason =
            std::ffi::CString::new(reason.replace('\0', " ")).expect("no NUL left in the reason");
        let current = self.slot.load();
        // SAFETY: `native_ptr` is the rd_kafka_t of a producer kept alive by
        // `current` for the whole call. `rd_kafka_test_fatal_error` may be
        // called from any thread (it takes the client's own lock), only reads
        // `reason` while formatting it into its own buffer during the call,
        // and does what librdkafka itself does on a real fatal error.
        let err = unsafe {
            rd_kafka_test_fatal_error(
                current.producer.client().native_ptr(),
                rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        err == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    }
}

impl Drop for KafkaSink {
    fn drop(&mut self) {
        // Ends the recovery thread; the producer's own drop (when the last
        // holder lets go) purges what it holds and fails those tokens.
        self.inbox.stop();
    }
}

impl Sink for KafkaSink {
    fn name(&self) -> &str {
        SINK_NAME
    }

    fn send(&self, msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        Box::pin(self.produce(msg, ack))
    }

    fn is_full(&self) -> bool {
        self.room.is_full()
    }

    fn health(&self) -> SinkHealth {
        if !self.link.is_up() {
            SinkHealth::NotReady(NOT_READY_NO_BROKER.to_owned())
        } else if self.room.is_full() {
            SinkHealth::NotReady(NOT_READY_QUEUE_FULL.to_owned())
        } else {
            SinkHealth::Ready
        }
    }

    fn counters(&self) -> SinkCounters {
        SinkCounters {
            queued: self.metrics.in_flight.get().max(0) as u64,
            acked: self.metrics.delivered.get(),
            failed: self.metrics.failed.get(),
        }
    }

    /// Resolves once every handed-over message is settled (acknowledged,
    /// failed, or — after a fatal error — produced again and acknowledged),
    /// or `timeout` passed.
    fn flush(&self, timeout: Duration) -> SinkFuture<'_> {
        let (slot, room) = (self.slot.clone(), self.room.clone());
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            let settled = tokio::task::spawn_blocking(move || loop {
                let step = deadline.saturating_duration_since(Instant::now());
                let flushed = slot.load_full().producer.flush(step.min(FLUSH_STEP));
                if room.taken() == 0 {
                    return true;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                if flushed.is_ok() {
                    // Empty producer, records waiting for a resend.
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
            .await;
            match settled {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    unsettled = self.room.taken(),
                    "kafka flush did not finish in time"
                ),
                Err(e) => tracing::warn!(error = %e, "kafka flush task failed"),
            }
        })
    }
}
