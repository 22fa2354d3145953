//! The byte format anti-entropy streams a peer's entries in: a sequence of
//! frames `[key length: u16 BE][record length: u32 BE][key][record]`, the
//! record in [`crate::record`]'s format. Pure (bytes in, entries out), so
//! it is fuzzed (`crates/kv/fuzz`) and property-tested alone.
//!
//! The decoder is incremental — it takes whatever the socket delivered and
//! returns the complete frames, keeping at most one partial frame — and
//! hostile-input safe: an empty or over-long key, or a record longer than
//! the decoder's limit, is an error before any of it is buffered.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::config::MAX_KEY_BYTES;
use crate::record::{Record, RecordError};

/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 6;

/// A frame that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EntryError {
    /// Key length 0 or over [`MAX_KEY_BYTES`].
    #[error("key of {0} bytes")]
    KeyLength(usize),
    /// A record longer than the decoder's limit.
    #[error("record of {0} bytes, over the limit")]
    RecordLength(usize),
    /// The record inside the frame is malformed.
    #[error("bad record: {0}")]
    Record(#[from] RecordError),
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({0} bytes left)")]
    Truncated(usize),
}

/// Appends one frame for `key` and `record`.
pub fn encode_entry(key: &[u8], record: &Record, out: &mut BytesMut) {
    let record = record.encode();
    out.reserve(FRAME_HEADER_BYTES + key.len() + record.len());
    out.put_u16(key.len() as u16);
    out.put_u32(record.len() as u32);
    out.put_slice(key);
    out.put_slice(&record);
}

/// Most room [`EntryDecoder::decode`] reserves ahead for a frame that has
/// not arrived whole.
const RESERVE_STEP: usize = 1024 * 1024;

/// Reads frames out of a growing buffer.
#[derive(Debug, Clone)]
pub struct EntryDecoder {
    max_record_bytes: usize,
}

impl EntryDecoder {
    /// A decoder refusing records longer than `max_record_bytes`.
    pub fn new(max_record_bytes: usize) -> Self {
        EntryDecoder { max_record_bytes }
    }

    /// The next complete frame in `buf` (consumed), or `None` when more
    /// bytes are needed. After an error the stream cannot be resumed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<(Bytes, Record)>, EntryError> {
        if buf.len() < FRAME_HEADER_BYTES {
            return Ok(None);
        }
        let key_len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
        let record_len = u32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]) as usize;
        if key_len == 0 || key_len > MAX_KEY_BYTES {
            return Err(EntryError::KeyLength(key_len));
        }
        if record_len > self.max_record_bytes {
            return Err(EntryError::RecordLength(record_len));
        }
        let total = FRAME_HEADER_BYTES + key_len + record_len;
        if buf.len() < total {
            // Room for what is announced, a step at a time: the length
            // comes from the peer, and up to the record limit (hundreds of
            // MiB) would be taken before a byte of it arrived.
            buf.reserve((total - buf.len()).min(RESERVE_STEP));
            return Ok(None);
        }
        buf.advance(FRAME_HEADER_BYTES);
        let key = buf.split_to(key_len).freeze();
        let record = Record::decode(buf.split_to(record_len).freeze())?;
        Ok(Some((key, record)))
    }

    /// Checks that nothing is left once the stream ended.
    pub fn finish(&self, buf: &BytesMut) -> Result<(), EntryError> {
        if buf.is_empty() {
            Ok(())
        } else {
            Err(EntryError::Truncated(buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_header_announcing_a_huge_record_reserves_one_step_not_the_record() {
        let d = EntryDecoder::new(512 * 1024 * 1024);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&1u16.to_be_bytes());
        buf.extend_from_slice(&(400u32 * 1024 * 1024).to_be_bytes());
        buf.extend_from_slice(b"k");
        assert!(d.decode(&mut buf).unwrap().is_none());
        assert!(buf.capacity() <= 2 * RESERVE_STEP, "{}", buf.capacity());
    }

    fn any_entry() -> impl Strategy<Value = (Vec<u8>, Record)> {
        (
            proptest::collection::vec(any::<u8>(), 1..64),
            any::<u64>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..200),
        )
            .prop_map(|(k, ts, tomb, v)| {
                let r = if tomb {
                    Record::tombstone(ts)
                } else {
                    Record::value(ts, Bytes::from(v))
                };
                (k, r.with_replicas(3))
            })
    }

    proptest! {
        #[test]
        fn frames_round_trip_whatever_the_read_sizes(
            entries in proptest::collection::vec(any_entry(), 0..20),
            cut in 1usize..64,
        ) {
            let mut wire = BytesMut::new();
            for (k, r) in &entries {
                encode_entry(k, r, &mut wire);
            }
            let d = EntryDecoder::new(1024);
            let (mut buf, mut got) = (BytesMut::new(), Vec::new());
            for piece in wire.chunks(cut) {
                buf.extend_from_slice(piece);
                while let Some((k, r)) = d.decode(&mut buf).unwrap() {
                    got.push((k.to_vec(), r));
                }
            }
            d.finish(&buf).unwrap();
            prop_assert_eq!(got, entries);
        }

        #[test]
        fn garbage_never_panics_nor_buffers_past_the_limit(
            junk in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let d = EntryDecoder::new(256);
            let mut buf = BytesMut::from(&junk[..]);
            while let Ok(Some(_)) = d.decode(&mut buf) {}
            prop_assert!(buf.capacity() <= junk.len().max(FRAME_HEADER_BYTES + MAX_KEY_BYTES + 256));
        }
    }

    #[test]
    fn bad_lengths_are_refused_before_buffering() {
        let d = EntryDecoder::new(100);
        let mut b = BytesMut::from(&[0u8, 0, 0, 0, 0, 1][..]);
        assert_eq!(d.decode(&mut b), Err(EntryError::KeyLength(0)));
        let mut b = BytesMut::from(&[0u8, 1, 0, 0, 0, 101][..]);
        assert_eq!(d.decode(&mut b), Err(EntryError::RecordLength(101)));
        let mut b = BytesMut::from(&[0x20u8, 0, 0, 0, 0, 1][..]);
        assert_eq!(d.decode(&mut b), Err(EntryError::KeyLength(0x2000)));
        let mut b = BytesMut::from(&[0u8, 1, 0, 0, 0, 1, b'k'][..]);
        assert_eq!(d.decode(&mut b), Ok(None));
        assert_eq!(d.finish(&b), Err(EntryError::Truncated(7)));
        let mut b = BytesMut::from(&[0u8, 1, 0, 0, 0, 1, b'k', 9][..]);
        assert_eq!(
            d.decode(&mut b),
            Err(EntryError::Record(RecordError::Version(9)))
        );
    }
}
