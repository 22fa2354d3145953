//! The sockperf message header and the echo rule, as pure functions (the
//! listener in `sockperf.rs` only moves bytes).
//!
//! Every sockperf message starts with a 14-byte header in network byte order:
//! `u64 sequence`, `u16 flags` (1 = CLIENT, 2 = PONG_REQUEST, 4 = WARMUP),
//! `u32 length` (the whole message, header included; at least 14). A server
//! answers a message that has PONG_REQUEST set by sending the message back
//! unchanged except for the CLIENT bit, which it clears (the stock client
//! ignores replies that still carry it). It answers nothing else.

use thiserror::Error;

/// Bytes of the header.
pub const HEADER_LEN: usize = 14;
/// Flag: the message was sent by a client.
pub const FLAG_CLIENT: u16 = 1;
/// Flag: the sender wants this message echoed.
pub const FLAG_PONG_REQUEST: u16 = 2;
/// Flag: a warm-up message (echoed like any other when asked).
pub const FLAG_WARMUP: u16 = 4;

/// A decoded sockperf header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockperfHeader {
    /// Sequence number.
    pub sequence: u64,
    /// Flag bits (`FLAG_*`).
    pub flags: u16,
    /// Total message length, header included.
    pub length: u32,
}

impl SockperfHeader {
    /// Reads a header from the first 14 bytes of `buf` (`None` if shorter).
    pub fn parse(buf: &[u8]) -> Option<SockperfHeader> {
        let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(SockperfHeader {
            sequence: u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]),
            flags: u16::from_be_bytes([h[8], h[9]]),
            length: u32::from_be_bytes([h[10], h[11], h[12], h[13]]),
        })
    }

    /// The 14 bytes of this header.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&self.sequence.to_be_bytes());
        b[8..10].copy_from_slice(&self.flags.to_be_bytes());
        b[10..].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// True when the sender asked for an echo.
    pub fn wants_pong(&self) -> bool {
        self.flags & FLAG_PONG_REQUEST != 0
    }
}

/// A message length no sockperf peer sends: the connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SockperfError {
    /// Shorter than its own header.
    #[error("sockperf message length {0} is shorter than the 14-byte header")]
    TooShort(u32),
    /// Longer than the configured maximum.
    #[error("sockperf message length {length} exceeds the maximum of {max}")]
    TooLong {
        /// The length field.
        length: u32,
        /// The configured maximum.
        max: usize,
    },
}

/// What one call of [`echo_replies`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Echoed {
    /// Bytes of the input consumed: whole messages only.
    pub consumed: usize,
    /// Messages consumed (echoed or not).
    pub messages: u64,
}

/// Processes every complete message at the front of `input`: appends the
/// echo of each that asks for one to `out`, and says how many bytes and
/// messages of `input` were consumed (a partial message at the end is left
/// for the next call). `max_message` bounds the length field.
pub fn echo_replies(
    input: &[u8],
    max_message: usize,
    out: &mut Vec<u8>,
) -> Result<Echoed, SockperfError> {
    let mut pos = 0;
    let mut messages = 0;
    while let Some(h) = SockperfHeader::parse(&input[pos..]) {
        let len = h.length as usize;
        if len < HEADER_LEN {
            return Err(SockperfError::TooShort(h.length));
        }
        if len > max_message {
            return Err(SockperfError::TooLong {
                length: h.length,
                max: max_message,
            });
        }
        let Some(msg) = input.get(pos..pos + len) else {
            break;
        };
        if h.wants_pong() {
            let start = out.len();
            out.extend_from_slice(msg);
            // Flags are bytes 8..10, big-endian: CLIENT is bit 0 of byte 9.
            out[start + 9] &= !(FLAG_CLIENT as u8);
        }
        pos += len;
        messages += 1;
    }
    Ok(Echoed {
        consumed: pos,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ping-pong request as stock sockperf 3.7 sends it: sequence 7,
    /// CLIENT | PONG_REQUEST, 16 bytes in all.
    const REQUEST: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 7, 0, 3, 0, 0, 0, 16, 0xaa, 0xbb];

    #[test]
    fn the_header_is_big_endian_and_14_bytes() {
        let h = SockperfHeader::parse(&REQUEST).unwrap();
        assert_eq!(
            h,
            SockperfHeader {
                sequence: 7,
                flags: 3,
                length: 16
            }
        );
        assert_eq!(h.to_bytes(), REQUEST[..14]);
        let h2 = SockperfHeader {
            sequence: 0x0102030405060708,
            flags: 0x0a0b,
            length: 0x0c0d0e0f,
        };
        assert_eq!(
            h2.to_bytes(),
            [1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]
        );
        assert_eq!(SockperfHeader::parse(&REQUEST[..13]), None);
    }

    #[test]
    fn a_pong_request_is_echoed_with_client_cleared() {
        let mut out = Vec::new();
        assert_eq!(
            echo_replies(&REQUEST, 1024, &mut out),
            Ok(Echoed {
                consumed: 16,
                messages: 1
            })
        );
        let mut expected = REQUEST;
        expected[9] = 2;
        assert_eq!(out, expected);
    }

    #[test]
    fn messages_without_pong_request_get_no_reply() {
        let mut m = REQUEST;
        m[9] = (FLAG_CLIENT | FLAG_WARMUP) as u8;
        let mut out = Vec::new();
        assert_eq!(echo_replies(&m, 1024, &mut out).unwrap().consumed, 16);
        assert!(out.is_empty());
    }

    #[test]
    fn a_partial_message_is_left_for_later() {
        let mut two = REQUEST.to_vec();
        two.extend_from_slice(&REQUEST[..10]);
        let mut out = Vec::new();
        assert_eq!(
            echo_replies(&two, 1024, &mut out),
            Ok(Echoed {
                consumed: 16,
                messages: 1
            })
        );
        assert_eq!(out.len(), 16);
    }

    #[test]
    fn impossible_lengths_are_errors() {
        let mut m = REQUEST;
        m[13] = 13;
        assert_eq!(
            echo_replies(&m, 1024, &mut Vec::new()),
            Err(SockperfError::TooShort(13))
        );
        m[12] = 0x10;
        assert!(matches!(
            echo_replies(&m, 1024, &mut Vec::new()),
            Err(SockperfError::TooLong { .. })
        ));
    }
}
