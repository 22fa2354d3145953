//! Reading back what reached a topic, record by record, with rdkafka's
//! consumer (no consumer group: every partition assigned from the start).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use rdkafka::{Offset, TopicPartitionList};

fn consumer(bootstrap: &str) -> Result<BaseConsumer, KafkaError> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "tidegate-test-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("allow.auto.create.topics", "false")
        .create()
}

fn partitions(c: &BaseConsumer, topic: &str, timeout: Duration) -> Result<Vec<i32>, KafkaError> {
    let md = c.fetch_metadata(Some(topic), timeout)?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect())
}

/// Reads `topic` from the beginning of every partition until at least
/// `min_records` arrived or `timeout` passed, and returns what arrived (in
/// order within each partition). Blocking; call it from `spawn_blocking` in
/// async tests.
pub fn read_topic(
    bootstrap: &str,
    topic: &str,
    min_records: usize,
    timeout: Duration,
) -> Result<Vec<OwnedMessage>, KafkaError> {
    let c = consumer(bootstrap)?;
    let deadline = Instant::now() + timeout;
    let parts = loop {
        let p = partitions(&c, topic, Duration::from_secs(5))?;
        if !p.is_empty() || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut tpl = TopicPartitionList::new();
    for p in parts {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let mut out = Vec::with_capacity(min_records);
    while out.len() < min_records && Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push(m.detach()),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(out)
}

/// Records in `topic` right now (sum over partitions of high − low
/// watermark; exact for a non-transactional topic).
pub fn record_count(bootstrap: &str, topic: &str) -> Result<u64, KafkaError> {
    let c = consumer(bootstrap)?;
    let mut n = 0u64;
    for p in partitions(&c, topic, Duration::from_secs(5))? {
        let (lo, hi) = c.fetch_watermarks(topic, p, Duration::from_secs(5))?;
        n += u64::try_from(hi - lo).unwrap_or(0);
    }
    Ok(n)
}
