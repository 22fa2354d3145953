//! A backbone record ↔ hub messages: the record layout every node writes
//! to the cluster's Kafka topic and reads back, with no Kafka client in it
//! (the Kafka crate hands over the parts of each record it consumes).
//!
//! What a node writes is a *bundle record*: headers [`HEADER_NODE`] (the
//! publishing node) and [`HEADER_BUNDLE`], value = up to 1,024 hub messages
//! in the bundle layout ([`bundle`]), partition chosen from the hub topic
//! ([`bundle::partition_of`]), so one hub topic keeps one partition and one
//! order. [`decode`] also reads the older one-message record (key = hub
//! topic, value = payload, headers = node, message key, attributes) — but a
//! node of an earlier version cannot read bundles, so a cluster is upgraded
//! by stopping every older node first (docs/cluster.md). Either way it adds
//! where each message sits in Kafka ([`ATTR_PARTITION`], [`ATTR_POSITION`]:
//! the event's position in the cluster's history, record offset and index
//! folded into one number).
//!
//! Pure and hostile-input safe: anyone who can write to the backbone topic
//! can write anything, so topics are checked, headers and bundles are
//! bounded, and nothing panics (fuzzed: `backbone_record`).

use bytes::Bytes;
use thiserror::Error;

use super::bundle::{self, BundleError};
use super::{ATTR_PARTITION, ATTR_POSITION};
use crate::message::now_ns;
use crate::Message;

/// Whether an attribute a publisher set would pass for the backbone's own
/// position: dropped on reading, so a message cannot lie about where it
/// sits in the history (sessions and recoveries count on it).
fn is_position_attribute(name: &str) -> bool {
    name == ATTR_PARTITION || name == ATTR_POSITION
}

/// Header naming the node that published the record.
pub const HEADER_NODE: &str = "tidegate.node";
/// Header carrying the message's own key (one-message records).
pub const HEADER_KEY: &str = "tidegate.key";
/// Header marking a bundle record (value `1`, the layout version).
pub const HEADER_BUNDLE: &str = "tidegate.bundle";
/// Headers carried per record as attributes (the Kafka source carries as
/// many of a record's headers); the backbone's own two come on top.
pub const MAX_HEADERS: usize = 64;

/// The parts of a backbone record [`decode`] reads.
#[derive(Debug, Clone, Copy)]
pub struct RecordParts<'a, H> {
    /// Record key: the hub topic (one-message records).
    pub key: Option<&'a [u8]>,
    /// Value: the payload, or the bundle.
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
    /// Its messages in order, each to fan out or refused (its neighbours
    /// are delivered all the same).
    pub messages: Vec<Result<Message, DecodeError>>,
    /// The node that published it, when the record says.
    pub node: Option<String>,
}

/// Why a backbone record, or one message of it, cannot be delivered.
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
    /// A bundle record whose bundle does not read.
    #[error("backbone bundle: {0}")]
    Bundle(#[from] BundleError),
}

