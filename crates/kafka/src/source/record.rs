//! Kafka record → hub message: hub topic = prefix + Kafka topic, record key
//! → key, record timestamp (ms) → event time (ns), headers → attributes,
//! value → payload. Where the record came from travels as the first three
//! attributes ([`ATTR_TOPIC`], [`ATTR_PARTITION`], [`ATTR_OFFSET`]).
//!
//! Pure: no consumer, no clock except for a record without a timestamp.
//! Bounded: at most [`MAX_HEADERS`] headers become attributes (the rest are
//! dropped and counted); a header value that is not UTF-8 is carried with
//! its invalid bytes replaced (attributes are text).

use bytes::Bytes;
use rdkafka::message::{Headers, Message as KafkaMessage};
use tidegate_hub::message::now_ns;
use tidegate_hub::Message;

/// Attribute naming the Kafka topic a message was consumed from.
pub const ATTR_TOPIC: &str = "kafka.topic";
/// Attribute carrying the record's partition.
pub const ATTR_PARTITION: &str = "kafka.partition";
/// Attribute carrying the record's offset.
pub const ATTR_OFFSET: &str = "kafka.offset";

/// Headers carried per record; more are dropped (attributes are meant to be
/// a handful, and each costs two allocations per delivery). The same bound
/// as a backbone record's.
pub const MAX_HEADERS: usize = tidegate_hub::backbone::record::MAX_HEADERS;

/// A record turned into a hub message.
#[derive(Debug)]
pub struct Converted {
    /// The message to publish.
    pub message: Message,
    /// Headers dropped over [`MAX_HEADERS`].
    pub dropped_headers: usize,
}

/// The hub message for `record`, published on `prefix` + its Kafka topic.
pub fn to_message<M: KafkaMessage>(prefix: &str, record: &M) -> Converted {
    let mut topic = String::with_capacity(prefix.len() + record.topic().len());
    topic.push_str(prefix);
    topic.push_str(record.topic());
    let timestamp_ns = match record.timestamp().to_millis() {
        Some(ms) if ms > 0 => (ms as u64).saturating_mul(1_000_000),
        _ => now_ns(),
    };
    let headers = record.headers();
    let header_count = headers.map_or(0, |h| h.count());
    let carried = header_count.min(MAX_HEADERS);
    let mut attributes = Vec::with_capacity(3 + carried);
    attributes.push((ATTR_TOPIC.to_owned(), record.topic().to_owned()));
    attributes.push((ATTR_PARTITION.to_owned(), record.partition().to_string()));
    attributes.push((ATTR_OFFSET.to_owned(), record.offset().to_string()));
    if let Some(h) = headers {
        for header in h.iter().take(carried) {
            let value = header
                .value
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            attributes.push((header.key.to_owned(), value));
        }
    }
    Converted {
        message: Message {
            topic,
            key: record.key().map(Bytes::copy_from_slice),
            timestamp_ns,
            attributes,
            payload: record
                .payload()
                .map(Bytes::copy_from_slice)
                .unwrap_or_default(),
            encoded: Default::default(),
        },
        dropped_headers: header_count - carried,
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    use super::*;

    fn record(headers: Option<OwnedHeaders>) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"{\"n\":1}".to_vec()),
            Some(b"k1".to_vec()),
            "orders".into(),
            Timestamp::CreateTime(1_700_000_000_123),
            3,
            42,
            headers,
        )
    }

    #[test]
    fn every_part_of_the_record_reaches_the_message() {
        let h = OwnedHeaders::new()
            .insert(Header {
                key: "trace",
                value: Some("abc"),
            })
            .insert(Header {
                key: "bin",
                value: Some(&[0xff_u8, b'x'][..]),
            })
            .insert(Header::<&str> {
                key: "none",
                value: None,
            });
        let c = to_message("kafka.", &record(Some(h)));
        let m = c.message;
        assert_eq!(m.topic, "kafka.orders");
        assert_eq!(m.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(&m.payload[..], b"{\"n\":1}");
        assert_eq!(m.timestamp_ns, 1_700_000_000_123_000_000);
        assert_eq!(m.attribute(ATTR_TOPIC), Some("orders"));
        assert_eq!(m.attribute(ATTR_PARTITION), Some("3"));
        assert_eq!(m.attribute(ATTR_OFFSET), Some("42"));
        assert_eq!(m.attribute("trace"), Some("abc"));
        assert_eq!(m.attribute("bin"), Some("\u{fffd}x"));
        assert_eq!(m.attribute("none"), Some(""));
        assert_eq!(c.dropped_headers, 0);
    }

    #[test]
    fn headers_past_the_bound_are_dropped_and_counted() {
        let mut h = OwnedHeaders::new();
        for i in 0..(MAX_HEADERS + 5) {
            h = h.insert(Header {
                key: &format!("h{i}"),
                value: Some("v"),
            });
        }
        let c = to_message("", &record(Some(h)));
        assert_eq!(c.message.topic, "orders");
        assert_eq!(c.message.attributes.len(), 3 + MAX_HEADERS);
        assert_eq!(c.dropped_headers, 5);
    }

    #[test]
    fn a_record_without_value_or_timestamp_still_converts() {
        let r = OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, None);
        let m = to_message("p.", &r).message;
        assert!(m.payload.is_empty() && m.key.is_none());
        assert!(m.timestamp_ns > 0);
    }
}
