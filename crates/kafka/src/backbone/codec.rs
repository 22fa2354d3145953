//! A backbone record ↔ a hub message.
//!
//! Encoding is the sink's record shape for the backbone
//! ([`crate::record::BackboneShape`]): record key = hub topic, value =
//! payload, timestamp = event time (ms), headers = [`HEADER_NODE`] (the
//! publishing node), [`HEADER_KEY`] (the message key, when it has one),
//! then the attributes. [`decode`] reverses it and adds where the record
//! sits in Kafka ([`ATTR_PARTITION`], [`ATTR_OFFSET`]: the event's
//! position in the cluster's history).
//!
//! Pure and hostile-input safe: anyone who can write to the backbone topic
//! can write anything, so the topic is checked, headers are bounded, and
//! nothing panics.

use bytes::Bytes;
use thiserror::Error;
use tidegate_hub::message::now_ns;
use tidegate_hub::topic::{is_system_topic, validate_topic};
use tidegate_hub::Message;

pub use tidegate_hub::backbone::{ATTR_OFFSET, ATTR_PARTITION};

/// Header naming the node that published the message.
pub const HEADER_NODE: &str = "tidegate.node";
/// Header carrying the message's own key.
pub const HEADER_KEY: &str = "tidegate.key";
/// Headers carried per record, as for the Kafka source.
pub const MAX_HEADERS: usize = crate::source::record::MAX_HEADERS;

/// The parts of a backbone record [`decode`] reads.
#[derive(Debug, Clone, Copy)]
pub struct RecordParts<'a, H> {
    /// Record key: the hub topic.
    pub key: Option<&'a [u8]>,
    /// Value: the payload.
    pub value: Option<&'a [u8]>,
    /// Timestamp, ms.
    pub timestamp_ms: Option<i64>,
    /// Headers, in order.
    pub headers: H,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
}

/// A decoded backbone record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The message to fan out.
    pub message: Message,
    /// The node that published it, when the record says.
    pub node: Option<String>,
}

/// Why a backbone record cannot be delivered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// No record key (no hub topic).
    #[error("backbone record without a key (the hub topic)")]
    NoTopic,
    /// The key is not a valid publishable hub topic.
    #[error("backbone record key is not a valid hub topic: {0}")]
    BadTopic(String),
    /// More headers than [`MAX_HEADERS`] plus the two of the backbone.
    #[error("backbone record has more than {MAX_HEADERS} headers")]
    TooManyHeaders,
}

