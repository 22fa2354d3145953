//! A bundle: several hub messages in one backbone record.
//!
//! At high publish rates one record per message costs the producer, the
//! broker and every reading node a fixed amount per record (allocation,
//! queueing, a delivery report, a fetch-side message object); a bundle pays
//! it once for up to [`MAX_BUNDLE_MESSAGES`] messages. A message's place in
//! the cluster's history is then its record's offset *and* its index in the
//! bundle, folded into one number ([`position`]) so that a client's
//! arithmetic stays "next position = last position + 1".
//!
//! Layout (all lengths LEB128 varints, checked against what is left):
//!
//! ```text
//! version (1 byte, = 1) · count
//! count × { topic_len topic · timestamp_ns (8 bytes LE) · flags (1 byte: bit 0 = key)
//!           · [key_len key] · attr_count · attr_count × {name_len name value_len value}
//!           · payload_len payload }
//! ```
//!
//! Pure and hostile-input safe: anyone who can write to the backbone topic
//! can write anything. Decoding allocates only what the input's own bytes
//! back (plus one `Vec` slot per message, bounded by
//! [`MAX_BUNDLE_MESSAGES`]), never panics, and refuses a message whose topic
//! a publish would refuse without losing its neighbours.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::message::now_ns;
use crate::topic::{is_system_topic, validate_topic};
use crate::{Message, SharedMessage};

/// The only layout version written and read.
pub const BUNDLE_VERSION: u8 = 1;

/// Most messages one bundle carries (also the number of positions one
/// record spans, [`POSITIONS_PER_RECORD`]).
pub const MAX_BUNDLE_MESSAGES: usize = 1024;

/// Positions one backbone record spans: a message's position is
/// `offset × POSITIONS_PER_RECORD + index`.
pub const POSITIONS_PER_RECORD: i64 = MAX_BUNDLE_MESSAGES as i64;

/// Most attributes one bundled message carries.
pub const MAX_BUNDLE_ATTRIBUTES: usize = 64;

/// Why a bundle cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BundleError {
    /// The version byte is not [`BUNDLE_VERSION`] (or the value is empty).
    #[error("bundle version {0:?} is not {BUNDLE_VERSION}")]
    Version(Option<u8>),
    /// More messages than [`MAX_BUNDLE_MESSAGES`] announced.
    #[error("bundle announces {0} messages, over the limit of {MAX_BUNDLE_MESSAGES}")]
    TooMany(u64),
    /// A message announces more attributes than [`MAX_BUNDLE_ATTRIBUTES`].
    #[error("bundled message announces {0} attributes, over the limit of {MAX_BUNDLE_ATTRIBUTES}")]
    TooManyAttributes(u64),
    /// A length runs past the end, or a varint is malformed.
    #[error("bundle truncated or malformed at byte {0}")]
    Truncated(usize),
    /// Bytes left over after the last announced message.
    #[error("{0} bytes after the last bundled message")]
    Trailing(usize),
}

/// Why one bundled message is not delivered (its neighbours still are).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("bundled message refused: {0}")]
pub struct RefusedMessage(pub String);

/// Appends the bundle of `msgs` (at most [`MAX_BUNDLE_MESSAGES`]; callers
/// split longer runs) to `out`.
pub fn encode(msgs: &[SharedMessage], out: &mut BytesMut) {
    debug_assert!(msgs.len() <= MAX_BUNDLE_MESSAGES);
    out.reserve(encoded_len(msgs));
    out.put_u8(BUNDLE_VERSION);
    put_varint(out, msgs.len() as u64);
    for m in msgs {
        put_bytes(out, m.topic.as_bytes());
        out.put_u64_le(m.timestamp_ns);
        match &m.key {
            Some(k) => {
                out.put_u8(1);
                put_bytes(out, k);
            }
            None => out.put_u8(0),
        }
        let attrs = &m.attributes[..m.attributes.len().min(MAX_BUNDLE_ATTRIBUTES)];
        put_varint(out, attrs.len() as u64);
        for (name, value) in attrs {
            put_bytes(out, name.as_bytes());
            put_bytes(out, value.as_bytes());
        }
        put_bytes(out, &m.payload);
    }
}

/// The bytes one message adds to a bundle, about (an upper bound).
pub fn message_len(m: &Message) -> usize {
    let attrs: usize = m
        .attributes
        .iter()
        .map(|(n, v)| n.len() + v.len() + 20)
        .sum();
    m.topic.len() + m.key.as_ref().map_or(0, |k| k.len()) + m.payload.len() + attrs + 40
}

fn encoded_len(msgs: &[SharedMessage]) -> usize {
    11 + msgs.iter().map(|m| message_len(m)).sum::<usize>()
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.put_slice(b);
}

