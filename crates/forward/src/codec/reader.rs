//! A zero-copy msgpack cursor over one received value.
//!
//! Strings, binaries and whole sub-values come back as offset ranges into
//! the input, so the caller can slice a shared `Bytes` instead of copying.
//! Every read is bounds-checked: a truncated or mistyped value is an error,
//! never a panic. Nesting is not limited here; values reach the reader only
//! after [`super::scan`] has checked them.

use std::ops::Range;

use rmp::Marker;

use super::scan::header_at;
use super::DecodeError;

/// A cursor over msgpack bytes.
#[derive(Debug, Clone)]
pub struct MsgReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// A scalar read by [`MsgReader::read_number`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// A non-negative integer.
    Unsigned(u64),
    /// A negative integer.
    Signed(i64),
    /// A float.
    Float(f64),
}

impl<'a> MsgReader<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        MsgReader { buf, pos: 0 }
    }

    /// Moves the cursor to `pos` (clamped to the end).
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.buf.len());
    }

    /// The whole input.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Current offset.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// True when every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The marker byte of the next value, without consuming it.
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// The rmp marker of the next value.
    pub fn peek_marker(&self) -> Option<Marker> {
        self.peek().map(Marker::from_u8)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(DecodeError::Truncated("value runs past its container"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    /// Skips one whole value and returns its byte range.
    pub fn skip_value(&mut self) -> Result<Range<usize>, DecodeError> {
        let start = self.pos;
        let mut remaining: u64 = 1;
        while remaining > 0 {
            let h = header_at(self.buf, self.pos)?
                .ok_or(DecodeError::Truncated("value header cut short"))?;
            let len = (h.head as u64)
                .checked_add(h.body)
                .filter(|l| *l <= (self.buf.len() - self.pos) as u64)
                .ok_or(DecodeError::Truncated("value body cut short"))?;
            self.pos += len as usize;
            remaining = remaining - 1 + h.items;
            if remaining > (self.buf.len() - self.pos) as u64 {
                return Err(DecodeError::Truncated(
                    "container declares more items than bytes",
                ));
            }
        }
        Ok(start..self.pos)
    }

    /// Reads an array header; `Ok(None)` (nothing consumed) if the next value
    /// is not an array.
    pub fn read_array_len(&mut self) -> Result<Option<u32>, DecodeError> {
        let n = match self.peek_marker() {
            None => return Err(DecodeError::Truncated("array expected")),
            Some(Marker::FixArray(n)) => {
                self.pos += 1;
                u32::from(n)
            }
            Some(Marker::Array16) => {
                self.pos += 1;
                self.uint(2)? as u32
            }
            Some(Marker::Array32) => {
                self.pos += 1;
                self.uint(4)? as u32
            }
            Some(_) => return Ok(None),
        };
        Ok(Some(n))
    }

    /// Reads a map header; `Ok(None)` (nothing consumed) if the next value is
    /// not a map.
    pub fn read_map_len(&mut self) -> Result<Option<u32>, DecodeError> {
        let n = match self.peek_marker() {
            None => return Err(DecodeError::Truncated("map expected")),
            Some(Marker::FixMap(n)) => {
                self.pos += 1;
                u32::from(n)
            }
            Some(Marker::Map16) => {
                self.pos += 1;
                self.uint(2)? as u32
            }
            Some(Marker::Map32) => {
                self.pos += 1;
                self.uint(4)? as u32
            }
            Some(_) => return Ok(None),
        };
        Ok(Some(n))
    }

    /// Reads a str or bin and returns the range of its bytes; `Ok(None)`
    /// (nothing consumed) if the next value is neither.
    pub fn read_raw(&mut self) -> Result<Option<Range<usize>>, DecodeError> {
        let width = match self.peek_marker() {
            None => return Err(DecodeError::Truncated("string expected")),
            Some(Marker::FixStr(n)) => {
                self.pos += 1;
                let start = self.pos;
                self.take(usize::from(n))?;
                return Ok(Some(start..self.pos));
            }
            Some(Marker::Str8 | Marker::Bin8) => 1,
            Some(Marker::Str16 | Marker::Bin16) => 2,
            Some(Marker::Str32 | Marker::Bin32) => 4,
            Some(_) => return Ok(None),
        };
        self.pos += 1;
        let len = self.uint(width)? as usize;
        let start = self.pos;
        self.take(len)?;
        Ok(Some(start..self.pos))
    }

    /// Like [`Self::read_raw`] but returns the bytes.
    pub fn read_raw_bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        Ok(self.read_raw()?.map(|r| &self.buf[r]))
    }

    /// Reads an integer or float; `Ok(None)` (nothing consumed) otherwise.
    pub fn read_number(&mut self) -> Result<Option<Number>, DecodeError> {
        let Some(m) = self.peek_marker() else {
            return Err(DecodeError::Truncated("number expected"));
        };
        let n = match m {
            Marker::FixPos(v) => {
                self.pos += 1;
                Number::Unsigned(u64::from(v))
            }
            Marker::FixNeg(v) => {
                self.pos += 1;
                Number::Signed(i64::from(v))
            }
            Marker::U8 | Marker::U16 | Marker::U32 | Marker::U64 => {
                let w = match m {
                    Marker::U8 => 1,
                    Marker::U16 => 2,
                    Marker::U32 => 4,
                    _ => 8,
                };
                self.pos += 1;
                Number::Unsigned(self.uint(w)?)
            }
            Marker::I8 | Marker::I16 | Marker::I32 | Marker::I64 => {
                let w = match m {
                    Marker::I8 => 1,
                    Marker::I16 => 2,
                    Marker::I32 => 4,
                    _ => 8,
                };
                self.pos += 1;
                let raw = self.uint(w)?;
                let shift = 64 - 8 * w as u32;
                let v = ((raw << shift) as i64) >> shift;
                if v >= 0 {
                    Number::Unsigned(v as u64)
                } else {
                    Number::Signed(v)
                }
            }
            Marker::F32 => {
                self.pos += 1;
                Number::Float(f64::from(f32::from_bits(self.uint(4)? as u32)))
            }
            Marker::F64 => {
                self.pos += 1;
                Number::Float(f64::from_bits(self.uint(8)?))
            }
            _ => return Ok(None),
        };
        Ok(Some(n))
    }

    /// Reads an ext value and returns its type and the range of its data;
    /// `Ok(None)` (nothing consumed) if the next value is not an ext.
    pub fn read_ext(&mut self) -> Result<Option<(i8, Range<usize>)>, DecodeError> {
        let (width, fixed) = match self.peek_marker() {
            None => return Err(DecodeError::Truncated("ext expected")),
            Some(Marker::FixExt1) => (0, 1),
            Some(Marker::FixExt2) => (0, 2),
            Some(Marker::FixExt4) => (0, 4),
            Some(Marker::FixExt8) => (0, 8),
            Some(Marker::FixExt16) => (0, 16),
            Some(Marker::Ext8) => (1, 0),
            Some(Marker::Ext16) => (2, 0),
            Some(Marker::Ext32) => (4, 0),
            Some(_) => return Ok(None),
        };
        self.pos += 1;
        let len = if width == 0 {
            fixed
        } else {
            self.uint(width)? as usize
        };
        let ty = self.take(1)?[0] as i8;
        let start = self.pos;
        self.take(len)?;
        Ok(Some((ty, start..self.pos)))
    }

    /// Consumes a nil; returns whether one was there.
    pub fn read_nil(&mut self) -> bool {
        if self.peek() == Some(0xc0) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_returns_the_range_of_nested_values() {
        let bytes = [0x92, 0x81, 0xa1, b'k', 0x01, 0xc4, 0x01, 0xff, 0x05];
        let mut r = MsgReader::new(&bytes);
        assert_eq!(r.skip_value().unwrap(), 0..8);
        assert_eq!(r.read_number().unwrap(), Some(Number::Unsigned(5)));
        assert!(r.is_empty());
    }

    #[test]
    fn truncated_values_are_errors() {
        let mut r = MsgReader::new(&[0xdb, 0, 0, 0, 9, b'a']);
        assert!(r.read_raw().is_err());
        let mut r = MsgReader::new(&[0x93, 0x01]);
        assert!(r.skip_value().is_err());
    }

    #[test]
    fn signed_integers_sign_extend() {
        let mut r = MsgReader::new(&[0xd0, 0xff, 0xd1, 0x00, 0x05]);
        assert_eq!(r.read_number().unwrap(), Some(Number::Signed(-1)));
        assert_eq!(r.read_number().unwrap(), Some(Number::Unsigned(5)));
    }
}
