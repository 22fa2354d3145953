//! Response codes: `52 43 <code>` (`"RC"` + one byte), followed by a
//! `writeUTF` message for the codes that carry one.

use bytes::{BufMut, BytesMut};

use super::reader::{finish, Reader, Stop};
use super::{CodecError, Decoded};

macro_rules! response_codes {
    ($($name:ident = $code:literal, $msg:literal;)*) => {
        /// NiFi's `ResponseCode`, with its wire byte.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum ResponseCode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($code), ")")]
                $name = $code,
            )*
        }

        impl ResponseCode {
            /// The code for a wire byte, if NiFi defines one.
            pub fn from_byte(b: u8) -> Option<Self> {
                match b {
                    $($code => Some(ResponseCode::$name),)*
                    _ => None,
                }
            }

            /// True when a `writeUTF` message follows the code on the wire.
            pub fn has_message(self) -> bool {
                match self {
                    $(ResponseCode::$name => $msg,)*
                }
            }
        }
    };
}

response_codes! {
    Reserved = 0, false;
    PropertiesOk = 1, false;
    ContinueTransaction = 10, false;
    FinishTransaction = 11, false;
    ConfirmTransaction = 12, true;
    TransactionFinished = 13, false;
    TransactionFinishedButDestinationFull = 14, false;
    CancelTransaction = 15, true;
    BadChecksum = 19, false;
    MoreData = 20, false;
    NoMoreData = 21, false;
    UnknownPort = 200, false;
    PortNotInValidState = 201, true;
    PortsDestinationFull = 202, false;
    UnknownPropertyName = 230, true;
    IllegalPropertyValue = 231, true;
    MissingProperty = 232, true;
    Unauthorized = 240, true;
    Abort = 250, true;
    UnrecognizedResponseCode = 254, false;
    EndOfStream = 255, false;
}

impl ResponseCode {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        self as u8
    }
}

/// A response code with its message (empty when the code carries none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The code.
    pub code: ResponseCode,
    /// The message, for codes that carry one.
    pub message: Option<String>,
}

impl Response {
    /// A response without message.
    pub fn new(code: ResponseCode) -> Self {
        Response {
            code,
            message: None,
        }
    }

    /// A response with a message.
    pub fn with_message(code: ResponseCode, message: impl Into<String>) -> Self {
        Response {
            code,
            message: Some(message.into()),
        }
    }
}

/// Appends a response: `RC`, the code byte, and for codes that carry one the
/// message (an empty string when `message` is `None`). A message on a code
/// that carries none is not written.
pub fn encode_response(code: ResponseCode, message: Option<&str>, out: &mut BytesMut) {
    out.put_slice(&[b'R', b'C', code.byte()]);
    if code.has_message() {
        let msg = message.unwrap_or("");
        if super::encode_utf(msg, out).is_err() {
            // Longer than writeUTF allows: send it cut at a char boundary.
            let mut end = 16_000.min(msg.len());
            while !msg.is_char_boundary(end) {
                end -= 1;
            }
            super::encode_utf(&msg[..end], out).expect("a 16 kB string fits writeUTF");
        }
    }
}

/// Decodes one response from the front of `buf`.
pub fn decode_response(buf: &[u8]) -> Decoded<Response> {
    let mut r = Reader::new(buf);
    let v = read_response(&mut r);
    finish(v, r.pos())
}

pub(crate) fn read_response(r: &mut Reader<'_>) -> Result<Response, Stop> {
    let rc = r.take(2)?;
    if rc != b"RC" {
        return Err(Stop::Bad(CodecError::NotAResponse([rc[0], rc[1]])));
    }
    let b = r.u8()?;
    let code = ResponseCode::from_byte(b).ok_or(Stop::Bad(CodecError::UnknownResponseCode(b)))?;
    let message = if code.has_message() {
        Some(r.utf("response message")?)
    } else {
        None
    };
    Ok(Response { code, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_transaction_codes() {
        let cases: &[(ResponseCode, Option<&str>, &[u8])] = &[
            (ResponseCode::PropertiesOk, None, b"RC\x01"),
            (ResponseCode::ContinueTransaction, None, b"RC\x0a"),
            (ResponseCode::FinishTransaction, None, b"RC\x0b"),
            (
                ResponseCode::ConfirmTransaction,
                Some("2946083981"),
                b"RC\x0c\x00\x0a2946083981",
            ),
            (
                ResponseCode::ConfirmTransaction,
                Some(""),
                b"RC\x0c\x00\x00",
            ),
            (ResponseCode::TransactionFinished, None, b"RC\x0d"),
            (
                ResponseCode::TransactionFinishedButDestinationFull,
                None,
                b"RC\x0e",
            ),
            (
                ResponseCode::CancelTransaction,
                Some("no"),
                b"RC\x0f\x00\x02no",
            ),
            (ResponseCode::BadChecksum, None, b"RC\x13"),
            (ResponseCode::MoreData, None, b"RC\x14"),
            (ResponseCode::NoMoreData, None, b"RC\x15"),
            (ResponseCode::UnknownPort, None, b"RC\xc8"),
            (
                ResponseCode::PortNotInValidState,
                Some("x"),
                b"RC\xc9\x00\x01x",
            ),
            (ResponseCode::PortsDestinationFull, None, b"RC\xca"),
            (
                ResponseCode::UnknownPropertyName,
                Some("x"),
                b"RC\xe6\x00\x01x",
            ),
            (
                ResponseCode::IllegalPropertyValue,
                Some("x"),
                b"RC\xe7\x00\x01x",
            ),
            (ResponseCode::MissingProperty, Some("x"), b"RC\xe8\x00\x01x"),
            (ResponseCode::Unauthorized, Some("x"), b"RC\xf0\x00\x01x"),
            (ResponseCode::Abort, Some("x"), b"RC\xfa\x00\x01x"),
        ];
        for (code, msg, bytes) in cases {
            let mut out = BytesMut::new();
            encode_response(*code, *msg, &mut out);
            assert_eq!(&out[..], *bytes, "{code:?}");
            let (r, n) = decode_response(bytes).unwrap().unwrap();
            assert_eq!(n, bytes.len());
            assert_eq!(r.code, *code);
            assert_eq!(r.message.as_deref(), *msg);
            for cut in 0..bytes.len() {
                assert_eq!(decode_response(&bytes[..cut]), Ok(None));
            }
        }
    }

    #[test]
    fn garbage_is_not_a_response() {
        assert_eq!(
            decode_response(b"XY\x01"),
            Err(CodecError::NotAResponse([b'X', b'Y']))
        );
        assert_eq!(
            decode_response(b"RC\x63"),
            Err(CodecError::UnknownResponseCode(0x63))
        );
    }
}