/// Reads a bundle. Every announced message has its slot, in order (its
/// index is its place in the record), either the message — its payload and
/// key slices of `value`, no copy — or why it is refused.
pub fn decode(value: &Bytes) -> Result<Vec<Result<Message, RefusedMessage>>, BundleError> {
    let mut r = Reader { buf: value, at: 0 };
    let version = r.byte().ok();
    if version != Some(BUNDLE_VERSION) {
        return Err(BundleError::Version(version));
    }
    let count = r.varint()?;
    if count > MAX_BUNDLE_MESSAGES as u64 {
        return Err(BundleError::TooMany(count));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let topic = r.bytes()?;
        let timestamp_ns = r.u64_le()?;
        let key = match r.byte()? {
            0 => None,
            1 => Some(r.bytes()?),
            _ => return Err(BundleError::Truncated(r.at - 1)),
        };
        let n_attrs = r.varint()?;
        if n_attrs > MAX_BUNDLE_ATTRIBUTES as u64 {
            return Err(BundleError::TooManyAttributes(n_attrs));
        }
        let mut attributes = Vec::with_capacity(n_attrs as usize);
        for _ in 0..n_attrs {
            let name = r.bytes()?;
            let v = r.bytes()?;
            attributes.push((
                String::from_utf8_lossy(&name).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            ));
        }
        let payload = r.bytes()?;
        out.push(check_topic(&topic).map(|topic| Message {
            topic,
            key,
            timestamp_ns: if timestamp_ns == 0 {
                now_ns()
            } else {
                timestamp_ns
            },
            attributes,
            payload,
            encoded: Default::default(),
        }));
    }
    if r.at != value.len() {
        return Err(BundleError::Trailing(value.len() - r.at));
    }
    Ok(out)
}

/// `raw` as a topic a backbone message may carry: UTF-8, publishable, not
/// local-only (`$sys.`, except the nodes' own [`super::SESSIONS_TOPIC`]);
/// why not otherwise. Every backbone record's topic goes through it,
/// bundled or not.
pub fn check_topic(raw: &[u8]) -> Result<String, RefusedMessage> {
    let topic =
        std::str::from_utf8(raw).map_err(|_| RefusedMessage("topic is not UTF-8".to_owned()))?;
    if is_system_topic(topic) && topic != super::SESSIONS_TOPIC {
        return Err(RefusedMessage(format!("{topic:?} is local-only")));
    }
    validate_topic(topic).map_err(|e| RefusedMessage(e.to_string()))?;
    Ok(topic.to_owned())
}

struct Reader<'a> {
    buf: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, BundleError> {
        let b = *self
            .buf
            .get(self.at)
            .ok_or(BundleError::Truncated(self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, BundleError> {
        let start = self.at;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(BundleError::Truncated(start))
    }

    fn u64_le(&mut self) -> Result<u64, BundleError> {
        let end = self.at.checked_add(8).filter(|e| *e <= self.buf.len());
        let end = end.ok_or(BundleError::Truncated(self.at))?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buf[self.at..end]);
        self.at = end;
        Ok(u64::from_le_bytes(b))
    }

    /// A length-prefixed run, as a slice of the buffer.
    fn bytes(&mut self) -> Result<Bytes, BundleError> {
        let start = self.at;
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| self.at.checked_add(l))
            .filter(|e| *e <= self.buf.len())
            .ok_or(BundleError::Truncated(start))?;
        let b = self.buf.slice(self.at..end);
        self.at = end;
        Ok(b)
    }
}

/// The position of message `index` of the record at `offset` (None when
/// the offset is beyond what a position can hold, or negative).
pub fn position(offset: i64, index: usize) -> Option<i64> {
    if offset < 0 || index >= MAX_BUNDLE_MESSAGES {
        return None;
    }
    offset
        .checked_mul(POSITIONS_PER_RECORD)?
        .checked_add(index as i64)
}

/// The record offset and the index in it of a position (the inverse of
/// [`position`]; a negative position is the start).
pub fn split_position(position: i64) -> (i64, usize) {
    let p = position.max(0);
    (
        p / POSITIONS_PER_RECORD,
        (p % POSITIONS_PER_RECORD) as usize,
    )
}

