//! One stamped version of a key: a value or a tombstone, with the
//! coordinator's write timestamp, the number of replicas the write was
//! sent to and, for a value written with `ttl_ms`, its expiry — and its
//! byte format. The same bytes are stored in the engine and carried in
//! internal replication requests, so a replica stores exactly what the
//! coordinator stamped.
//!
//! Format (version 2):
//! `[version = 2][flags][replicas: u8][timestamp: u64 BE]([expires_at: u64 BE])[value…]`;
//! flag bit 0 marks a tombstone (whose value is empty), flag bit 1 says
//! `expires_at` follows (values only). `replicas` is the write's `from`
//! (0 = unknown: every node), which anti-entropy needs to know where the
//! key belongs. Version 1 (`[1][flags][timestamp][value…]`, written before
//! TTL and anti-entropy existed) is still read, as `replicas = 0` and no
//! expiry.
//!
//! Ordering (last-write-wins): the larger timestamp wins; on equal
//! timestamps a tombstone wins over a value, then the larger value bytes,
//! expiry and replica count win — so every replica picks the same winner
//! whatever the arrival order. Expiry does not change the order: an expired
//! value still wins over older versions (it reads as absent, like a
//! tombstone stamped at its expiry).

use std::cmp::Ordering;

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Format version written first in every record.
pub const RECORD_VERSION: u8 = 2;
/// The previous version, still decoded.
const RECORD_VERSION_1: u8 = 1;
/// Bytes before the value (version 2, without `expires_at`).
pub const HEADER_BYTES: usize = 11;
/// Header bytes of version 1.
const HEADER_BYTES_V1: usize = 10;
const TOMBSTONE_FLAG: u8 = 1;
const EXPIRES_FLAG: u8 = 2;

/// A record's bytes cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than the header.
    #[error("{0} bytes, shorter than the record header")]
    Short(usize),
    /// An unknown format version.
    #[error("unknown record version {0}")]
    Version(u8),
    /// Unknown flag bits, or a tombstone carrying a value or an expiry.
    #[error("bad flags {0:#04x}")]
    Flags(u8),
}

/// One version of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Nanoseconds since the Unix epoch, set by the coordinator.
    pub timestamp: u64,
    /// A deletion marker; `value` is empty.
    pub tombstone: bool,
    /// How many replicas the write was sent to (its `from`); 0 = unknown,
    /// read as "every node".
    pub replicas: u8,
    /// When the value expires (ns since the Unix epoch); 0 = never.
    pub expires_at: u64,
    /// The value (empty for a tombstone; may be empty for a value too).
    pub value: Bytes,
}

impl Record {
    /// A value written at `timestamp`, never expiring, replica count unknown.
    pub fn value(timestamp: u64, value: Bytes) -> Self {
        Record {
            timestamp,
            tombstone: false,
            replicas: 0,
            expires_at: 0,
            value,
        }
    }

    /// A deletion at `timestamp`, replica count unknown.
    pub fn tombstone(timestamp: u64) -> Self {
        Record {
            timestamp,
            tombstone: true,
            replicas: 0,
            expires_at: 0,
            value: Bytes::new(),
        }
    }

    /// The same record, marked as written to `from` replicas (saturated
    /// at 255).
    pub fn with_replicas(mut self, from: usize) -> Self {
        self.replicas = from.min(u8::MAX as usize) as u8;
        self
    }

    /// The same value, expiring at `expires_at` ns (0 = never). A
    /// tombstone never expires: it is purged after the grace period.
    pub fn with_expiry(mut self, expires_at: u64) -> Self {
        if !self.tombstone {
            self.expires_at = expires_at;
        }
        self
    }

    /// True when the record reads as absent at `now_ns`: a tombstone, or a
    /// value past its expiry.
    pub fn is_dead(&self, now_ns: u64) -> bool {
        self.tombstone || (self.expires_at != 0 && self.expires_at <= now_ns)
    }

    /// When the record became (or becomes) dead: a tombstone's stamp, a
    /// value's expiry; `None` for a value that never expires. Purging
    /// counts the grace period from here.
    pub fn dead_since(&self) -> Option<u64> {
        dead_since(self.tombstone, self.timestamp, self.expires_at)
    }

