//! The wire codec: [`Frame`]s to bytes and back. Pure — no I/O, no clock, no
//! globals — so it can be fuzzed and property-tested alone.
//!
//! Every frame is `length: u32 LE` (bytes after the prefix: the type byte plus
//! the body), `type: u8`, `body`. All integers are little-endian. The full
//! layout is in `docs/wire.md`. Decoding is zero-copy for payloads, keys and
//! echo padding (slices of the read buffer) and never allocates more than the
//! frame it was given, which is itself bounded by `max_frame`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;
use tidegate_hub::Message;

use crate::frame::{AuthToken, Echo, ErrorCode, ErrorFrame, Frame, FrameType};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX: usize = 4;
/// Bytes of the length prefix plus the type byte.
pub const FRAME_HEADER: usize = LENGTH_PREFIX + 1;
/// Flag bit of a message body: a key follows the topic.
pub const FLAG_KEY: u8 = 0x01;
/// Most bytes reserved at a time for a frame still arriving.
pub const RESERVE_STEP: usize = 64 * 1024;
/// Longest text an ERROR frame carries; longer messages are cut.
pub const MAX_ERROR_TEXT: usize = 4096;

/// Why bytes are not a valid frame. Each maps to the [`ErrorCode`] the server
/// reports ([`DecodeError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The length prefix exceeds the configured maximum.
    #[error("frame of {length} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The length prefix received.
        length: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The length prefix is zero (no room for the type byte).
    #[error("frame length is 0; a frame holds at least its type byte")]
    EmptyFrame,
    /// The type byte is not a known frame type.
    #[error("unknown frame type 0x{0:02x}")]
    UnknownType(u8),
    /// The body ends inside a field.
    #[error("truncated {frame} frame: field `{field}` needs {needed} bytes, {available} left")]
    Truncated {
        /// Frame name.
        frame: &'static str,
        /// The field that did not fit.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the body.
        available: usize,
    },
    /// The stream ended part-way through a frame.
    #[error("truncated frame: the connection ended after {received} bytes of a frame")]
    EndedMidFrame {
        /// Bytes of the unfinished frame received.
        received: usize,
    },
    /// A text field is not UTF-8.
    #[error("{frame} frame: field `{field}` is not valid UTF-8")]
    BadUtf8 {
        /// Frame name.
        frame: &'static str,
        /// The field.
        field: &'static str,
    },
    /// The message flags byte has bits this version does not define.
    #[error("{frame} frame: unknown flag bits 0x{flags:02x}")]
    UnknownFlags {
        /// Frame name.
        frame: &'static str,
        /// The flags byte.
        flags: u8,
    },
    /// Bytes after the last field of a fixed-size body.
    #[error("{frame} frame has {extra} unexpected trailing bytes")]
    TrailingBytes {
        /// Frame name.
        frame: &'static str,
        /// How many.
        extra: usize,
    },
    /// An AUTH token that is empty or longer than [`AuthToken::MAX_LEN`]
    /// (reported from the length prefix, before the body is read).
    #[error("AUTH token of {len} bytes: a token holds 1 to {max} bytes", max = AuthToken::MAX_LEN)]
    BadTokenLength {
        /// The token length the prefix announces.
        len: usize,
    },
}

impl DecodeError {
    /// The ERROR code the server answers this with.
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::TooLarge { .. } => ErrorCode::FrameTooLarge,
            DecodeError::UnknownType(_) => ErrorCode::UnknownType,
            DecodeError::Truncated { .. } | DecodeError::EndedMidFrame { .. } => {
                ErrorCode::TruncatedFrame
            }
            DecodeError::EmptyFrame
            | DecodeError::BadUtf8 { .. }
            | DecodeError::UnknownFlags { .. }
            | DecodeError::TrailingBytes { .. }
            | DecodeError::BadTokenLength { .. } => ErrorCode::MalformedFrame,
        }
    }

    /// A short label for metrics (`oversize_frame`, `unknown_type`, …).
    pub fn kind(&self) -> &'static str {
        match self.code() {
            ErrorCode::FrameTooLarge => "oversize_frame",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::TruncatedFrame => "truncated_frame",
            _ => "malformed_frame",
        }
    }
}

/// Why a value cannot be encoded (a field longer than its length prefix).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// A field exceeds what its length prefix can express.
    #[error("field `{field}` is {len} bytes, over the limit of {max}")]
    FieldTooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// There are more attributes than the count field can express.
    #[error("{count} attributes, over the limit of {max}")]
    TooManyAttributes {
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An AUTH token that is empty or longer than [`AuthToken::MAX_LEN`].
    #[error("AUTH token of {len} bytes: a token holds 1 to {max} bytes", max = AuthToken::MAX_LEN)]
    BadTokenLength {
        /// The token's length.
        len: usize,
    },
}