/// Decodes one backbone record.
pub fn decode<'a, H>(parts: RecordParts<'a, H>) -> Result<Decoded, DecodeError>
where
    H: IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
{
    let key = parts.key.ok_or(DecodeError::NoTopic)?;
    let topic =
        std::str::from_utf8(key).map_err(|_| DecodeError::BadTopic("not UTF-8".to_owned()))?;
    if is_system_topic(topic) {
        return Err(DecodeError::BadTopic(format!("{topic:?} is local-only")));
    }
    validate_topic(topic).map_err(|e| DecodeError::BadTopic(e.to_string()))?;
    let mut node = None;
    let mut message_key = None;
    let mut attributes = Vec::new();
    for (i, (name, value)) in parts.headers.into_iter().enumerate() {
        if i >= MAX_HEADERS + 2 {
            return Err(DecodeError::TooManyHeaders);
        }
        let value = value.unwrap_or_default();
        // The backbone's own headers come first; a later one of the same
        // name is an attribute like any other.
        if i == 0 && name == HEADER_NODE {
            node = Some(String::from_utf8_lossy(value).into_owned());
        } else if i <= 1 && name == HEADER_KEY && message_key.is_none() && attributes.is_empty() {
            message_key = Some(Bytes::copy_from_slice(value));
        } else {
            attributes.push((name.to_owned(), String::from_utf8_lossy(value).into_owned()));
        }
    }
    attributes.push((ATTR_PARTITION.to_owned(), parts.partition.to_string()));
    attributes.push((ATTR_OFFSET.to_owned(), parts.offset.to_string()));
    let timestamp_ns = match parts.timestamp_ms {
        Some(ms) if ms > 0 => (ms as u64).saturating_mul(1_000_000),
        _ => now_ns(),
    };
    Ok(Decoded {
        message: Message {
            topic: topic.to_owned(),
            key: message_key,
            timestamp_ns,
            attributes,
            payload: parts.value.map(Bytes::copy_from_slice).unwrap_or_default(),
            encoded: Default::default(),
        },
        node,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rdkafka::message::{Headers, Message as _};

    use super::*;
    use crate::record::RecordShape;
    use crate::KafkaConfig;

    /// Encodes `msg` with the backbone's record shape and decodes it back,
    /// through librdkafka's own header and record types.
    fn round_trip(msg: &Message) -> Decoded {
        let shape = RecordShape::backbone(&KafkaConfig::default(), "node-a");
        let address = shape.address(msg);
        let in_flight = Box::new(crate::record::InFlight {
            msg: std::sync::Arc::new(msg.clone()),
            token: tidegate_hub::AckToken::detached(),
        });
        let record = address.record(msg, in_flight);
        assert_eq!(record.topic, KafkaConfig::DEFAULT_TOPIC);
        let headers = record.headers.clone().unwrap_or_default();
        let owned = rdkafka::message::OwnedMessage::new(
            record.payload.map(<[u8]>::to_vec),
            record.key.map(<[u8]>::to_vec),
            record.topic.to_owned(),
            rdkafka::Timestamp::CreateTime(record.timestamp.unwrap_or(0)),
            3,
            77,
            Some(headers),
        );
        let h = owned.headers();
        decode(RecordParts {
            key: owned.key(),
            value: owned.payload(),
            timestamp_ms: owned.timestamp().to_millis(),
            headers: h
                .into_iter()
                .flat_map(|h| h.iter().map(|x| (x.key, x.value))),
            partition: owned.partition(),
            offset: owned.offset(),
        })
        .unwrap()
    }

    #[test]
    fn a_message_survives_the_backbone() {
        let m = Message::new("chat.room1", "hi")
            .with_key(&b"\x00k"[..])
            .with_timestamp_ns(1_700_000_000_123_000_000)
            .with_attribute("a", "1")
            .with_attribute(HEADER_NODE, "spoof");
        let d = round_trip(&m);
        assert_eq!(d.node.as_deref(), Some("node-a"));
        let got = d.message;
        assert_eq!(got.topic, m.topic);
        assert_eq!(got.key, m.key);
        assert_eq!(got.payload, m.payload);
        assert_eq!(got.timestamp_ns, m.timestamp_ns);
        assert_eq!(
            got.attributes,
            vec![
                ("a".to_owned(), "1".to_owned()),
                (HEADER_NODE.to_owned(), "spoof".to_owned()),
                (ATTR_PARTITION.to_owned(), "3".to_owned()),
                (ATTR_OFFSET.to_owned(), "77".to_owned()),
            ]
        );
    }

    #[test]
    fn hostile_records_are_refused_not_delivered() {
        let parts = |key: Option<&'static [u8]>| RecordParts {
            key,
            value: None,
            timestamp_ms: None,
            headers: std::iter::empty(),
            partition: 0,
            offset: 0,
        };
        assert_eq!(decode(parts(None)), Err(DecodeError::NoTopic));
        for bad in [&b"a..b"[..], b"\xff", b"$sys.stats", b"a.*", b""] {
            assert!(decode(parts(Some(bad))).is_err(), "{bad:?}");
        }
        let many: Vec<(&str, Option<&[u8]>)> = (0..MAX_HEADERS + 3).map(|_| ("h", None)).collect();
        let r = decode(RecordParts {
            key: Some(&b"a"[..]),
            value: None,
            timestamp_ms: None,
            headers: many,
            partition: 0,
            offset: 0,
        });
        assert_eq!(r, Err(DecodeError::TooManyHeaders));
    }

    proptest! {
        /// Whatever a stranger writes to the backbone topic, decoding
        /// returns (a message or an error) and never panics.
        #[test]
        fn arbitrary_records_never_panic(
            key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
            ts in any::<Option<i64>>(),
            headers in proptest::collection::vec(
                ("\\PC{0,16}", proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16))),
                0..80,
            ),
            partition in any::<i32>(),
            offset in any::<i64>(),
        ) {
            let hs: Vec<(&str, Option<&[u8]>)> =
                headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
            let r = decode(RecordParts {
                key: key.as_deref(),
                value: value.as_deref(),
                timestamp_ms: ts,
                headers: hs,
                partition,
                offset,
            });
            if let Ok(d) = r {
                prop_assert!(tidegate_hub::topic::validate_topic(&d.message.topic).is_ok());
                prop_assert!(d.message.attributes.len() <= MAX_HEADERS + 4, "{}", d.message.attributes.len());
            }
        }

        #[test]
        fn any_valid_message_round_trips(
            topic in "[a-z]{1,8}(\\.[a-z0-9_-]{1,8}){0,4}",
            key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..32)),
            payload in proptest::collection::vec(any::<u8>(), 0..256),
            ms in 1i64..4_000_000_000_000,
            attrs in proptest::collection::vec(("[a-z.]{1,10}", "\\PC{0,10}"), 0..6),
        ) {
            let mut m = Message::new(topic, payload).with_timestamp_ns(ms as u64 * 1_000_000);
            if let Some(k) = key { m = m.with_key(k); }
            for (n, v) in &attrs { m = m.with_attribute(n.clone(), v.clone()); }
            let got = round_trip(&m).message;
            prop_assert_eq!(&got.topic, &m.topic);
            prop_assert_eq!(&got.key, &m.key);
            prop_assert_eq!(&got.payload, &m.payload);
            prop_assert_eq!(got.timestamp_ns, m.timestamp_ns);
            prop_assert_eq!(&got.attributes[..attrs.len()], &m.attributes[..]);
        }
    }
}