    /// Whether the encoded record carries `expires_at`.
    fn carries_expiry(&self) -> bool {
        self.expires_at != 0 && !self.tombstone
    }

    /// The length of [`Record::encode`]'s bytes, without encoding: a size
    /// bound can then refuse a large value before it is copied.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + if self.carries_expiry() { 8 } else { 0 } + self.value.len()
    }

    /// The record's bytes.
    pub fn encode(&self) -> Bytes {
        let expires = self.carries_expiry();
        let mut b = BytesMut::with_capacity(self.encoded_len());
        b.put_u8(RECORD_VERSION);
        let mut flags = 0;
        if self.tombstone {
            flags |= TOMBSTONE_FLAG;
        }
        if expires {
            flags |= EXPIRES_FLAG;
        }
        b.put_u8(flags);
        b.put_u8(self.replicas);
        b.put_u64(self.timestamp);
        if expires {
            b.put_u64(self.expires_at);
        }
        b.put_slice(&self.value);
        b.freeze()
    }

    /// Reads a record (version 2 or 1); `bytes` is sliced, not copied.
    pub fn decode(bytes: Bytes) -> Result<Self, RecordError> {
        let view = RecordView::parse(&bytes)?;
        let header = bytes.len() - view.value.len();
        Ok(Record {
            timestamp: view.timestamp,
            tombstone: view.tombstone,
            replicas: view.replicas,
            expires_at: view.expires_at,
            value: bytes.slice(header..),
        })
    }

    /// The record, borrowed.
    fn view(&self) -> RecordView<'_> {
        RecordView {
            timestamp: self.timestamp,
            tombstone: self.tombstone,
            replicas: self.replicas,
            expires_at: self.expires_at,
            value: &self.value,
        }
    }

    /// Last-write-wins order: `Greater` means `self` wins over `other`.
    pub fn lww_cmp(&self, other: &Record) -> Ordering {
        self.view().lww_cmp(&other.view())
    }

    /// True when `self` should replace `other`.
    pub fn supersedes(&self, other: &Record) -> bool {
        self.lww_cmp(other) == Ordering::Greater
    }

    /// True when `self` should replace the record `stored` reads as.
    pub fn supersedes_view(&self, stored: &RecordView<'_>) -> bool {
        self.view().lww_cmp(stored) == Ordering::Greater
    }

    /// Whether `stored` reads as this very record.
    pub fn is_view(&self, stored: &RecordView<'_>) -> bool {
        self.view() == *stored
    }
}