/// Decodes one frame from the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed (and reserves room for up to
/// [`RESERVE_STEP`] more bytes of a frame whose prefix has arrived), `Ok(Some(frame))` after removing
/// the frame's bytes from `buf`. Oversized frames and unknown types are
/// reported as soon as the first five bytes are in, without waiting for the
/// body. After an error the stream cannot be resynchronised: report it and
/// close the connection (`buf`'s contents are then unspecified).
pub fn decode_frame(buf: &mut BytesMut, max_frame: usize) -> Result<Option<Frame>, DecodeError> {
    if let Some((frame, _)) = take_frame(buf, max_frame)? {
        return Ok(Some(frame));
    }
    if let Some((_, len)) = peek_header(buf, max_frame)? {
        buf.reserve(growth_step(LENGTH_PREFIX + len, buf.len()));
    }
    Ok(None)
}

/// How many more bytes of room to make for a frame of `total` bytes (length
/// prefix included) of which `have` are buffered: the rest of the frame, but
/// never more than [`RESERVE_STEP`]. Growing towards a frame a step at a
/// time, as its bytes arrive, means a peer that announces a large frame and
/// then stalls does not get `max_frame` allocated. Used by [`decode_frame`]
/// and by the low-latency connection's read buffer.
pub(crate) fn growth_step(total: usize, have: usize) -> usize {
    total.saturating_sub(have).min(RESERVE_STEP)
}

/// Like [`decode_frame`], but never reserves memory (the caller sizes its
/// reads, as the server's listener core does) and also returns how many
/// bytes of `buf` the frame took, length prefix included — what the server
/// holds of its in-flight budget while it publishes the frame.
pub fn take_frame(
    buf: &mut BytesMut,
    max_frame: usize,
) -> Result<Option<(Frame, usize)>, DecodeError> {
    let Some((ty, len)) = peek_header(buf, max_frame)? else {
        return Ok(None);
    };
    let total = LENGTH_PREFIX + len;
    if buf.len() < total {
        return Ok(None);
    }
    buf.advance(FRAME_HEADER);
    let body = buf.split_to(len - 1).freeze();
    decode_body(ty, body).map(|f| Some((f, total)))
}

