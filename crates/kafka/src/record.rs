//! Hub message → Kafka record: topic from [`TopicMapper`], key from
//! `message_key_field` or the message key, timestamp from the event time
//! (ns → ms), attributes as headers, payload as the value.
//!
//! The record's delivery opaque is an [`InFlight`]: the message itself and
//! its acknowledgement token. Keeping the message (a shared pointer) is what
//! lets the sink produce it again through a new producer after a fatal
//! error, instead of failing the token.

use std::borrow::Cow;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use tidegate_hub::{AckToken, Message, SharedMessage};

use crate::backbone::bundler::ATTR_BUNDLE_PARTITION;
use crate::key::KeyField;
use crate::{KafkaConfig, TopicMapper};

/// One message handed to a producer and not yet acknowledged.
#[derive(Debug)]
pub struct InFlight {
    /// The message, kept to be produced again if its producer dies.
    pub msg: SharedMessage,
    /// Completed by the delivery report.
    pub token: AckToken,
    /// When the sink first handed it to a producer: a record produced
    /// again by a new producer is failed once `message_timeout_ms` has
    /// passed since then, as librdkafka would have failed it
    /// ([`crate::recovery`]).
    pub handed_over: std::time::Instant,
}

/// A Kafka record carrying an [`InFlight`] as its delivery opaque.
pub type Record<'a> = BaseRecord<'a, [u8], [u8], Box<InFlight>>;

/// How messages become records, as `[sinks.kafka]` says — or as the
/// cluster backbone needs them ([`RecordShape::backbone`]).
#[derive(Debug, Clone)]
pub struct RecordShape {
    topics: TopicMapper,
    key_field: Option<KeyField>,
    backbone: Option<BackboneShape>,
}

/// The backbone's record shape: the messages the backbone's producer is
/// handed are bundles ([`crate::backbone::bundler`]), each already bound
/// for one partition ([`ATTR_BUNDLE_PARTITION`]); the record carries the
/// bundle as its value and the publishing node and the bundle marker as
/// headers ([`crate::backbone::codec`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackboneShape {
    /// The backbone Kafka topic.
    pub topic: String,
    /// This node's name.
    pub node: String,
}

impl RecordShape {
    /// The shape a (checked) config section describes.
    pub fn new(config: &KafkaConfig) -> Self {
        RecordShape {
            topics: TopicMapper::new(config),
            key_field: config.message_key_field.as_deref().map(KeyField::new),
            backbone: None,
        }
    }

    /// The cluster backbone's shape (`config` gives the topic).
    pub fn backbone(config: &KafkaConfig, node: &str) -> Self {
        RecordShape {
            topics: TopicMapper::new(config),
            key_field: None,
            backbone: Some(BackboneShape {
                topic: config.topic.clone(),
                node: node.to_owned(),
            }),
        }
    }

    /// The topic mapping.
    pub fn topics(&self) -> &TopicMapper {
        &self.topics
    }

    /// Where `msg` goes: its Kafka topic and key, borrowed where possible.
    pub fn address<'a>(&'a self, msg: &'a Message) -> Address<'a> {
        if let Some(b) = &self.backbone {
            return Address {
                topic: Cow::Borrowed(&b.topic),
                key: None,
                partition: msg
                    .attribute(ATTR_BUNDLE_PARTITION)
                    .and_then(|p| p.parse().ok()),
                backbone: Some(b),
            };
        }
        let from_payload = self
            .key_field
            .as_ref()
            .and_then(|f| f.extract(&msg.payload));
        Address {
            topic: self.topics.map(&msg.topic),
            key: from_payload.or_else(|| msg.key.as_deref().map(Cow::Borrowed)),
            partition: None,
            backbone: None,
        }
    }
}

/// A message's Kafka topic and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address<'a> {
    /// The Kafka topic.
    pub topic: Cow<'a, str>,
    /// The record key, if any.
    pub key: Option<Cow<'a, [u8]>>,
    /// The partition, when the record names it (backbone bundles);
    /// otherwise the partitioner picks one from the key.
    pub partition: Option<i32>,
    /// Set for a backbone record: the node and the bundle marker go in
    /// headers.
    pub backbone: Option<&'a BackboneShape>,
}

impl<'a> Address<'a> {
    /// The record for `in_flight.msg` (borrowed as `msg`, which the caller
    /// holds so the record can borrow its payload).
    pub fn record(&'a self, msg: &'a Message, in_flight: Box<InFlight>) -> Record<'a> {
        let mut record = Record::with_opaque_to(&self.topic, in_flight).payload(&msg.payload[..]);
        if let Some(key) = &self.key {
            record = record.key(&key[..]);
        }
        if let Some(p) = self.partition {
            record = record.partition(p);
        }
        if msg.timestamp_ns != 0 {
            record =
                record.timestamp(i64::try_from(msg.timestamp_ns / 1_000_000).unwrap_or(i64::MAX));
        }
        if let Some(b) = self.backbone {
            let headers = OwnedHeaders::new_with_capacity(2)
                .insert(Header {
                    key: crate::backbone::codec::HEADER_NODE,
                    value: Some(b.node.as_bytes()),
                })
                .insert(Header {
                    key: crate::backbone::codec::HEADER_BUNDLE,
                    value: Some(&b"1"[..]),
                });
            record = record.headers(headers);
        } else if !msg.attributes.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(msg.attributes.len());
            for (name, value) in &msg.attributes {
                headers = headers.insert(Header {
                    key: name,
                    value: Some(value.as_bytes()),
                });
            }
            record = record.headers(headers);
        }
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(toml_text: &str) -> RecordShape {
        let config: KafkaConfig = toml::from_str(toml_text).unwrap();
        config.check().unwrap();
        RecordShape::new(&config)
    }

    #[test]
    fn the_key_field_wins_over_the_message_key_and_falls_back_to_it() {
        let s = shape("message_key_field = \"user\"");
        let m = Message::new("logs.a", r#"{"user":"u1","msg":"x"}"#).with_key("own");
        assert_eq!(s.address(&m).key.as_deref(), Some(&b"u1"[..]));
        let m = Message::new("logs.a", r#"{"msg":"x"}"#).with_key("own");
        assert_eq!(s.address(&m).key.as_deref(), Some(&b"own"[..]));
        let m = Message::new("logs.a", "plain text");
        assert_eq!(s.address(&m).key, None);
    }

    #[test]
    fn without_a_key_field_the_message_key_is_used_as_is() {
        let s = shape("");
        let m = Message::new("logs.a", r#"{"user":"u1"}"#).with_key("own");
        let a = s.address(&m);
        assert_eq!(a.key.as_deref(), Some(&b"own"[..]));
        assert_eq!(a.topic, "tidegate");
    }
}
