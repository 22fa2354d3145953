//! Finding where one msgpack value ends, in a buffer that grows as bytes
//! arrive.
//!
//! [`ValueScanner`] walks value headers without decoding or allocating
//! anything but a small stack of open containers (bounded by the depth
//! limit). It is resumable: when the buffer ends mid-value it remembers how
//! far it got, so a value arriving in many reads is walked once, not once
//! per read. Every declared length and element count is checked against the
//! frame limit *before* waiting for the bytes, so a header claiming 3 GB is
//! refused at once instead of being buffered.
//!
//! It is not a parser: what the values mean is [`super::frame`]'s job.

use rmp::Marker;

use super::{DecodeError, Limits};

/// The fixed part of one msgpack value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The marker byte.
    pub marker: u8,
    /// Bytes of marker plus length field (plus ext type byte).
    pub head: usize,
    /// Raw bytes after the head (string/bin/ext payload, scalar bytes).
    pub body: u64,
    /// Child values that follow (array elements, map keys plus values).
    pub items: u64,
}

/// Reads the header of the value starting at `buf[pos]`; `Ok(None)` when the
/// buffer ends inside the header.
pub fn header_at(buf: &[u8], pos: usize) -> Result<Option<Header>, DecodeError> {
    let Some(&m) = buf.get(pos) else {
        return Ok(None);
    };
    let fixed = |head: usize, body: u64, items: u64| {
        Ok(Some(Header {
            marker: m,
            head,
            body,
            items,
        }))
    };
    // Reads a big-endian length of `n` bytes right after the marker.
    let len_at = |n: usize| -> Option<u64> {
        let bytes = buf.get(pos + 1..pos + 1 + n)?;
        Some(bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    };
    let sized = |n: usize, extra: usize, as_items: u64| match len_at(n) {
        None => Ok(None),
        Some(len) if as_items > 0 => fixed(1 + n, 0, len * as_items),
        Some(len) => fixed(1 + n + extra, len, 0),
    };
    match Marker::from_u8(m) {
        Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => {
            fixed(1, 0, 0)
        }
        Marker::FixMap(n) => fixed(1, 0, 2 * u64::from(n)),
        Marker::FixArray(n) => fixed(1, 0, u64::from(n)),
        Marker::FixStr(n) => fixed(1, u64::from(n), 0),
        Marker::U8 | Marker::I8 => fixed(1, 1, 0),
        Marker::U16 | Marker::I16 => fixed(1, 2, 0),
        Marker::U32 | Marker::I32 | Marker::F32 => fixed(1, 4, 0),
        Marker::U64 | Marker::I64 | Marker::F64 => fixed(1, 8, 0),
        Marker::FixExt1 => fixed(2, 1, 0),
        Marker::FixExt2 => fixed(2, 2, 0),
        Marker::FixExt4 => fixed(2, 4, 0),
        Marker::FixExt8 => fixed(2, 8, 0),
        Marker::FixExt16 => fixed(2, 16, 0),
        Marker::Str8 | Marker::Bin8 => sized(1, 0, 0),
        Marker::Str16 | Marker::Bin16 => sized(2, 0, 0),
        Marker::Str32 | Marker::Bin32 => sized(4, 0, 0),
        Marker::Ext8 => sized(1, 1, 0),
        Marker::Ext16 => sized(2, 1, 0),
        Marker::Ext32 => sized(4, 1, 0),
        Marker::Array16 => sized(2, 0, 1),
        Marker::Array32 => sized(4, 0, 1),
        Marker::Map16 => sized(2, 0, 2),
        Marker::Map32 => sized(4, 0, 2),
        Marker::Reserved => Err(DecodeError::BadMarker {
            marker: m,
            offset: pos,
        }),
    }
}

/// What a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A complete value occupies the first `n` bytes.
    Complete(usize),
    /// More bytes are needed; the buffer must reach at least `need` bytes
    /// before the scan can progress (a hint for sizing the next read).
    Incomplete {
        /// Minimum total buffer length for progress.
        need: usize,
    },
}

/// Resumable scanner of one top-level msgpack value at a time.
#[derive(Debug, Clone, Default)]
pub struct ValueScanner {
    /// Offset of the next header to read.
    pos: usize,
    /// Children still expected by each open container, outermost first.
    open: Vec<u64>,
    /// Sum of `open`: every pending child needs at least one more byte.
    pending: u64,
}

