//! A backbone record ↔ hub messages: the layout itself is pure and lives
//! in the hub ([`tidegate_hub::backbone::record`], fuzzed there without a
//! Kafka client); re-exported here for the producer's record shape and the
//! reader, and tested here through librdkafka's own record and header
//! types.

pub use tidegate_hub::backbone::record::{
    decode, DecodeError, Decoded, RecordParts, HEADER_BUNDLE, HEADER_KEY, HEADER_NODE, MAX_HEADERS,
};
pub use tidegate_hub::backbone::{ATTR_PARTITION, ATTR_POSITION};

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use rdkafka::message::{Headers, Message as _};
    use tidegate_hub::{Message, SharedMessage};

    use super::*;
    use crate::backbone::bundler::bundle_message;
    use crate::record::RecordShape;
    use crate::KafkaConfig;

    /// Bundles `msgs` for partition 3 with the backbone's record shape and
    /// decodes the record back (at offset 77), through librdkafka's own
    /// header and record types.
    fn round_trip(msgs: &[Message]) -> Decoded {
        let shared: Vec<SharedMessage> = msgs.iter().cloned().map(Arc::new).collect();
        let bundle = bundle_message(3, &shared);
        let shape = RecordShape::backbone(&KafkaConfig::default(), "node-a");
        let address = shape.address(&bundle);
        assert_eq!(address.partition, Some(3));
        let in_flight = Box::new(crate::record::InFlight {
            msg: Arc::new(bundle.clone()),
            token: tidegate_hub::AckToken::detached(),
            handed_over: std::time::Instant::now(),
        });
        let record = address.record(&bundle, in_flight);
        assert_eq!(record.topic, KafkaConfig::DEFAULT_TOPIC);
        assert_eq!(record.partition, Some(3));
        assert!(record.key.is_none());
        let headers = record.headers.clone().unwrap_or_default();
        let owned = rdkafka::message::OwnedMessage::new(
            record.payload.map(<[u8]>::to_vec),
            record.key.map(<[u8]>::to_vec),
            record.topic.to_owned(),
            rdkafka::Timestamp::CreateTime(record.timestamp.unwrap_or(0)),
            record.partition.unwrap_or(0),
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

    fn at(index: i64) -> String {
        (77 * 1024 + index).to_string()
    }

    #[test]
    fn messages_survive_the_backbone_with_their_positions() {
        let a = Message::new("chat.room1", "hi")
            .with_key(&b"\x00k"[..])
            .with_timestamp_ns(1_700_000_000_123_456_789)
            .with_attribute("a", "1")
            .with_attribute(HEADER_NODE, "spoof");
        let b = Message::new("chat.room2", &[0xffu8][..]).with_timestamp_ns(5);
        let d = round_trip(&[a.clone(), b.clone()]);
        assert_eq!(d.node.as_deref(), Some("node-a"));
        assert_eq!(d.messages.len(), 2);
        for (i, (got, want)) in d.messages.iter().zip([&a, &b]).enumerate() {
            let got = got.as_ref().unwrap();
            assert_eq!(got.topic, want.topic);
            assert_eq!(got.key, want.key);
            assert_eq!(got.payload, want.payload);
            assert_eq!(got.timestamp_ns, want.timestamp_ns);
            let mut attrs = want.attributes.clone();
            attrs.push((ATTR_PARTITION.to_owned(), "3".to_owned()));
            attrs.push((ATTR_POSITION.to_owned(), at(i as i64)));
            assert_eq!(got.attributes, attrs);
            assert_eq!(
                tidegate_hub::backbone::position(got),
                Some((3, 77 * 1024 + i as i64))
            );
        }
    }

    #[test]
    fn a_publisher_cannot_set_its_own_position() {
        let forged = Message::new("chat.room1", "hi")
            .with_attribute(ATTR_PARTITION, "0")
            .with_attribute(ATTR_POSITION, i64::MAX.to_string());
        let d = round_trip(&[forged]);
        let got = d.messages[0].as_ref().unwrap();
        assert_eq!(
            tidegate_hub::backbone::position(got),
            Some((3, 77 * 1024)),
            "{:?}",
            got.attributes
        );
        assert_eq!(got.attributes.len(), 2);
    }

    #[test]
    fn a_bundled_message_on_a_local_only_topic_is_refused_alone() {
        // A bundled message on a local-only topic is refused; its
        // neighbour is delivered.
        let d = round_trip(&[Message::new("$sys.stats", "x"), Message::new("ok", "y")]);
        assert!(matches!(d.messages[0], Err(DecodeError::BadTopic(_))));
        assert_eq!(d.messages[1].as_ref().unwrap().topic, "ok");
    }

    proptest! {
        #[test]
        fn any_valid_messages_round_trip(
            msgs in proptest::collection::vec((
                "[a-z]{1,8}(\\.[a-z0-9_-]{1,8}){0,4}",
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..32)),
                proptest::collection::vec(any::<u8>(), 0..256),
                1u64..4_000_000_000_000_000_000,
                proptest::collection::vec(("[a-z.]{1,10}", "\\PC{0,10}"), 0..6),
            ), 1..12),
        ) {
            let msgs: Vec<Message> = msgs.into_iter().map(|(t, k, p, ts, attrs)| {
                let mut m = Message::new(t, p).with_timestamp_ns(ts);
                if let Some(k) = k { m = m.with_key(k); }
                for (n, v) in &attrs { m = m.with_attribute(n.clone(), v.clone()); }
                m
            }).collect();
            let d = round_trip(&msgs);
            prop_assert_eq!(d.messages.len(), msgs.len());
            for (i, (got, want)) in d.messages.iter().zip(&msgs).enumerate() {
                let got = got.as_ref().unwrap();
                prop_assert_eq!(&got.topic, &want.topic);
                prop_assert_eq!(&got.key, &want.key);
                prop_assert_eq!(&got.payload, &want.payload);
                prop_assert_eq!(got.timestamp_ns, want.timestamp_ns);
                prop_assert_eq!(&got.attributes[..want.attributes.len()], &want.attributes[..]);
                let want_at = at(i as i64);
                prop_assert_eq!(got.attribute(ATTR_POSITION), Some(want_at.as_str()));
            }
        }
    }
}
