//! The stream decoder of one connection: decides msgpack or JSON from the
//! first byte, cuts complete values off the front of the read buffer
//! (without copying them: each frame is a frozen slice of the buffer) and
//! decodes them into frames and events.

use bytes::{Bytes, BytesMut};

use super::frame::{decode_frame_metered, Event, Frame};
use super::json::{decode_json_frame, JsonScanner};
use super::scan::{Scan, ValueScanner};
use super::{DecodeError, InflateGrant, Limits};

/// Which syntax a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// Nothing received yet.
    Undecided,
    /// msgpack (the normal case).
    Msgpack,
    /// JSON: the first byte was `{` or `[`.
    Json,
}

/// Decodes a Forward byte stream, one frame at a time.
#[derive(Debug, Clone)]
pub struct ForwardDecoder {
    limits: Limits,
    syntax: Syntax,
    msgpack: ValueScanner,
    json: JsonScanner,
    need: usize,
}

impl ForwardDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        ForwardDecoder {
            limits,
            syntax: Syntax::Undecided,
            msgpack: ValueScanner::new(),
            json: JsonScanner::default(),
            need: 0,
        }
    }

    /// A decoder that only accepts msgpack (the handshake phase).
    pub fn msgpack_only(limits: Limits) -> Self {
        ForwardDecoder {
            syntax: Syntax::Msgpack,
            ..Self::new(limits)
        }
    }

    /// The connection's syntax, once known.
    pub fn syntax(&self) -> Syntax {
        self.syntax
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The buffer length needed before another frame can complete (a hint
    /// for sizing reads; 0 when unknown).
    pub fn needed(&self) -> usize {
        self.need
    }

    /// Cuts the next complete value off the front of `buf`; `Ok(None)` when
    /// more bytes are needed.
    pub fn next_value(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
        if self.syntax == Syntax::Undecided {
            match buf.first() {
                None => return Ok(None),
                Some(b'{' | b'[') => self.syntax = Syntax::Json,
                Some(_) => self.syntax = Syntax::Msgpack,
            }
        }
        let scan = match self.syntax {
            Syntax::Json => self.json.scan(buf, &self.limits)?,
            _ => self.msgpack.scan(buf, &self.limits)?,
        };
        match scan {
            Scan::Complete(0) => Err(DecodeError::Malformed("empty value")),
            Scan::Complete(n) => {
                self.need = 0;
                Ok(Some(buf.split_to(n).freeze()))
            }
            Scan::Incomplete { need } => {
                self.need = need;
                Ok(None)
            }
        }
    }

    /// Cuts and decodes the next frame, appending its events to `out`;
    /// `Ok(None)` when more bytes are needed.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        out: &mut Vec<Event>,
    ) -> Result<Option<Frame>, DecodeError> {
        let Some(value) = self.next_value(buf)? else {
            return Ok(None);
        };
        self.decode_value(&value, out).map(Some)
    }

    /// Decodes one complete value cut by [`Self::next_value`].
    pub fn decode_value(&self, value: &Bytes, out: &mut Vec<Event>) -> Result<Frame, DecodeError> {
        self.decode_value_metered(value, out, &mut |_| Ok(()))
    }

    /// [`Self::decode_value`], asking `grant` before a gzip chunk's
    /// decompressed output grows (see [`InflateGrant`]).
    pub fn decode_value_metered(
        &self,
        value: &Bytes,
        out: &mut Vec<Event>,
        grant: InflateGrant<'_>,
    ) -> Result<Frame, DecodeError> {
        match self.syntax {
            Syntax::Json => decode_json_frame(value, out),
            _ => decode_frame_metered(value, &self.limits, out, grant),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::FrameKind;

    #[test]
    fn many_frames_in_one_read_and_one_frame_in_many_reads() {
        // Two Message-mode frames and a heartbeat, fed one byte at a time.
        let one = [0x93, 0xa1, b't', 0x01, 0x81, 0xa1, b'k', 0xa1, b'v'];
        let mut stream = one.to_vec();
        stream.extend_from_slice(&one);
        stream.push(0xc0);
        let mut d = ForwardDecoder::new(Limits::default());
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut kinds = Vec::new();
        for b in &stream {
            buf.extend_from_slice(&[*b]);
            while let Some(f) = d.decode(&mut buf, &mut out).unwrap() {
                kinds.push(f.kind);
            }
        }
        assert_eq!(
            kinds,
            vec![FrameKind::Events, FrameKind::Events, FrameKind::Heartbeat]
        );
        assert_eq!(out.len(), 2);

        let mut d = ForwardDecoder::new(Limits::default());
        let mut all = BytesMut::from(&stream[..]);
        let mut n = 0;
        while d.decode(&mut all, &mut out).unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 3);
        assert!(all.is_empty());
    }

    #[test]
    fn a_stray_separator_on_a_json_connection_is_an_error_not_a_loop() {
        // Found by the fuzzer: a ',' before any value used to yield an empty
        // frame forever.
        for text in [&b"[\"a\",1,{}] ,"[..], b"[1] ]", b"{} }"] {
            let mut d = ForwardDecoder::new(Limits::default());
            let mut buf = BytesMut::from(text);
            let mut out = Vec::new();
            let mut frames = 0;
            let err = loop {
                match d.decode(&mut buf, &mut out) {
                    Ok(Some(_)) => frames += 1,
                    Ok(None) => panic!("stray separator accepted in {text:?}"),
                    Err(e) => break e,
                }
                assert!(frames < 10, "decoder loops on {text:?}");
            };
            assert!(matches!(err, DecodeError::BadJson(_)), "{err:?}");
        }
    }
}