/// A record read in place from its bytes, its value borrowed: for a
/// comparison with stored bytes that needs no copy of them (a value may
/// be as large as `[http] max_body_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// [`Record::timestamp`].
    pub timestamp: u64,
    /// [`Record::tombstone`].
    pub tombstone: bool,
    /// [`Record::replicas`].
    pub replicas: u8,
    /// [`Record::expires_at`].
    pub expires_at: u64,
    /// [`Record::value`], borrowed from the bytes read.
    pub value: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Reads a record (version 2 or 1) from `bytes`, as
    /// [`Record::decode`] does.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, RecordError> {
        let be64 = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[..8]);
            u64::from_be_bytes(a)
        };
        match bytes.first() {
            None => Err(RecordError::Short(0)),
            Some(&RECORD_VERSION) => {
                if bytes.len() < HEADER_BYTES {
                    return Err(RecordError::Short(bytes.len()));
                }
                let flags = bytes[1];
                let tombstone = flags & TOMBSTONE_FLAG != 0;
                let expires = flags & EXPIRES_FLAG != 0;
                let header = HEADER_BYTES + if expires { 8 } else { 0 };
                if flags & !(TOMBSTONE_FLAG | EXPIRES_FLAG) != 0
                    || (tombstone && (expires || bytes.len() > HEADER_BYTES))
                {
                    return Err(RecordError::Flags(flags));
                }
                if bytes.len() < header {
                    return Err(RecordError::Short(bytes.len()));
                }
                let expires_at = if expires { be64(&bytes[11..19]) } else { 0 };
                if expires && expires_at == 0 {
                    // 0 means "never": written without the flag.
                    return Err(RecordError::Flags(flags));
                }
                Ok(RecordView {
                    timestamp: be64(&bytes[3..11]),
                    tombstone,
                    replicas: bytes[2],
                    expires_at,
                    value: &bytes[header..],
                })
            }
            Some(&RECORD_VERSION_1) => {
                if bytes.len() < HEADER_BYTES_V1 {
                    return Err(RecordError::Short(bytes.len()));
                }
                let flags = bytes[1];
                let tombstone = flags == TOMBSTONE_FLAG;
                if flags & !TOMBSTONE_FLAG != 0 || (tombstone && bytes.len() > HEADER_BYTES_V1) {
                    return Err(RecordError::Flags(flags));
                }
                Ok(RecordView {
                    timestamp: be64(&bytes[2..10]),
                    tombstone,
                    replicas: 0,
                    expires_at: 0,
                    value: &bytes[HEADER_BYTES_V1..],
                })
            }
            Some(&v) => Err(RecordError::Version(v)),
        }
    }

    /// [`Record::dead_since`].
    pub fn dead_since(&self) -> Option<u64> {
        dead_since(self.tombstone, self.timestamp, self.expires_at)
    }

    /// Last-write-wins order ([`Record::lww_cmp`]).
    pub fn lww_cmp(&self, other: &RecordView<'_>) -> Ordering {
        self.timestamp
            .cmp(&other.timestamp)
            .then(self.tombstone.cmp(&other.tombstone))
            .then_with(|| self.value.cmp(other.value))
            .then(self.expires_at.cmp(&other.expires_at))
            .then(self.replicas.cmp(&other.replicas))
    }
}