/// Decodes one backbone record.
pub fn decode<'a, H>(parts: RecordParts<'a, H>) -> Result<Decoded, DecodeError>
where
    H: IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
{
    let mut node = None;
    let mut message_key = None;
    let mut attributes = Vec::new();
    let mut is_bundle = false;
    for (i, (name, value)) in parts.headers.into_iter().enumerate() {
        if i >= MAX_HEADERS + 2 {
            return Err(DecodeError::TooManyHeaders);
        }
        let value = value.unwrap_or_default();
        // The backbone's own headers come first; a later one of the same
        // name is an attribute like any other.
        if i == 0 && name == HEADER_NODE {
            node = Some(String::from_utf8_lossy(value).into_owned());
        } else if i <= 1 && name == HEADER_BUNDLE && attributes.is_empty() {
            is_bundle = true;
        } else if i <= 1 && name == HEADER_KEY && message_key.is_none() && attributes.is_empty() {
            message_key = Some(Bytes::copy_from_slice(value));
        } else if !is_position_attribute(name) {
            attributes.push((name.to_owned(), String::from_utf8_lossy(value).into_owned()));
        }
    }
    let partition = parts.partition.to_string();
    let at = |index: usize| {
        bundle::position(parts.offset, index)
            .map(|p| p.to_string())
            .unwrap_or_default()
    };
    if is_bundle {
        // One copy of the whole value; every payload is a slice of it.
        let value = Bytes::copy_from_slice(parts.value.unwrap_or_default());
        let messages = bundle::decode(&value)?
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let mut m = m.map_err(|e| DecodeError::BadTopic(e.0))?;
                m.attributes.retain(|(n, _)| !is_position_attribute(n));
                m.attributes
                    .push((ATTR_PARTITION.to_owned(), partition.clone()));
                m.attributes.push((ATTR_POSITION.to_owned(), at(i)));
                Ok(m)
            })
            .collect();
        return Ok(Decoded { messages, node });
    }
    let key = parts.key.ok_or(DecodeError::NoTopic)?;
    let topic = bundle::check_topic(key).map_err(|e| DecodeError::BadTopic(e.0))?;
    attributes.push((ATTR_PARTITION.to_owned(), partition));
    attributes.push((ATTR_POSITION.to_owned(), at(0)));
    let timestamp_ns = match parts.timestamp_ms {
        Some(ms) if ms > 0 => (ms as u64).saturating_mul(1_000_000),
        _ => now_ns(),
    };
    Ok(Decoded {
        messages: vec![Ok(Message {
            topic,
            key: message_key,
            timestamp_ns,
            attributes,
            payload: parts.value.map(Bytes::copy_from_slice).unwrap_or_default(),
            encoded: Default::default(),
        })],
        node,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_one_message_record_of_an_older_node_still_reads() {
        let headers: Vec<(&str, Option<&[u8]>)> = vec![
            (HEADER_NODE, Some(&b"old"[..])),
            (HEADER_KEY, Some(&b"k"[..])),
            ("a", Some(&b"1"[..])),
        ];
        let d = decode(RecordParts {
            key: Some(&b"news.a"[..]),
            value: Some(&b"{}"[..]),
            timestamp_ms: Some(1_700_000_000_123),
            headers,
            partition: 2,
            offset: 9,
        })
        .unwrap();
        assert_eq!(d.node.as_deref(), Some("old"));
        let m = d.messages[0].as_ref().unwrap();
        assert_eq!((m.topic.as_str(), &m.payload[..]), ("news.a", &b"{}"[..]));
        assert_eq!(m.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(m.timestamp_ns, 1_700_000_000_123_000_000);
        assert_eq!(
            m.attributes,
            vec![
                ("a".to_owned(), "1".to_owned()),
                (ATTR_PARTITION.to_owned(), "2".to_owned()),
                (ATTR_POSITION.to_owned(), (9 * 1024).to_string()),
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
        let garbage = decode(RecordParts {
            key: None,
            value: Some(&[1u8, 5, 0][..]),
            timestamp_ms: None,
            headers: vec![(HEADER_BUNDLE, Some(&b"1"[..]))],
            partition: 0,
            offset: 0,
        });
        assert!(
            matches!(garbage, Err(DecodeError::Bundle(_))),
            "{garbage:?}"
        );
    }

    proptest! {
        /// Whatever a stranger writes to the backbone topic, decoding
        /// returns (messages or an error) and never panics.
        #[test]
        fn arbitrary_records_never_panic(
            key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
            ts in any::<Option<i64>>(),
            bundle_header in any::<bool>(),
            headers in proptest::collection::vec(
                ("\\PC{0,16}", proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16))),
                0..80,
            ),
            partition in any::<i32>(),
            offset in any::<i64>(),
        ) {
            let mut hs: Vec<(&str, Option<&[u8]>)> = Vec::new();
            if bundle_header {
                hs.push((HEADER_BUNDLE, Some(&b"1"[..])));
            }
            hs.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())));
            let r = decode(RecordParts {
                key: key.as_deref(),
                value: value.as_deref(),
                timestamp_ms: ts,
                headers: hs,
                partition,
                offset,
            });
            if let Ok(d) = r {
                for m in d.messages.iter().flatten() {
                    prop_assert!(crate::topic::validate_topic(&m.topic).is_ok());
                    prop_assert!(m.attributes.len() <= MAX_HEADERS + 4, "{}", m.attributes.len());
                }
            }
        }
    }
}