/// Which of `partitions` backbone partitions carries hub topic `topic`: a
/// fixed hash (FNV-1a), the same on every node and every version, so one
/// hub topic keeps one partition and one order.
pub fn partition_of(topic: &str, partitions: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % partitions.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;

    fn bundle(msgs: &[Message]) -> Bytes {
        let shared: Vec<SharedMessage> = msgs.iter().cloned().map(Arc::new).collect();
        let mut out = BytesMut::new();
        encode(&shared, &mut out);
        out.freeze()
    }

    #[test]
    fn messages_survive_a_bundle_in_order() {
        let a = Message::new("news.a", r#"{"i":1}"#)
            .with_key(&b"\x00k"[..])
            .with_timestamp_ns(1_700_000_000_123_456_789)
            .with_attribute("x", "1");
        let b = Message::new("news.b", &[0xffu8, 0][..]).with_timestamp_ns(7);
        let got = decode(&bundle(&[a.clone(), b.clone()])).unwrap();
        assert_eq!(got, vec![Ok(a), Ok(b)]);
    }

    #[test]
    fn a_refused_topic_keeps_its_slot_and_its_neighbours() {
        let msgs = [
            Message::new("ok.one", "1"),
            Message::new("$sys.stats", "x"),
            Message::new("a..b", "y"),
            Message::new("ok.two", "2"),
        ];
        let got = decode(&bundle(&msgs)).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].as_ref().unwrap().topic, "ok.one");
        assert!(got[1].is_err() && got[2].is_err());
        assert_eq!(got[3].as_ref().unwrap().topic, "ok.two");
    }

    #[test]
    fn hostile_bundles_are_refused() {
        assert_eq!(decode(&Bytes::new()), Err(BundleError::Version(None)));
        assert_eq!(
            decode(&Bytes::from_static(&[2, 0])),
            Err(BundleError::Version(Some(2)))
        );
        // 2^20 messages announced in three bytes: refused before allocating.
        assert_eq!(
            decode(&Bytes::from_static(&[1, 0x80, 0x80, 0x40])),
            Err(BundleError::TooMany(1 << 20))
        );
        // A topic announcing 2^62 bytes.
        let huge =
            Bytes::from_static(&[1, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
        assert!(matches!(decode(&huge), Err(BundleError::Truncated(_))));
        // An endless varint.
        let endless = Bytes::from(
            vec![1u8, 1]
                .into_iter()
                .chain([0xff; 20])
                .collect::<Vec<_>>(),
        );
        assert!(matches!(decode(&endless), Err(BundleError::Truncated(_))));
        let mut good = bundle(&[Message::new("a", "b")]).to_vec();
        good.push(0);
        assert_eq!(decode(&Bytes::from(good)), Err(BundleError::Trailing(1)));
    }

    #[test]
    fn positions_fold_offset_and_index() {
        assert_eq!(position(0, 0), Some(0));
        assert_eq!(position(3, 5), Some(3 * POSITIONS_PER_RECORD + 5));
        assert_eq!(split_position(3 * POSITIONS_PER_RECORD + 5), (3, 5));
        assert_eq!(position(3, MAX_BUNDLE_MESSAGES), None);
        assert_eq!(position(-1, 0), None);
        assert_eq!(position(i64::MAX / 2, 0), None);
        // The next position after a record's last message is the next
        // record's first.
        let last = position(3, MAX_BUNDLE_MESSAGES - 1).unwrap();
        assert_eq!(split_position(last + 1), (4, 0));
        assert_eq!(split_position(-5), (0, 0));
    }

    #[test]
    fn a_topic_always_maps_to_the_same_partition() {
        assert_eq!(partition_of("news.a", 1), 0);
        let p = partition_of("news.a", 12);
        assert!(p < 12);
        assert_eq!(partition_of("news.a", 12), p);
        // Fixed across versions: changing the hash would reorder topics.
        assert_eq!(partition_of("news.a", 1 << 30), 0x3b00_eb1b);
        assert_eq!(partition_of("x", 0), 0);
    }

    proptest! {
        #[test]
        fn any_valid_messages_round_trip(
            msgs in proptest::collection::vec((
                "[a-z]{1,8}(\\.[a-z0-9_-]{1,8}){0,3}",
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
                proptest::collection::vec(any::<u8>(), 0..200),
                1u64..u64::MAX,
                proptest::collection::vec(("[a-z.]{1,10}", "\\PC{0,10}"), 0..4),
            ), 0..20)
        ) {
            let msgs: Vec<Message> = msgs.into_iter().map(|(t, k, p, ts, attrs)| {
                let mut m = Message::new(t, p).with_timestamp_ns(ts);
                if let Some(k) = k { m = m.with_key(k); }
                for (n, v) in attrs { m = m.with_attribute(n, v); }
                m
            }).collect();
            let got = decode(&bundle(&msgs)).unwrap();
            let want: Vec<Result<Message, RefusedMessage>> = msgs.into_iter().map(Ok).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut v = raw;
            if !v.is_empty() { v[0] = BUNDLE_VERSION; }
            if let Ok(msgs) = decode(&Bytes::from(v)) {
                prop_assert!(msgs.len() <= MAX_BUNDLE_MESSAGES);
                for m in msgs.into_iter().flatten() {
                    prop_assert!(validate_topic(&m.topic).is_ok());
                }
            }
        }

        #[test]
        fn positions_round_trip(offset in 0i64..(1 << 52), index in 0usize..MAX_BUNDLE_MESSAGES) {
            let p = position(offset, index).unwrap();
            prop_assert_eq!(split_position(p), (offset, index));
        }
    }
}
