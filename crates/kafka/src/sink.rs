//! The Kafka [`Sink`]: routed hub messages become Kafka records, and the
//! broker's acknowledgement becomes the hub's.
//!
//! One record per message: topic from [`TopicMapper`], key from the message
//! key, timestamp from the event time (ns → ms), attributes as headers,
//! payload as the value. Producing is idempotent with `acks=all`; the
//! message's [`AckToken`] rides along as the delivery opaque and is completed
//! by the delivery report ([`DeliveryContext`]).
//!
//! Backpressure: at most `queue_max_messages` messages are handed over and
//! unacknowledged at once. When that many are out, `send` waits for a
//! delivery report to free room; a source waiting in `send` is a source that
//! stops reading. If librdkafka itself reports its queue full (its byte
//! bound), `send` retries after a short sleep instead of failing.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use thiserror::Error;
use tidegate_hub::{AckToken, HubMetrics, SharedMessage, Sink, SinkFuture};

use crate::delivery::{DeliveryContext, SINK_NAME};
use crate::room::Room;
use crate::{ConfigError, KafkaConfig, KafkaMetrics, TopicMapper};

/// How long `send` sleeps before retrying when librdkafka's own queue is full.
pub const QUEUE_FULL_RETRY: Duration = Duration::from_millis(2);

/// Why the sink could not be created.
#[derive(Debug, Error)]
pub enum KafkaSinkError {
    /// The `[sinks.kafka]` section is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused the configuration.
    #[error("creating the Kafka producer: {0}")]
    Producer(#[from] KafkaError),
}

/// Produces routed messages to Kafka.
pub struct KafkaSink {
    producer: Arc<ThreadedProducer<DeliveryContext>>,
    topics: TopicMapper,
    room: Arc<Room>,
    metrics: KafkaMetrics,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topics", &self.topics)
            .field("in_flight", &self.room.taken())
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Creates the producer (it connects in the background; an unreachable
    /// broker makes sends wait, not this call fail).
    pub fn new(config: KafkaConfig) -> Result<Self, KafkaSinkError> {
        let client_config = config.client_config()?;
        let metrics = KafkaMetrics::default();
        let room = Arc::new(Room::new(
            config.queue_max_messages,
            metrics.in_flight.clone(),
        ));
        let context = DeliveryContext {
            room: room.clone(),
            metrics: metrics.clone(),
        };
        let producer = ThreadedProducer::from_config_and_context(&client_config, context)?;
        Ok(KafkaSink {
            producer: Arc::new(producer),
            topics: TopicMapper::new(&config),
            room,
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
        let topic = self.topics.map(&msg.topic);
        let mut record =
            BaseRecord::<[u8], [u8], Box<AckToken>>::with_opaque_to(&topic, Box::new(ack))
                .payload(&msg.payload[..]);
        if let Some(key) = &msg.key {
            record = record.key(&key[..]);
        }
        if msg.timestamp_ns != 0 {
            record =
                record.timestamp(i64::try_from(msg.timestamp_ns / 1_000_000).unwrap_or(i64::MAX));
        }
        if !msg.attributes.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(msg.attributes.len());
            for (name, value) in &msg.attributes {
                headers = headers.insert(Header {
                    key: name,
                    value: Some(value.as_bytes()),
                });
            }
            record = record.headers(headers);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => {
                    // From here the delivery report gives the place back.
                    place.hand_over();
                    self.metrics.produced.inc();
                    return;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_RETRY).await;
                }
                Err((e, back)) => {
                    // Never handed over: the guard gives the place back.
                    drop(place);
                    return fail(*back.delivery_opaque, &self.metrics, e.to_string());
                }
            }
        }
    }
}

fn fail(ack: AckToken, metrics: &KafkaMetrics, reason: String) {
    metrics.failed.inc();
    ack.complete(Err(tidegate_hub::DeliveryError::Failed {
        sink: SINK_NAME.to_owned(),
        reason,
    }));
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

    fn flush(&self, timeout: Duration) -> SinkFuture<'_> {
        let producer = self.producer.clone();
        Box::pin(async move {
            let flushed = tokio::task::spawn_blocking(move || producer.flush(timeout)).await;
            match flushed {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "kafka flush did not finish"),
                Err(e) => tracing::warn!(error = %e, "kafka flush task failed"),
            }
        })
    }
}
