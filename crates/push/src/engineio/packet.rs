//! One Engine.IO v4 packet: `<type digit><data>` as text, or a binary
//! message (a raw websocket binary frame, `b`+base64 inside a polling
//! payload).

use base64::Engine as _;
use bytes::Bytes;
use thiserror::Error;

/// A decoded Engine.IO packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EioPacket {
    /// `0` + the handshake JSON (server to client only).
    Open(String),
    /// `1`: the session ends.
    Close,
    /// `2` + optional data (`2probe` during an upgrade).
    Ping(String),
    /// `3` + optional data (`3probe` answers the probe).
    Pong(String),
    /// `4` + a text message.
    Message(String),
    /// A binary message.
    Binary(Bytes),
    /// `5`: the client completes a websocket upgrade.
    Upgrade,
    /// `6`: nothing (ends a pending poll during an upgrade).
    Noop,
}

/// Why a packet could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EioError {
    /// Zero bytes where a packet was expected.
    #[error("empty packet")]
    Empty,
    /// The first character is not a packet type.
    #[error("unknown packet type {0:?}")]
    UnknownType(char),
    /// A packet type that carries no data came with some.
    #[error("packet type {0} carries no data")]
    UnexpectedData(char),
    /// `b`+base64 that is not base64.
    #[error("binary packet is not valid base64")]
    BadBase64,
    /// A polling payload that is not UTF-8.
    #[error("payload is not UTF-8")]
    NotUtf8,
    /// More bytes than `maxPayload`.
    #[error("payload of {len} bytes is larger than maxPayload {max}")]
    TooLarge {
        /// Bytes received.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl EioPacket {
    /// Decodes one text packet (a websocket text frame, or one part of a
    /// polling payload that does not start with `b`).
    pub fn decode_text(text: &str) -> Result<EioPacket, EioError> {
        let mut chars = text.chars();
        let kind = chars.next().ok_or(EioError::Empty)?;
        let data = chars.as_str();
        let no_data = |p: EioPacket| {
            if data.is_empty() {
                Ok(p)
            } else {
                Err(EioError::UnexpectedData(kind))
            }
        };
        match kind {
            '0' => Ok(EioPacket::Open(data.to_owned())),
            '1' => no_data(EioPacket::Close),
            '2' => Ok(EioPacket::Ping(data.to_owned())),
            '3' => Ok(EioPacket::Pong(data.to_owned())),
            '4' => Ok(EioPacket::Message(data.to_owned())),
            '5' => no_data(EioPacket::Upgrade),
            '6' => no_data(EioPacket::Noop),
            other => Err(EioError::UnknownType(other)),
        }
    }

    /// Decodes the base64 text after a polling payload's `b` prefix.
    pub fn decode_base64(b64: &str) -> Result<EioPacket, EioError> {
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(|v| EioPacket::Binary(Bytes::from(v)))
            .map_err(|_| EioError::BadBase64)
    }

    /// Appends the text form of this packet to `out`: binary becomes
    /// `b`+base64 (the polling form; a websocket sends the raw bytes).
    pub fn encode_text(&self, out: &mut String) {
        let (kind, data) = match self {
            EioPacket::Open(d) => ('0', d.as_str()),
            EioPacket::Close => ('1', ""),
            EioPacket::Ping(d) => ('2', d.as_str()),
            EioPacket::Pong(d) => ('3', d.as_str()),
            EioPacket::Message(d) => ('4', d.as_str()),
            EioPacket::Upgrade => ('5', ""),
            EioPacket::Noop => ('6', ""),
            EioPacket::Binary(b) => {
                out.push('b');
                base64::engine::general_purpose::STANDARD.encode_string(b, out);
                return;
            }
        };
        out.push(kind);
        out.push_str(data);
    }

    /// The text form as a new string.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.encode_text(&mut s);
        s
    }
}

/// `b` + base64 of `bytes`: a binary message inside a polling payload.
pub fn base64_form(bytes: &[u8]) -> Bytes {
    let mut s = String::with_capacity(1 + bytes.len().div_ceil(3) * 4);
    s.push('b');
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut s);
    Bytes::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_packet_type_decodes() {
        assert_eq!(EioPacket::decode_text("1"), Ok(EioPacket::Close));
        assert_eq!(
            EioPacket::decode_text("2probe"),
            Ok(EioPacket::Ping("probe".into()))
        );
        assert_eq!(EioPacket::decode_text("3"), Ok(EioPacket::Pong("".into())));
        assert_eq!(
            EioPacket::decode_text("4héllo"),
            Ok(EioPacket::Message("héllo".into()))
        );
        assert_eq!(EioPacket::decode_text("5"), Ok(EioPacket::Upgrade));
        assert_eq!(EioPacket::decode_text("6"), Ok(EioPacket::Noop));
        assert_eq!(EioPacket::decode_text(""), Err(EioError::Empty));
        assert_eq!(
            EioPacket::decode_text("9x"),
            Err(EioError::UnknownType('9'))
        );
        assert_eq!(
            EioPacket::decode_text("5x"),
            Err(EioError::UnexpectedData('5'))
        );
        assert_eq!(EioPacket::decode_base64("!!"), Err(EioError::BadBase64));
    }

    #[test]
    fn binary_is_b_plus_base64_in_text_form() {
        let p = EioPacket::Binary(Bytes::from_static(&[1, 2, 3, 4]));
        assert_eq!(p.to_text(), "bAQIDBA==");
        assert_eq!(&base64_form(&[1, 2, 3, 4])[..], b"bAQIDBA==");
        assert_eq!(EioPacket::decode_base64("AQIDBA=="), Ok(p));
    }
}
