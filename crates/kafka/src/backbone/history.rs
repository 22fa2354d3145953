//! The backbone as history: where each partition ends now, and the
//! messages from a client's last positions to there — what a client that
//! lost its node recovers on another one.
//!
//! Positions count messages, not records: a record holds a bundle of
//! messages, and a position is the record's offset and the message's index
//! in it ([`bundle::position`]), so a client that got half a bundle
//! resumes at its middle.
//!
//! Blocking (librdkafka's metadata and fetch calls); the backbone runs them
//! on the blocking pool. Bounded: a replay reads at most `max` messages and
//! fails, saying so, rather than read more; a position older than what the
//! topic still keeps fails too (the retention took it).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use tidegate_hub::backbone::bundle;
use tidegate_hub::backbone::{Positions, Replay, SESSIONS_TOPIC};
use tidegate_hub::Pattern;

use super::config::ClusterConfig;
use super::decode_kafka_record;

/// How long one metadata or fetch request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a whole replay may take.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

fn consumer(config: &ClusterConfig) -> Result<BaseConsumer, String> {
    config
        .client_config()
        .set("group.id", "tidegate-replay")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| format!("backbone reader: {e}"))
}

/// The ids of the backbone's partitions (none while the topic has none).
fn partition_ids(c: &BaseConsumer, config: &ClusterConfig) -> Result<Vec<i32>, String> {
    let md = c
        .fetch_metadata(Some(&config.topic), REQUEST_TIMEOUT)
        .map_err(|e| format!("backbone metadata: {e}"))?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.name() == config.topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect())
}

/// (low, high) watermarks of every partition of the backbone.
fn watermarks(c: &BaseConsumer, config: &ClusterConfig) -> Result<Vec<(i32, i64, i64)>, String> {
    partition_ids(c, config)?
        .into_iter()
        .map(|p| {
            c.fetch_watermarks(&config.topic, p, REQUEST_TIMEOUT)
                .map(|(lo, hi)| (p, lo, hi))
                .map_err(|e| format!("backbone partition {p}: {e}"))
        })
        .collect()
}

/// The position of the start of record `offset`.
fn record_start(offset: i64) -> i64 {
    bundle::position(offset, 0).unwrap_or(i64::MAX)
}

/// The end of every backbone partition now, as positions.
pub fn positions(config: &ClusterConfig) -> Result<Positions, String> {
    let c = consumer(config)?;
    Ok(watermarks(&c, config)?
        .into_iter()
        .map(|(p, _, hi)| (p, record_start(hi)))
        .collect())
}

/// How many partitions the backbone topic has (0 while it has none).
pub fn partition_count(config: &ClusterConfig) -> Result<usize, String> {
    Ok(partition_ids(&consumer(config)?, config)?.len())
}

/// The messages of `from`'s partitions from their position to their end
/// now, decoded, those matching `patterns` kept.
pub fn replay(
    config: &ClusterConfig,
    from: &Positions,
    patterns: &[Pattern],
    max: usize,
) -> Result<Replay, String> {
    let c = consumer(config)?;
    let marks = watermarks(&c, config)?;
    let ends: Positions = marks
        .iter()
        .map(|(p, _, hi)| (*p, record_start(*hi)))
        .collect();
    let mut tpl = TopicPartitionList::new();
    let mut to_read = 0i64;
    // Per partition being read: the record offset to stop at, and the
    // first position wanted.
    let mut open: std::collections::BTreeMap<i32, (i64, i64)> = Default::default();
    for (p, lo, hi) in &marks {
        let Some(&start) = from.get(p) else { continue };
        let (offset, _) = bundle::split_position(start);
        if offset >= *hi {
            continue;
        }
        if offset < *lo {
            return Err(format!(
                "partition {p}: offset {offset} is no longer kept (oldest {lo})"
            ));
        }
        // The first record may be partly received already: only the
        // records after it are sure to hold a message each.
        to_read += hi - offset - 1;
        open.insert(*p, (*hi, start));
        tpl.add_partition_offset(&config.topic, *p, Offset::Offset(offset))
            .map_err(|e| e.to_string())?;
    }
    // Every record holds at least one message: more records than `max`
    // means more messages too (the exact bound is checked while reading).
    if to_read > max as i64 {
        return Err(format!(
            "{to_read} records to read, over the limit of {max} messages"
        ));
    }
    let mut messages = Vec::new();
    let mut read = 0usize;
    if open.is_empty() {
        return Ok(Replay { messages, ends });
    }
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + REPLAY_TIMEOUT;
    while !open.is_empty() {
        if Instant::now() > deadline {
            return Err("the backbone did not answer in time".to_owned());
        }
        let Some(r) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let r = r.map_err(|e| format!("reading the backbone: {e}"))?;
        let (p, o) = (r.partition(), r.offset());
        let Some(&(end, first)) = open.get(&p) else {
            continue;
        };
        if o >= end {
            open.remove(&p);
            continue;
        }
        if o + 1 >= end {
            open.remove(&p);
        }
        let Ok(d) = decode_kafka_record(&r) else {
            continue;
        };
        for (i, m) in d.messages.into_iter().enumerate() {
            if bundle::position(o, i).is_none_or(|at| at < first) {
                continue;
            }
            read += 1;
            if read > max {
                return Err(format!("over the limit of {max} messages to read"));
            }
            if let Ok(m) = m {
                // The nodes' own session announcements are for no client.
                if m.topic != SESSIONS_TOPIC && patterns.iter().any(|pat| pat.matches(&m.topic)) {
                    messages.push(m);
                }
            }
        }
    }
    Ok(Replay { messages, ends })
}