/// When a record with these fields became (or becomes) dead.
fn dead_since(tombstone: bool, timestamp: u64, expires_at: u64) -> Option<u64> {
    if tombstone {
        Some(timestamp)
    } else if expires_at != 0 {
        Some(expires_at)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_record() -> impl Strategy<Value = Record> {
        (
            any::<u64>(),
            any::<bool>(),
            any::<u8>(),
            prop_oneof![Just(0u64), any::<u64>()],
            proptest::collection::vec(any::<u8>(), 0..512),
        )
            .prop_map(|(ts, tomb, replicas, expires, v)| {
                let r = if tomb {
                    Record::tombstone(ts)
                } else {
                    Record::value(ts, Bytes::from(v)).with_expiry(expires)
                };
                r.with_replicas(replicas as usize)
            })
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_identity(r in any_record()) {
            prop_assert_eq!(Record::decode(r.encode()).unwrap(), r);
        }

        #[test]
        fn a_view_dies_when_its_record_does(r in any_record()) {
            let bytes = r.encode();
            prop_assert_eq!(RecordView::parse(&bytes).unwrap().dead_since(), r.dead_since());
        }

        #[test]
        fn encoded_len_is_the_length_of_the_encoding(
            r in any_record(),
            tombstone in any::<bool>(),
            expires_at in prop_oneof![Just(0u64), any::<u64>()],
        ) {
            prop_assert_eq!(r.encoded_len(), r.encode().len());
            // Fields set by hand too (a tombstone with an expiry or a value
            // is never decoded, but encode writes what it is given).
            let odd = Record { tombstone, expires_at, ..r };
            prop_assert_eq!(odd.encoded_len(), odd.encode().len());
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_valid_ones_round_trip(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b = Bytes::from(b);
            if let Ok(r) = Record::decode(b.clone()) {
                // Version 2 bytes come back as they were; version 1 bytes
                // come back as the same record in version 2.
                if b[0] == RECORD_VERSION {
                    prop_assert_eq!(r.encode(), b);
                } else {
                    prop_assert_eq!(Record::decode(r.encode()).unwrap(), r);
                }
            }
        }

        #[test]
        fn a_view_of_the_bytes_reads_and_orders_as_the_record(
            a in any_record(),
            b in any_record(),
            same_stamp in any::<bool>(),
        ) {
            // Equal stamps too, where the order looks at the values.
            let b = Record { timestamp: if same_stamp { a.timestamp } else { b.timestamp }, ..b };
            let stored = b.encode();
            let view = RecordView::parse(&stored).unwrap();
            prop_assert_eq!(a.supersedes_view(&view), a.supersedes(&b));
            prop_assert_eq!(a.is_view(&view), a == b);
            prop_assert!(b.is_view(&view));
        }

        #[test]
        fn lww_is_a_total_order_every_replica_agrees_on(a in any_record(), b in any_record()) {
            prop_assert_eq!(a.lww_cmp(&b), b.lww_cmp(&a).reverse());
            prop_assert!(!(a.supersedes(&b) && b.supersedes(&a)));
            if a.lww_cmp(&b) == Ordering::Equal {
                prop_assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn ties_go_to_the_tombstone_then_to_the_larger_bytes() {
        let v = Record::value(5, Bytes::from_static(b"zzz"));
        assert!(Record::tombstone(5).supersedes(&v));
        assert!(Record::value(5, Bytes::from_static(b"b"))
            .supersedes(&Record::value(5, Bytes::from_static(b"a"))));
        assert!(Record::value(6, Bytes::new()).supersedes(&Record::tombstone(5)));
        assert!(!Record::tombstone(5).supersedes(&Record::tombstone(5)));
        let expiring = Record::value(7, Bytes::from_static(b"x")).with_expiry(8);
        assert!(expiring.supersedes(&Record::value(6, Bytes::from_static(b"y"))));
        assert!(expiring.is_dead(8) && !expiring.is_dead(7));
        assert_eq!(expiring.dead_since(), Some(8));
    }

    #[test]
    fn malformed_records_are_refused() {
        assert_eq!(
            Record::decode(Bytes::from_static(b"\x02\x00")),
            Err(RecordError::Short(2))
        );
        let mut b = Record::value(1, Bytes::from_static(b"x")).encode().to_vec();
        b[0] = 9;
        assert_eq!(
            Record::decode(Bytes::from(b.clone())),
            Err(RecordError::Version(9))
        );
        b[0] = RECORD_VERSION;
        b[1] = 1; // a tombstone with a value
        assert_eq!(
            Record::decode(Bytes::from(b.clone())),
            Err(RecordError::Flags(1))
        );
        b[1] = 2; // an expiry flag without the 8 bytes
        assert_eq!(Record::decode(Bytes::from(b)), Err(RecordError::Short(12)));
        let mut t = Record::tombstone(1).encode().to_vec();
        t[1] = 3; // a tombstone with an expiry
        t.extend_from_slice(&5u64.to_be_bytes());
        assert_eq!(Record::decode(Bytes::from(t)), Err(RecordError::Flags(3)));
    }

    /// `RecordView::parse` and `Record::decode` are one decoder (`decode`
    /// is `parse` plus a slice of the value), so comparing them proves
    /// nothing; these hostile bytes pin what that decoder makes of each.
    #[test]
    fn hostile_bytes_are_read_as_pinned() {
        let ts = 0x0102_0304_0506_0708u64.to_be_bytes();
        let exp = 0x1112_1314_1516_1718u64.to_be_bytes();
        let v2 = |flags: u8, tail: &[&[u8]]| {
            let mut b = vec![RECORD_VERSION, flags, 3];
            b.extend_from_slice(&ts);
            tail.iter().for_each(|t| b.extend_from_slice(t));
            b
        };
        let v1 = |flags: u8, tail: &[u8]| {
            let mut b = vec![1, flags];
            b.extend_from_slice(&ts);
            b.extend_from_slice(tail);
            b
        };
        let stamp = u64::from_be_bytes(ts);
        let value = |v: &'static [u8]| Record::value(stamp, Bytes::from_static(v));
        use RecordError::{Flags, Short, Version};
        let cases: Vec<(&str, Vec<u8>, Result<Record, RecordError>)> = vec![
            ("empty", vec![], Err(Short(0))),
            ("version alone", vec![RECORD_VERSION], Err(Short(1))),
            (
                "v2 header cut short",
                v2(0, &[])[..10].to_vec(),
                Err(Short(10)),
            ),
            // Flags are read only once the header is whole.
            (
                "v2 bad flags, header cut",
                vec![RECORD_VERSION, 0xff, 0],
                Err(Short(3)),
            ),
            (
                "v2 header alone",
                v2(0, &[]),
                Ok(value(b"").with_replicas(3)),
            ),
            (
                "v2 value",
                v2(0, &[b"xyz"]),
                Ok(value(b"xyz").with_replicas(3)),
            ),
            ("v2 unknown flag bit 2", v2(4, &[]), Err(Flags(4))),
            ("v2 unknown flag bit 7", v2(0x80, &[b"x"]), Err(Flags(0x80))),
            ("v2 every flag", v2(0xff, &[&exp]), Err(Flags(0xff))),
            (
                "v2 tombstone",
                v2(1, &[]),
                Ok(Record::tombstone(stamp).with_replicas(3)),
            ),
            ("v2 tombstone with a value", v2(1, &[b"x"]), Err(Flags(1))),
            ("v2 tombstone with an expiry", v2(3, &[&exp]), Err(Flags(3))),
            // The expiry field runs past the end: any of its 8 bytes missing.
            ("v2 expiry, none of it", v2(2, &[]), Err(Short(11))),
            (
                "v2 expiry, 1 of 8 bytes",
                v2(2, &[&exp[..1]]),
                Err(Short(12)),
            ),
            (
                "v2 expiry, 7 of 8 bytes",
                v2(2, &[&exp[..7]]),
                Err(Short(18)),
            ),
            ("v2 expiry of 0 (never)", v2(2, &[&[0; 8]]), Err(Flags(2))),
            (
                "v2 expiry, no value",
                v2(2, &[&exp]),
                Ok(value(b"")
                    .with_replicas(3)
                    .with_expiry(u64::from_be_bytes(exp))),
            ),
            (
                "v2 expiry and value",
                v2(2, &[&exp, b"ab"]),
                Ok(value(b"ab")
                    .with_replicas(3)
                    .with_expiry(u64::from_be_bytes(exp))),
            ),
            ("version 0", vec![0; 20], Err(Version(0))),
            (
                "version 3",
                [&[3][..], &v2(0, &[b"x"])[1..]].concat(),
                Err(Version(3)),
            ),
            ("version 255", vec![255, 0], Err(Version(255))),
            (
                "v1 header cut short",
                v1(0, &[])[..9].to_vec(),
                Err(Short(9)),
            ),
            ("v1 header alone", v1(0, &[]), Ok(value(b""))),
            ("v1 value", v1(0, b"old"), Ok(value(b"old"))),
            ("v1 tombstone", v1(1, &[]), Ok(Record::tombstone(stamp))),
            ("v1 tombstone with a value", v1(1, b"x"), Err(Flags(1))),
            // Version 1 had no expiry: its flag is unknown there.
            ("v1 expiry flag", v1(2, &exp), Err(Flags(2))),
            ("v1 unknown flag bit 7", v1(0x80, &[]), Err(Flags(0x80))),
        ];
        for (case, bytes, want) in cases {
            let got = Record::decode(Bytes::from(bytes.clone()));
            assert_eq!(got, want, "{case}: {bytes:02x?}");
            // The view reads the same fields, its value borrowed in place.
            let view = RecordView::parse(&bytes);
            match &want {
                Ok(r) => assert!(view.is_ok_and(|v| r.is_view(&v)), "{case}"),
                Err(e) => assert_eq!(view.err().as_ref(), Some(e), "{case}"),
            }
        }
    }

    #[test]
    fn version_1_records_are_still_read() {
        let mut v1 = vec![1u8, 0];
        v1.extend_from_slice(&42u64.to_be_bytes());
        v1.extend_from_slice(b"old");
        let r = Record::decode(Bytes::from(v1)).unwrap();
        assert_eq!(r, Record::value(42, Bytes::from_static(b"old")));
        let mut t1 = vec![1u8, 1];
        t1.extend_from_slice(&43u64.to_be_bytes());
        assert_eq!(
            Record::decode(Bytes::from(t1)).unwrap(),
            Record::tombstone(43)
        );
    }
}
