//! A cursor over received bytes that tells "need more" from "invalid".

use super::{CodecError, Decoded};

/// Why a read stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The bytes end before the value does.
    More,
    /// The bytes can never form a valid value.
    Bad(CodecError),
}

impl From<CodecError> for Stop {
    fn from(e: CodecError) -> Self {
        Stop::Bad(e)
    }
}

/// Big-endian reads over a borrowed slice (Java `DataInputStream` order).
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        let end = self.pos.checked_add(n).ok_or(Stop::More)?;
        if end > self.buf.len() {
            return Err(Stop::More);
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Stop> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Stop> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, Stop> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A Java `readUTF` string.
    pub(crate) fn utf(&mut self, what: &'static str) -> Result<String, Stop> {
        let len = self.u16()? as usize;
        let bytes = self.take(len)?;
        super::utf::modified_utf8_to_string(bytes).map_err(|_| Stop::Bad(CodecError::BadUtf8(what)))
    }

    /// A Java `readUTF` string of at most `limit` encoded bytes: a longer
    /// one is refused on its length, before its bytes are waited for.
    pub(crate) fn utf_at_most(&mut self, what: &'static str, limit: u64) -> Result<String, Stop> {
        let len = self.u16()?;
        bounded(what, len.into(), limit)?;
        let bytes = self.take(len.into())?;
        super::utf::modified_utf8_to_string(bytes).map_err(|_| Stop::Bad(CodecError::BadUtf8(what)))
    }

    /// A count field: non-negative and at most `limit`.
    pub(crate) fn count(&mut self, what: &'static str, limit: u64) -> Result<usize, Stop> {
        let v = self.i32()?;
        Ok(bounded(what, v as i64, limit)?)
    }
}

/// Checks a length field read from the wire against its limit.
pub(crate) fn bounded(what: &'static str, value: i64, limit: u64) -> Result<usize, CodecError> {
    if value < 0 {
        return Err(CodecError::Negative { what, value });
    }
    if value as u64 > limit {
        return Err(CodecError::TooLarge {
            what,
            value: value as u64,
            limit,
        });
    }
    Ok(value as usize)
}

/// Turns a reader's result into the public [`Decoded`] form.
pub(crate) fn finish<T>(r: Result<T, Stop>, consumed: usize) -> Decoded<T> {
    match r {
        Ok(v) => Ok(Some((v, consumed))),
        Err(Stop::More) => Ok(None),
        Err(Stop::Bad(e)) => Err(e),
    }
}
