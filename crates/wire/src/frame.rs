//! The values a wire frame carries: [`Frame`] and its parts ([`Echo`],
//! [`ErrorFrame`], [`ErrorCode`], [`FrameType`]).
//!
//! This file only names things; turning them into bytes and back is
//! `codec.rs`. The byte layout of each frame is documented in `docs/wire.md`.

use bytes::Bytes;
use tidegate_hub::Message;

/// The one-byte type tag that follows a frame's length prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Client → server: publish a message into the hub.
    Publish = 0x01,
    /// Client → server: subscribe this connection to a topic pattern.
    Subscribe = 0x02,
    /// Client → server: remove a subscription.
    Unsubscribe = 0x03,
    /// Server → client: a message delivered to a subscription.
    Message = 0x04,
    /// Both ways: the latency probe of seed 002 (request and reply).
    Echo = 0x05,
    /// Client → server: liveness / ordering barrier, answered by `Pong`.
    Ping = 0x06,
    /// Server → client: the answer to `Ping`, carrying its token.
    Pong = 0x07,
    /// Server → client: a protocol or request error.
    Error = 0x08,
    /// Client → server: authenticate with a token (the first frame when the
    /// server has `[wire] tokens`).
    Auth = 0x09,
    /// Server → client: the AUTH was accepted.
    AuthOk = 0x0a,
}

impl FrameType {
    /// The type for a tag byte, if known.
    pub fn from_u8(tag: u8) -> Option<FrameType> {
        Some(match tag {
            0x01 => FrameType::Publish,
            0x02 => FrameType::Subscribe,
            0x03 => FrameType::Unsubscribe,
            0x04 => FrameType::Message,
            0x05 => FrameType::Echo,
            0x06 => FrameType::Ping,
            0x07 => FrameType::Pong,
            0x08 => FrameType::Error,
            0x09 => FrameType::Auth,
            0x0a => FrameType::AuthOk,
            _ => return None,
        })
    }

    /// The frame's name as written in `docs/wire.md` (`PUBLISH`, `ECHO`, …).
    pub fn name(self) -> &'static str {
        match self {
            FrameType::Publish => "PUBLISH",
            FrameType::Subscribe => "SUBSCRIBE",
            FrameType::Unsubscribe => "UNSUBSCRIBE",
            FrameType::Message => "MESSAGE",
            FrameType::Echo => "ECHO",
            FrameType::Ping => "PING",
            FrameType::Pong => "PONG",
            FrameType::Error => "ERROR",
            FrameType::Auth => "AUTH",
            FrameType::AuthOk => "AUTH_OK",
        }
    }
}

/// The latency probe of seed 002 (AsyncTCP's echo frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Echo {
    /// [`Echo::RESPOND`] asks for a reply; any other value asks for none.
    pub options: i32,
    /// The sender's timestamp in nanoseconds (opaque to the server).
    pub send_time_ns: i64,
    /// The sender's correlation id (opaque to the server).
    pub correlation_id: i64,
    /// Padding carried with the request; never echoed back.
    pub extra: Bytes,
}

impl Echo {
    /// `options` value that asks the server to answer.
    pub const RESPOND: i32 = 1;
    /// Bytes of the fixed part of the body: options, send time, correlation id.
    pub const HEADER_LEN: usize = 20;

    /// True when this request asks for a reply.
    pub fn wants_reply(&self) -> bool {
        self.options == Self::RESPOND
    }

    /// The reply: the same 20-byte header, no extra bytes.
    pub fn reply(&self) -> Echo {
        Echo {
            options: self.options,
            send_time_ns: self.send_time_ns,
            correlation_id: self.correlation_id,
            extra: Bytes::new(),
        }
    }
}

