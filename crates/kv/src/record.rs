//! One stamped version of a key: a value or a tombstone, with the
//! coordinator's write timestamp, and its byte format. The same bytes are
//! stored in the engine and carried in internal replication requests, so
//! a replica stores exactly what the coordinator stamped.
//!
//! Format: `[version = 1][flags][timestamp: u64 big-endian][value…]`;
//! flag bit 0 marks a tombstone (whose value is empty).
//!
//! Ordering (last-write-wins): the larger timestamp wins; on equal
//! timestamps a tombstone wins over a value, then the larger value bytes
//! win — so every replica picks the same winner whatever the arrival order.

use std::cmp::Ordering;

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Format version written first in every record.
pub const RECORD_VERSION: u8 = 1;
/// Bytes before the value.
pub const HEADER_BYTES: usize = 10;
const TOMBSTONE_FLAG: u8 = 1;

/// A record's bytes cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than the header.
    #[error("{0} bytes, shorter than the {HEADER_BYTES}-byte header")]
    Short(usize),
    /// An unknown format version.
    #[error("unknown record version {0}")]
    Version(u8),
    /// Unknown flag bits, or a tombstone carrying a value.
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
    /// The value (empty for a tombstone; may be empty for a value too).
    pub value: Bytes,
}

impl Record {
    /// A value written at `timestamp`.
    pub fn value(timestamp: u64, value: Bytes) -> Self {
        Record {
            timestamp,
            tombstone: false,
            value,
        }
    }

    /// A deletion at `timestamp`.
    pub fn tombstone(timestamp: u64) -> Self {
        Record {
            timestamp,
            tombstone: true,
            value: Bytes::new(),
        }
    }

    /// The record's bytes.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(HEADER_BYTES + self.value.len());
        b.put_u8(RECORD_VERSION);
        b.put_u8(if self.tombstone { TOMBSTONE_FLAG } else { 0 });
        b.put_u64(self.timestamp);
        b.put_slice(&self.value);
        b.freeze()
    }

    /// Reads a record; `bytes` is sliced, not copied.
    pub fn decode(bytes: Bytes) -> Result<Self, RecordError> {
        if bytes.len() < HEADER_BYTES {
            return Err(RecordError::Short(bytes.len()));
        }
        if bytes[0] != RECORD_VERSION {
            return Err(RecordError::Version(bytes[0]));
        }
        let flags = bytes[1];
        let tombstone = flags == TOMBSTONE_FLAG;
        if flags & !TOMBSTONE_FLAG != 0 || (tombstone && bytes.len() > HEADER_BYTES) {
            return Err(RecordError::Flags(flags));
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&bytes[2..HEADER_BYTES]);
        Ok(Record {
            timestamp: u64::from_be_bytes(ts),
            tombstone,
            value: bytes.slice(HEADER_BYTES..),
        })
    }

    /// Last-write-wins order: `Greater` means `self` wins over `other`.
    pub fn lww_cmp(&self, other: &Record) -> Ordering {
        self.timestamp
            .cmp(&other.timestamp)
            .then(self.tombstone.cmp(&other.tombstone))
            .then_with(|| self.value.cmp(&other.value))
    }

    /// True when `self` should replace `other`.
    pub fn supersedes(&self, other: &Record) -> bool {
        self.lww_cmp(other) == Ordering::Greater
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
            proptest::collection::vec(any::<u8>(), 0..512),
        )
            .prop_map(|(ts, tomb, v)| {
                if tomb {
                    Record::tombstone(ts)
                } else {
                    Record::value(ts, Bytes::from(v))
                }
            })
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_identity(r in any_record()) {
            prop_assert_eq!(Record::decode(r.encode()).unwrap(), r);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_valid_ones_round_trip(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b = Bytes::from(b);
            if let Ok(r) = Record::decode(b.clone()) {
                prop_assert_eq!(r.encode(), b);
            }
        }

        #[test]
        fn lww_is_a_total_order_every_replica_agrees_on(a in any_record(), b in any_record()) {
            prop_assert_eq!(a.lww_cmp(&b), b.lww_cmp(&a).reverse());
            prop_assert!(!(a.supersedes(&b) && b.supersedes(&a)));
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
    }

    #[test]
    fn malformed_records_are_refused() {
        assert_eq!(
            Record::decode(Bytes::from_static(b"\x01\x00")),
            Err(RecordError::Short(2))
        );
        let mut b = Record::value(1, Bytes::from_static(b"x")).encode().to_vec();
        b[0] = 9;
        assert_eq!(
            Record::decode(Bytes::from(b.clone())),
            Err(RecordError::Version(9))
        );
        b[0] = 1;
        b[1] = 1; // a tombstone with a value
        assert_eq!(Record::decode(Bytes::from(b)), Err(RecordError::Flags(1)));
    }
}