/// Reads a frame header without consuming anything: `Ok(None)` until the
/// length and type bytes are in, then the type and the length prefix (type
/// byte plus body). Checks the length against `max_frame` and the type tag.
pub fn peek_header(
    buf: &[u8],
    max_frame: usize,
) -> Result<Option<(FrameType, usize)>, DecodeError> {
    if buf.len() < LENGTH_PREFIX {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 {
        return Err(DecodeError::EmptyFrame);
    }
    if len > max_frame {
        return Err(DecodeError::TooLarge {
            length: len,
            max: max_frame,
        });
    }
    let Some(&tag) = buf.get(LENGTH_PREFIX) else {
        return Ok(None);
    };
    let ty = FrameType::from_u8(tag).ok_or(DecodeError::UnknownType(tag))?;
    if ty == FrameType::Auth {
        check_token_len(len - 1)?;
    }
    Ok(Some((ty, len)))
}

/// Decodes the body of a frame of type `ty` (everything after the type byte).
pub fn decode_body(ty: FrameType, body: Bytes) -> Result<Frame, DecodeError> {
    let mut r = BodyReader::new(ty.name(), body);
    let frame = match ty {
        FrameType::Publish => Frame::Publish(decode_message(&mut r)?),
        FrameType::Message => Frame::Message(decode_message(&mut r)?),
        FrameType::Subscribe => Frame::Subscribe(r.rest_str("pattern")?),
        FrameType::Unsubscribe => Frame::Unsubscribe(r.rest_str("pattern")?),
        FrameType::Echo => Frame::Echo(Echo {
            options: r.u32("options")? as i32,
            send_time_ns: r.u64("send_time_ns")? as i64,
            correlation_id: r.u64("correlation_id")? as i64,
            extra: r.rest(),
        }),
        FrameType::Ping => Frame::Ping(r.u64("token")?),
        FrameType::Pong => Frame::Pong(r.u64("token")?),
        FrameType::Error => Frame::Error(ErrorFrame {
            code: ErrorCode::from_u16(r.u16("code")?),
            message: r.rest_str("message")?,
        }),
        FrameType::Auth => {
            check_token_len(r.remaining())?;
            Frame::Auth(AuthToken::new(r.rest()))
        }
        FrameType::AuthOk => Frame::AuthOk,
    };
    r.finish()?;
    Ok(frame)
}

fn check_token_len(len: usize) -> Result<(), DecodeError> {
    if len == 0 || len > AuthToken::MAX_LEN {
        return Err(DecodeError::BadTokenLength { len });
    }
    Ok(())
}

fn decode_message(r: &mut BodyReader) -> Result<Message, DecodeError> {
    let flags = r.u8("flags")?;
    if flags & !FLAG_KEY != 0 {
        return Err(DecodeError::UnknownFlags {
            frame: r.frame,
            flags,
        });
    }
    let timestamp_ns = r.u64("timestamp_ns")?;
    let topic_len = r.u16("topic_len")? as usize;
    let topic = r.str(topic_len, "topic")?;
    let key = if flags & FLAG_KEY != 0 {
        let n = r.u32("key_len")? as usize;
        Some(r.bytes(n, "key")?)
    } else {
        None
    };
    let count = r.u16("attribute_count")? as usize;
    // Each attribute takes at least 4 bytes: bound the allocation by the body.
    let mut attributes = Vec::with_capacity(count.min(r.remaining() / 4));
    for _ in 0..count {
        let n = r.u16("attribute_name_len")? as usize;
        let name = r.str(n, "attribute_name")?;
        let v = r.u16("attribute_value_len")? as usize;
        let value = r.str(v, "attribute_value")?;
        attributes.push((name, value));
    }
    Ok(Message {
        topic,
        key,
        timestamp_ns,
        attributes,
        payload: r.rest(),
        encoded: Default::default(),
    })
}

/// A cursor over one frame body that names the field it fails on.
struct BodyReader {
    frame: &'static str,
    body: Bytes,
}

impl BodyReader {
    fn new(frame: &'static str, body: Bytes) -> Self {
        BodyReader { frame, body }
    }

    fn remaining(&self) -> usize {
        self.body.len()
    }

    fn need(&self, n: usize, field: &'static str) -> Result<(), DecodeError> {
        if self.body.len() < n {
            return Err(DecodeError::Truncated {
                frame: self.frame,
                field,
                needed: n,
                available: self.body.len(),
            });
        }
        Ok(())
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.need(1, field)?;
        Ok(self.body.get_u8())
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.need(2, field)?;
        Ok(self.body.get_u16_le())
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.need(4, field)?;
        Ok(self.body.get_u32_le())
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.need(8, field)?;
        Ok(self.body.get_u64_le())
    }

    fn bytes(&mut self, n: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        self.need(n, field)?;
        Ok(self.body.split_to(n))
    }

    fn str(&mut self, n: usize, field: &'static str) -> Result<String, DecodeError> {
        let b = self.bytes(n, field)?;
        self.utf8(b, field)
    }

    fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.body)
    }

    fn rest_str(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let b = self.rest();
        self.utf8(b, field)
    }

    fn utf8(&self, b: Bytes, field: &'static str) -> Result<String, DecodeError> {
        match std::str::from_utf8(&b) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(DecodeError::BadUtf8 {
                frame: self.frame,
                field,
            }),
        }
    }

    fn finish(self) -> Result<(), DecodeError> {
        if self.body.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                frame: self.frame,
                extra: self.body.len(),
            })
        }
    }
}

/// Appends `frame`'s bytes to `out`. On error nothing is appended.
pub fn encode_frame(frame: &Frame, out: &mut BytesMut) -> Result<(), EncodeError> {
    match frame {
        Frame::Publish(m) => encode_message(FrameType::Publish, m, out),
        Frame::Message(m) => encode_message(FrameType::Message, m, out),
        Frame::Subscribe(p) => encode_text(FrameType::Subscribe, p, out),
        Frame::Unsubscribe(p) => encode_text(FrameType::Unsubscribe, p, out),
        Frame::Echo(e) => encode_echo(e.options, e.send_time_ns, e.correlation_id, &e.extra, out),
        Frame::Ping(t) => {
            encode_token(FrameType::Ping, *t, out);
            Ok(())
        }
        Frame::Pong(t) => {
            encode_token(FrameType::Pong, *t, out);
            Ok(())
        }
        Frame::Error(e) => {
            encode_error(e.code, &e.message, out);
            Ok(())
        }
        Frame::Auth(t) => encode_auth(t.as_bytes(), out),
        Frame::AuthOk => {
            encode_auth_ok(out);
            Ok(())
        }
    }
}

fn put_header(ty: FrameType, body_len: usize, out: &mut BytesMut) {
    out.reserve(FRAME_HEADER + body_len);
    out.put_u32_le((body_len + 1) as u32);
    out.put_u8(ty as u8);
}