/// What an ERROR frame reports. Codes marked *fatal* are followed by the
/// server closing the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 1, fatal: the length prefix exceeds the server's maximum frame size.
    FrameTooLarge,
    /// 2, fatal: the type byte names no known frame.
    UnknownType,
    /// 3, fatal: the body ends before a field its type requires (or the
    /// connection closed in the middle of a frame).
    TruncatedFrame,
    /// 4, fatal: the body is invalid (bad UTF-8, unknown flag bits, trailing
    /// bytes, a zero length, a frame type the client may not send).
    MalformedFrame,
    /// 5: a topic or pattern the hub refuses; the connection stays open.
    BadTopic,
    /// 6, fatal: this subscriber's queue overflowed under the `disconnect`
    /// policy.
    SlowConsumer,
    /// 7, fatal: the client let more reply bytes pile up than the server keeps.
    OutboundOverflow,
    /// 8, fatal: the server is shutting down.
    ShuttingDown,
    /// 9: the connection holds as many subscriptions as the server allows;
    /// the connection stays open.
    TooManySubscriptions,
    /// 10, fatal: the server requires a token and the connection has not
    /// presented a valid one (no AUTH first, or a wrong token).
    Unauthorized,
    /// 11, fatal: a partly received frame did not complete within the read
    /// timeout, or the connection was silent for the idle timeout.
    TimedOut,
    /// A code this implementation does not know (decoded from a newer peer).
    Other(u16),
}

impl ErrorCode {
    /// The numeric code on the wire.
    pub fn as_u16(self) -> u16 {
        match self {
            ErrorCode::FrameTooLarge => 1,
            ErrorCode::UnknownType => 2,
            ErrorCode::TruncatedFrame => 3,
            ErrorCode::MalformedFrame => 4,
            ErrorCode::BadTopic => 5,
            ErrorCode::SlowConsumer => 6,
            ErrorCode::OutboundOverflow => 7,
            ErrorCode::ShuttingDown => 8,
            ErrorCode::TooManySubscriptions => 9,
            ErrorCode::Unauthorized => 10,
            ErrorCode::TimedOut => 11,
            ErrorCode::Other(c) => c,
        }
    }

    /// The code for a numeric value.
    pub fn from_u16(code: u16) -> ErrorCode {
        match code {
            1 => ErrorCode::FrameTooLarge,
            2 => ErrorCode::UnknownType,
            3 => ErrorCode::TruncatedFrame,
            4 => ErrorCode::MalformedFrame,
            5 => ErrorCode::BadTopic,
            6 => ErrorCode::SlowConsumer,
            7 => ErrorCode::OutboundOverflow,
            8 => ErrorCode::ShuttingDown,
            9 => ErrorCode::TooManySubscriptions,
            10 => ErrorCode::Unauthorized,
            11 => ErrorCode::TimedOut,
            c => ErrorCode::Other(c),
        }
    }
}

/// The body of an ERROR frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// What went wrong, as a code a program can branch on.
    pub code: ErrorCode,
    /// The same in words, naming the offending input.
    pub message: String,
}

/// The secret an AUTH frame carries: 1 to [`AuthToken::MAX_LEN`] bytes.
/// Its `Debug` form shows only the length, so a logged frame never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(Bytes);

impl AuthToken {
    /// Longest token, bytes: the AUTH frame a server reads before knowing
    /// who the client is stays small.
    pub const MAX_LEN: usize = 256;

    /// Wraps token bytes (the length is checked when encoding and decoding).
    pub fn new(token: impl Into<Bytes>) -> Self {
        AuthToken(token.into())
    }

    /// The token's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthToken(<{} bytes>)", self.0.len())
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// PUBLISH: a message for the hub.
    Publish(Message),
    /// SUBSCRIBE: a topic pattern (`*` one token, `>` the rest).
    Subscribe(String),
    /// UNSUBSCRIBE: a pattern previously subscribed.
    Unsubscribe(String),
    /// MESSAGE: a message delivered to one of the connection's subscriptions.
    Message(Message),
    /// ECHO: a latency probe (client → server) or its reply (server → client).
    Echo(Echo),
    /// PING with its token.
    Ping(u64),
    /// PONG with the token of the PING it answers.
    Pong(u64),
    /// ERROR.
    Error(ErrorFrame),
    /// AUTH with the client's token.
    Auth(AuthToken),
    /// AUTH_OK: the token was accepted.
    AuthOk,
}

impl Frame {
    /// The type tag of this frame.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Publish(_) => FrameType::Publish,
            Frame::Subscribe(_) => FrameType::Subscribe,
            Frame::Unsubscribe(_) => FrameType::Unsubscribe,
            Frame::Message(_) => FrameType::Message,
            Frame::Echo(_) => FrameType::Echo,
            Frame::Ping(_) => FrameType::Ping,
            Frame::Pong(_) => FrameType::Pong,
            Frame::Error(_) => FrameType::Error,
            Frame::Auth(_) => FrameType::Auth,
            Frame::AuthOk => FrameType::AuthOk,
        }
    }
}
