//! Writing test input into the broker and reading a group's progress back:
//! topics with a chosen partition count, records produced and flushed, a
//! consumer group's committed offsets, and each partition's end.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// One record to produce.
#[derive(Debug, Clone, Default)]
pub struct TestRecord {
    /// Partition; `None` lets the key choose.
    pub partition: Option<i32>,
    /// Record key.
    pub key: Option<Vec<u8>>,
    /// Value.
    pub value: Vec<u8>,
    /// Timestamp, ms.
    pub timestamp_ms: Option<i64>,
    /// Headers.
    pub headers: Vec<(String, String)>,
}

/// Creates `topic` with `partitions` partitions (an existing one is left
/// as it is). Blocking.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the admin request");
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let results = rt.block_on(admin.create_topics([&new], &opts))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    Ok(())
}

/// A producer for tests (acks=all, idempotent).
pub fn producer(bootstrap: &str) -> Result<ThreadedProducer<DefaultProducerContext>, KafkaError> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
}

/// Produces `record` through `producer`, retrying while its queue is full.
pub fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    record: &TestRecord,
) -> Result<(), KafkaError> {
    loop {
        let mut r = BaseRecord::<[u8], [u8]>::to(topic).payload(&record.value[..]);
        if let Some(k) = &record.key {
            r = r.key(&k[..]);
        }
        if let Some(p) = record.partition {
            r = r.partition(p);
        }
        if let Some(ts) = record.timestamp_ms {
            r = r.timestamp(ts);
        }
        if !record.headers.is_empty() {
            let mut h = OwnedHeaders::new();
            for (k, v) in &record.headers {
                h = h.insert(Header {
                    key: k,
                    value: Some(v.as_bytes()),
                });
            }
            r = r.headers(h);
        }
        match producer.send(r) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Produces every record and waits until the broker has them. Blocking.
pub fn produce(bootstrap: &str, topic: &str, records: &[TestRecord]) -> Result<(), KafkaError> {
    let p = producer(bootstrap)?;
    for r in records {
        send(&p, topic, r)?;
    }
    p.flush(Duration::from_secs(30))
}

/// The offsets `group` committed for each partition of `topic` (`None`
/// where it committed nothing), and each partition's end (high
/// watermark), by partition. Blocking.
pub fn group_progress(
    bootstrap: &str,
    group: &str,
    topic: &str,
) -> Result<Vec<(i32, Option<i64>, i64)>, KafkaError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let parts: Vec<i32> = md
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut tpl = TopicPartitionList::new();
    for p in &parts {
        tpl.add_partition(topic, *p);
    }
    let committed = c.committed_offsets(tpl, Duration::from_secs(10))?;
    let mut out = Vec::new();
    for p in parts {
        let (_, hi) = c.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        let offset = committed
            .find_partition(topic, p)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        out.push((p, offset, hi));
    }
    Ok(out)
}