fn check_len(field: &'static str, len: usize, max: usize) -> Result<(), EncodeError> {
    if len > max {
        return Err(EncodeError::FieldTooLong { field, len, max });
    }
    Ok(())
}

/// Largest body a frame can carry (the length prefix is a `u32` that also
/// counts the type byte).
const MAX_BODY: usize = u32::MAX as usize - 1;

/// Appends a PUBLISH or MESSAGE frame carrying `msg`.
pub fn encode_message(ty: FrameType, msg: &Message, out: &mut BytesMut) -> Result<(), EncodeError> {
    debug_assert!(matches!(ty, FrameType::Publish | FrameType::Message));
    let u16max = u16::MAX as usize;
    check_len("topic", msg.topic.len(), u16max)?;
    if msg.attributes.len() > u16max {
        return Err(EncodeError::TooManyAttributes {
            count: msg.attributes.len(),
            max: u16max,
        });
    }
    let mut body = 1 + 8 + 2 + msg.topic.len() + 2 + msg.payload.len();
    if let Some(k) = &msg.key {
        check_len("key", k.len(), u32::MAX as usize)?;
        body += 4 + k.len();
    }
    for (n, v) in &msg.attributes {
        check_len("attribute_name", n.len(), u16max)?;
        check_len("attribute_value", v.len(), u16max)?;
        body += 4 + n.len() + v.len();
    }
    check_len("body", body, MAX_BODY)?;
    put_header(ty, body, out);
    out.put_u8(if msg.key.is_some() { FLAG_KEY } else { 0 });
    out.put_u64_le(msg.timestamp_ns);
    out.put_u16_le(msg.topic.len() as u16);
    out.put_slice(msg.topic.as_bytes());
    if let Some(k) = &msg.key {
        out.put_u32_le(k.len() as u32);
        out.put_slice(k);
    }
    out.put_u16_le(msg.attributes.len() as u16);
    for (n, v) in &msg.attributes {
        out.put_u16_le(n.len() as u16);
        out.put_slice(n.as_bytes());
        out.put_u16_le(v.len() as u16);
        out.put_slice(v.as_bytes());
    }
    out.put_slice(&msg.payload);
    Ok(())
}

/// Appends a SUBSCRIBE or UNSUBSCRIBE frame for `pattern`.
pub fn encode_text(ty: FrameType, pattern: &str, out: &mut BytesMut) -> Result<(), EncodeError> {
    check_len("pattern", pattern.len(), MAX_BODY)?;
    put_header(ty, pattern.len(), out);
    out.put_slice(pattern.as_bytes());
    Ok(())
}

/// Appends an ECHO frame (request or reply).
pub fn encode_echo(
    options: i32,
    send_time_ns: i64,
    correlation_id: i64,
    extra: &[u8],
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    check_len("extra", extra.len(), MAX_BODY - Echo::HEADER_LEN)?;
    put_header(FrameType::Echo, Echo::HEADER_LEN + extra.len(), out);
    out.put_i32_le(options);
    out.put_i64_le(send_time_ns);
    out.put_i64_le(correlation_id);
    out.put_slice(extra);
    Ok(())
}

/// Appends a PING or PONG frame carrying `token`.
pub fn encode_token(ty: FrameType, token: u64, out: &mut BytesMut) {
    debug_assert!(matches!(ty, FrameType::Ping | FrameType::Pong));
    put_header(ty, 8, out);
    out.put_u64_le(token);
}

/// Appends an AUTH frame carrying `token` (1 to [`AuthToken::MAX_LEN`] bytes).
pub fn encode_auth(token: &[u8], out: &mut BytesMut) -> Result<(), EncodeError> {
    if token.is_empty() || token.len() > AuthToken::MAX_LEN {
        return Err(EncodeError::BadTokenLength { len: token.len() });
    }
    put_header(FrameType::Auth, token.len(), out);
    out.put_slice(token);
    Ok(())
}

/// Appends an AUTH_OK frame (no body).
pub fn encode_auth_ok(out: &mut BytesMut) {
    put_header(FrameType::AuthOk, 0, out);
}

