//! The byte format of a batch of replica operations: many internal reads
//! and writes for one peer in one signed request
//! (`PUT /v0/internal/batch`), so replica traffic costs one HTTP exchange
//! per batch instead of one per key ([`crate::client`] batches per
//! destination). Pure: bytes in, values out — fuzzed and property-tested.
//!
//! Request body, one entry after another:
//! `[op: 1 = get, 2 = put][key length: u16 BE][key][record length: u32 BE][record]`
//! (a get has record length 0). Response body, one entry per request
//! entry, in order: `[1 = applied | 2 = not newer | 3 = absent | 4 = found
//! | 5 = failed]`, and after `found` `[record length: u32 BE][record]`.
//!
//! Limits: at most [`MAX_BATCH_OPS`] entries, keys of at most
//! [`MAX_KEY_BYTES`], and the body itself bounded by the HTTP server's
//! `max_body_bytes` plus [`crate::INTERNAL_BODY_ALLOWANCE`] (requests: a
//! batch carries a client body of up to `max_body_bytes` with its framing)
//! or the client's response limit.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::config::MAX_KEY_BYTES;
use crate::record::Record;

/// Most operations in one batch.
pub const MAX_BATCH_OPS: usize = 4096;

/// Bytes one operation adds to a batch body besides its key and value:
/// op, key length, record length, and the record's own header (with an
/// expiry).
pub const OP_OVERHEAD_BYTES: usize = 1 + 2 + 4 + crate::record::HEADER_BYTES + 8;

const OP_GET: u8 = 1;
const OP_PUT: u8 = 2;

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Read this node's own record of the key.
    Get(Bytes),
    /// Apply a stamped record (last-write-wins).
    Put(Bytes, Record),
}

/// The answer to one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchReply {
    /// A put was stored.
    Applied,
    /// A put lost to the stored version (still a success).
    NotNewer,
    /// A get found nothing.
    Absent,
    /// A get found this record.
    Found(Record),
    /// The operation failed on the replica.
    Failed,
}

/// A batch that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BatchError {
    /// The bytes end inside an entry.
    #[error("batch cut short")]
    Truncated,
    /// An unknown operation or reply code.
    #[error("unknown code {0}")]
    BadCode(u8),
    /// More entries than [`MAX_BATCH_OPS`].
    #[error("more than {MAX_BATCH_OPS} entries")]
    TooMany,
    /// An empty key or one longer than the limit.
    #[error("key of {0} bytes")]
    BadKey(usize),
    /// A record inside the batch is malformed.
    #[error("record: {0}")]
    Record(String),
}

/// Encodes operations.
pub fn encode_ops(ops: &[BatchOp]) -> Bytes {
    let size: usize = ops
        .iter()
        .map(|op| match op {
            BatchOp::Get(k) => 7 + k.len(),
            BatchOp::Put(k, r) => 7 + k.len() + 10 + r.value.len(),
        })
        .sum();
    let mut b = BytesMut::with_capacity(size + 64);
    for op in ops {
        match op {
            BatchOp::Get(k) => {
                b.put_u8(OP_GET);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
                b.put_u32(0);
            }
            BatchOp::Put(k, r) => {
                b.put_u8(OP_PUT);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
                let rec = r.encode();
                b.put_u32(rec.len() as u32);
                b.put_slice(&rec);
            }
        }
    }
    b.freeze()
}

fn take(buf: &mut Bytes, n: usize) -> Result<Bytes, BatchError> {
    if buf.remaining() < n {
        return Err(BatchError::Truncated);
    }
    Ok(buf.split_to(n))
}

fn take_record(buf: &mut Bytes) -> Result<Bytes, BatchError> {
    if buf.remaining() < 4 {
        return Err(BatchError::Truncated);
    }
    let len = buf.get_u32() as usize;
    take(buf, len)
}

/// Decodes operations (keys and records are slices of `buf`, no copy).
pub fn decode_ops(mut buf: Bytes) -> Result<Vec<BatchOp>, BatchError> {
    let mut ops = Vec::new();
    while buf.has_remaining() {
        if ops.len() == MAX_BATCH_OPS {
            return Err(BatchError::TooMany);
        }
        let code = buf.get_u8();
        if buf.remaining() < 2 {
            return Err(BatchError::Truncated);
        }
        let klen = buf.get_u16() as usize;
        if klen == 0 || klen > MAX_KEY_BYTES {
            return Err(BatchError::BadKey(klen));
        }
        let key = take(&mut buf, klen)?;
        let rec = take_record(&mut buf)?;
        ops.push(match code {
            OP_GET => BatchOp::Get(key),
            OP_PUT => BatchOp::Put(
                key,
                Record::decode(rec).map_err(|e| BatchError::Record(e.to_string()))?,
            ),
            c => return Err(BatchError::BadCode(c)),
        });
    }
    Ok(ops)
}