impl ValueScanner {
    /// A scanner at the start of a value.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets any partial progress (the buffer was replaced).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.open.clear();
        self.pending = 0;
    }

    /// Continues scanning `buf`, which must start with the same bytes as on
    /// the previous call (it may only have grown). On `Complete(n)` the
    /// scanner is reset for the next value, which starts at `buf[n]`.
    pub fn scan(&mut self, buf: &[u8], limits: &Limits) -> Result<Scan, DecodeError> {
        let max = limits.max_frame_bytes as u64;
        loop {
            let Some(h) = header_at(buf, self.pos)? else {
                return Ok(Scan::Incomplete { need: self.pos + 9 });
            };
            let end = self.pos as u64 + h.head as u64 + h.body;
            // Every child still pending in an open container needs at least
            // one byte after `end` — except, in each container, the child
            // being read now (this value, or the container holding it).
            let others = self.pending.saturating_sub(self.open.len() as u64);
            let least = end + others + h.items;
            if least > max {
                return Err(DecodeError::FrameTooLarge {
                    declared: least,
                    limit: limits.max_frame_bytes,
                });
            }
            if (buf.len() as u64) < end {
                return Ok(Scan::Incomplete { need: end as usize });
            }
            self.pos = end as usize;
            if h.items > 0 {
                if self.open.len() >= limits.max_depth {
                    return Err(DecodeError::TooDeep {
                        limit: limits.max_depth,
                    });
                }
                self.open.push(h.items);
                self.pending += h.items;
                continue;
            }
            // A value finished: close every container it completes.
            loop {
                match self.open.last_mut() {
                    None => {
                        let n = self.pos;
                        self.reset();
                        return Ok(Scan::Complete(n));
                    }
                    Some(left) => {
                        *left -= 1;
                        self.pending -= 1;
                        if *left > 0 {
                            break;
                        }
                        self.open.pop();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(max: usize) -> Limits {
        Limits {
            max_frame_bytes: max,
            max_decompressed_bytes: max,
            max_depth: 4,
        }
    }

    #[test]
    fn a_frame_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not() {
        // ["a", {"k": 1}]: 7 bytes.
        let bytes = [0x92, 0xa1, b'a', 0x81, 0xa1, b'k', 0x01];
        for cut in 0..=bytes.len() {
            let mut s = ValueScanner::new();
            let r = s.scan(&bytes[..cut], &lim(7));
            assert!(r.is_ok(), "refused at {cut} of 7 with limit 7: {r:?}");
        }
        let mut s = ValueScanner::new();
        assert_eq!(s.scan(&bytes, &lim(7)).unwrap(), Scan::Complete(7));
        let mut s = ValueScanner::new();
        assert!(matches!(
            s.scan(&bytes, &lim(6)),
            Err(DecodeError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn a_value_split_across_reads_is_found_once_complete() {
        // ["a", {"k": 1}] followed by a nil heartbeat.
        let bytes = [0x92, 0xa1, b'a', 0x81, 0xa1, b'k', 0x01, 0xc0];
        let mut s = ValueScanner::new();
        for cut in 0..7 {
            assert!(matches!(
                s.scan(&bytes[..cut], &lim(100)).unwrap(),
                Scan::Incomplete { .. }
            ));
        }
        assert_eq!(s.scan(&bytes, &lim(100)).unwrap(), Scan::Complete(7));
        assert_eq!(s.scan(&bytes[7..], &lim(100)).unwrap(), Scan::Complete(1));
    }

    #[test]
    fn a_huge_declared_length_is_refused_before_its_bytes_arrive() {
        // str32 of 3 GB, only the header present.
        let bytes = [0x92, 0xa1, b'a', 0xdb, 0xb2, 0xd0, 0x5e, 0x00];
        let err = ValueScanner::new().scan(&bytes, &lim(1 << 20)).unwrap_err();
        assert!(matches!(err, DecodeError::FrameTooLarge { .. }), "{err:?}");
        // array32 of 4 billion elements likewise.
        let bytes = [0xdd, 0xff, 0xff, 0xff, 0xff];
        assert!(ValueScanner::new().scan(&bytes, &lim(1 << 20)).is_err());
    }

    #[test]
    fn nesting_beyond_the_limit_is_refused() {
        let bytes = [0x91, 0x91, 0x91, 0x91, 0x91, 0xc0];
        assert_eq!(
            ValueScanner::new().scan(&bytes, &lim(100)),
            Err(DecodeError::TooDeep { limit: 4 })
        );
    }

    #[test]
    fn the_reserved_marker_is_an_error() {
        assert!(matches!(
            ValueScanner::new().scan(&[0xc1], &lim(100)),
            Err(DecodeError::BadMarker { marker: 0xc1, .. })
        ));
    }

    #[test]
    fn empty_containers_and_non_minimal_headers_complete() {
        // map32 with 0 entries, array16 with one fixint.
        assert_eq!(
            ValueScanner::new()
                .scan(&[0xdf, 0, 0, 0, 0], &lim(100))
                .unwrap(),
            Scan::Complete(5)
        );
        assert_eq!(
            ValueScanner::new()
                .scan(&[0xdc, 0, 1, 7], &lim(100))
                .unwrap(),
            Scan::Complete(4)
        );
    }
}