/// Appends an ERROR frame; `message` is cut to [`MAX_ERROR_TEXT`] bytes (at a
/// character boundary).
pub fn encode_error(code: ErrorCode, message: &str, out: &mut BytesMut) {
    let mut end = message.len().min(MAX_ERROR_TEXT);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let text = &message[..end];
    put_header(FrameType::Error, 2 + text.len(), out);
    out.put_u16_le(code.as_u16());
    out.put_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Result<Option<Frame>, DecodeError> {
        let mut b = BytesMut::from(bytes);
        decode_frame(&mut b, 1024)
    }

    #[test]
    fn an_incomplete_frame_asks_for_more() {
        assert_eq!(one(&[]), Ok(None));
        assert_eq!(one(&[9, 0, 0]), Ok(None));
        assert_eq!(one(&[9, 0, 0, 0]), Ok(None));
        assert_eq!(one(&[9, 0, 0, 0, 6, 1, 2]), Ok(None));
    }

    #[test]
    fn oversize_and_unknown_are_reported_before_the_body_arrives() {
        assert_eq!(
            one(&[1, 4, 0, 0]),
            Err(DecodeError::TooLarge {
                length: 1025,
                max: 1024
            })
        );
        assert_eq!(
            one(&[200, 0, 0, 0, 0x7f]),
            Err(DecodeError::UnknownType(0x7f))
        );
        assert_eq!(one(&[0, 0, 0, 0]), Err(DecodeError::EmptyFrame));
    }

    #[test]
    fn a_short_echo_names_the_missing_field() {
        let e = one(&[5, 0, 0, 0, 5, 1, 0, 0, 0]).unwrap_err();
        assert_eq!(
            e,
            DecodeError::Truncated {
                frame: "ECHO",
                field: "send_time_ns",
                needed: 8,
                available: 0
            }
        );
        assert_eq!(e.code(), ErrorCode::TruncatedFrame);
        assert!(e.to_string().contains("send_time_ns"), "{e}");
    }

    #[test]
    fn a_ping_with_trailing_bytes_is_malformed() {
        let e = one(&[10, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 0, 9]).unwrap_err();
        assert_eq!(
            e,
            DecodeError::TrailingBytes {
                frame: "PING",
                extra: 1
            }
        );
        assert_eq!(e.code(), ErrorCode::MalformedFrame);
    }

    #[test]
    fn two_frames_in_one_buffer_decode_in_order() {
        let mut b = BytesMut::new();
        encode_token(FrameType::Ping, 7, &mut b);
        encode_token(FrameType::Pong, 8, &mut b);
        assert_eq!(decode_frame(&mut b, 64), Ok(Some(Frame::Ping(7))));
        assert_eq!(decode_frame(&mut b, 64), Ok(Some(Frame::Pong(8))));
        assert_eq!(decode_frame(&mut b, 64), Ok(None));
        assert!(b.is_empty());
    }

    #[test]
    fn an_auth_token_over_the_limit_is_refused_from_its_prefix() {
        // 1 + 257 bytes announced; only the header has arrived.
        let len = (AuthToken::MAX_LEN + 2) as u32;
        let mut b = len.to_le_bytes().to_vec();
        b.push(FrameType::Auth as u8);
        assert_eq!(
            one(&b),
            Err(DecodeError::BadTokenLength {
                len: AuthToken::MAX_LEN + 1
            })
        );
        assert_eq!(
            one(&[1, 0, 0, 0, 0x09]),
            Err(DecodeError::BadTokenLength { len: 0 })
        );
        let mut out = BytesMut::new();
        assert!(encode_auth(&[b'x'; AuthToken::MAX_LEN + 1], &mut out).is_err());
        assert!(encode_auth(b"", &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn take_frame_reports_the_bytes_a_frame_took_and_never_reserves() {
        let mut b = BytesMut::new();
        encode_auth(b"secret", &mut b).unwrap();
        encode_auth_ok(&mut b);
        b.extend_from_slice(&[200, 0, 0, 0, 0x01]); // a big frame's header
        let (f, n) = take_frame(&mut b, 1024).unwrap().unwrap();
        assert_eq!((f, n), (Frame::Auth(AuthToken::new(&b"secret"[..])), 11));
        assert_eq!(take_frame(&mut b, 1024), Ok(Some((Frame::AuthOk, 5))));
        let cap = b.capacity();
        assert_eq!(take_frame(&mut b, 1024), Ok(None));
        assert_eq!(b.capacity(), cap);
    }

    #[test]
    fn error_text_is_cut_at_a_char_boundary() {
        let mut b = BytesMut::new();
        let long = "é".repeat(MAX_ERROR_TEXT);
        encode_error(ErrorCode::BadTopic, &long, &mut b);
        let Some(Frame::Error(e)) = decode_frame(&mut b, 1 << 20).unwrap() else {
            panic!("not an error frame")
        };
        assert!(e.message.len() <= MAX_ERROR_TEXT);
        assert_eq!(e.code, ErrorCode::BadTopic);
    }
}