/// Encodes replies.
pub fn encode_replies(replies: &[BatchReply]) -> Bytes {
    let mut b = BytesMut::with_capacity(replies.len() * 2 + 64);
    for r in replies {
        match r {
            BatchReply::Applied => b.put_u8(1),
            BatchReply::NotNewer => b.put_u8(2),
            BatchReply::Absent => b.put_u8(3),
            BatchReply::Found(rec) => {
                b.put_u8(4);
                let rec = rec.encode();
                b.put_u32(rec.len() as u32);
                b.put_slice(&rec);
            }
            BatchReply::Failed => b.put_u8(5),
        }
    }
    b.freeze()
}

/// Decodes replies.
pub fn decode_replies(mut buf: Bytes) -> Result<Vec<BatchReply>, BatchError> {
    let mut out = Vec::new();
    while buf.has_remaining() {
        if out.len() == MAX_BATCH_OPS {
            return Err(BatchError::TooMany);
        }
        out.push(match buf.get_u8() {
            1 => BatchReply::Applied,
            2 => BatchReply::NotNewer,
            3 => BatchReply::Absent,
            4 => BatchReply::Found(
                Record::decode(take_record(&mut buf)?)
                    .map_err(|e| BatchError::Record(e.to_string()))?,
            ),
            5 => BatchReply::Failed,
            c => return Err(BatchError::BadCode(c)),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = Record> {
        (
            any::<u64>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(ts, tomb, v)| {
                if tomb {
                    Record::tombstone(ts)
                } else {
                    Record::value(ts, Bytes::from(v))
                }
            })
    }

    fn op() -> impl Strategy<Value = BatchOp> {
        let key = proptest::collection::vec(any::<u8>(), 1..40).prop_map(Bytes::from);
        prop_oneof![
            key.clone().prop_map(BatchOp::Get),
            (key, record()).prop_map(|(k, r)| BatchOp::Put(k, r)),
        ]
    }

    fn reply() -> impl Strategy<Value = BatchReply> {
        prop_oneof![
            Just(BatchReply::Applied),
            Just(BatchReply::NotNewer),
            Just(BatchReply::Absent),
            Just(BatchReply::Failed),
            record().prop_map(BatchReply::Found),
        ]
    }

    proptest! {
        #[test]
        fn ops_round_trip(ops in proptest::collection::vec(op(), 0..50)) {
            prop_assert_eq!(decode_ops(encode_ops(&ops)).unwrap(), ops);
        }

        #[test]
        fn replies_round_trip(rs in proptest::collection::vec(reply(), 0..50)) {
            prop_assert_eq!(decode_replies(encode_replies(&rs)).unwrap(), rs);
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_ops(Bytes::from(b.clone()));
            let _ = decode_replies(Bytes::from(b));
        }

        #[test]
        fn every_cut_of_a_batch_is_refused_or_shorter(ops in proptest::collection::vec(op(), 1..10), cut in any::<prop::sample::Index>()) {
            let full = encode_ops(&ops);
            let at = cut.index(full.len());
            if let Ok(got) = decode_ops(full.slice(..at)) {
                prop_assert!(got.len() < ops.len());
            }
        }
    }

    #[test]
    fn limits_are_enforced() {
        let too_long = BatchOp::Get(Bytes::from(vec![b'k'; MAX_KEY_BYTES + 1]));
        assert_eq!(
            decode_ops(encode_ops(&[too_long])),
            Err(BatchError::BadKey(MAX_KEY_BYTES + 1))
        );
        let many = vec![BatchOp::Get(Bytes::from_static(b"k")); MAX_BATCH_OPS + 1];
        assert_eq!(decode_ops(encode_ops(&many)), Err(BatchError::TooMany));
        assert_eq!(
            decode_ops(Bytes::from_static(&[9, 0, 1, b'k', 0, 0, 0, 0])),
            Err(BatchError::BadCode(9))
        );
    }
}
