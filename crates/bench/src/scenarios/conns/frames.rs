//! What a `partial` or `trickle` connection of `tidegate bench conns` sends:
//! the start of a frame announcing the largest size its listener accepts,
//! built with the protocol's own client codec, and the bytes that would
//! follow it (trickled one a second). Pure: bytes out, no sockets, no clock.
//!
//! Not for sending valid traffic — a frame here is never finished.

use bytes::{Bytes, BytesMut};
use tidegate_forward::codec::encode::{write_packed_forward, EntriesWrap, MessageOption};
use tidegate_hub::Message;
use tidegate_s2s::codec::encode_packet_header;
use tidegate_wire::codec::{encode_message, FRAME_HEADER};
use tidegate_wire::sockperf_header::{SockperfHeader, FLAG_CLIENT, FLAG_PONG_REQUEST, HEADER_LEN};
use tidegate_wire::FrameType;

/// Most continuation bytes kept for trickling, one a second (18 hours).
pub const TAIL_BYTES: usize = 64 * 1024;
/// The Content-Length an HTTP connection announces (1 TiB).
pub const HTTP_ANNOUNCED_BYTES: u64 = 1 << 40;
/// Topic of the announced wire PUBLISH, and tag of the Forward chunk.
const TOPIC: &str = "bench.conns";

/// A frame that is announced and never finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalledFrame {
    /// Sent at once: the frame's header, up to where its body's bulk starts.
    pub head: Bytes,
    /// What follows, sent one byte a second in `trickle` mode.
    pub tail: Bytes,
    /// The size the head announces, bytes.
    pub announced: u64,
}

/// The first `head_len` bytes of `full` and up to [`TAIL_BYTES`] after them.
fn split(full: &[u8], head_len: usize, announced: u64) -> StalledFrame {
    let tail_end = full.len().min(head_len + TAIL_BYTES);
    StalledFrame {
        head: Bytes::copy_from_slice(&full[..head_len]),
        tail: Bytes::copy_from_slice(&full[head_len..tail_end]),
        announced,
    }
}

/// A wire PUBLISH whose length prefix is `max_frame` (the listener's
/// `max_frame`): head = length, type, flags, timestamp and topic; the
/// payload follows.
pub fn wire(max_frame: usize) -> anyhow::Result<StalledFrame> {
    // Length prefix = type byte + flags 1 + timestamp 8 + topic length 2 +
    // topic + attribute count 2 + payload.
    let fixed = 1 + 1 + 8 + 2 + TOPIC.len() + 2;
    anyhow::ensure!(
        max_frame > fixed,
        "a wire frame of {max_frame} bytes is too small to announce"
    );
    let payload = vec![0u8; max_frame - fixed];
    let mut out = BytesMut::new();
    encode_message(FrameType::Publish, &Message::new(TOPIC, payload), &mut out)?;
    Ok(split(&out, FRAME_HEADER + fixed - 1, max_frame as u64))
}

/// A PackedForward message `[tag, str32 entries]` of exactly `max_chunk`
/// bytes in all, the largest the listener's decoder waits for under its
/// `max_chunk_bytes`: head = array, tag and the str32 header announcing the
/// entries; the entries follow.
pub fn forward(max_chunk: usize) -> anyhow::Result<StalledFrame> {
    let total = max_chunk;
    let no_option = MessageOption::default();
    let mut head = Vec::new();
    write_packed_forward(&mut head, TOPIC, &[], EntriesWrap::Str32, &no_option);
    anyhow::ensure!(
        total > head.len(),
        "a Forward chunk of {max_chunk} bytes is too small to announce"
    );
    let entries = vec![0u8; total - head.len()];
    let mut full = Vec::with_capacity(total);
    write_packed_forward(&mut full, TOPIC, &entries, EntriesWrap::Str32, &no_option);
    Ok(split(&full, head.len(), total as u64))
}

/// A Site-to-Site FlowFile packet (sent after `SEND_FLOWFILES`) with no
/// attributes and `max_content` content bytes (the listener's
/// `max_content_bytes`): head = attribute count and content length; the
/// content follows.
pub fn s2s(max_content: u64) -> StalledFrame {
    let mut head = BytesMut::new();
    encode_packet_header(&[], max_content, &mut head);
    let tail_len = (max_content as usize).min(TAIL_BYTES);
    StalledFrame {
        head: head.freeze(),
        tail: Bytes::from(vec![b'x'; tail_len]),
        announced: max_content,
    }
}

/// A sockperf message header announcing `max_message` bytes (the
/// listener's `max_message`, header included) and asking for a reply; the
/// rest of the message follows.
pub fn sockperf(max_message: usize) -> anyhow::Result<StalledFrame> {
    anyhow::ensure!(
        max_message > HEADER_LEN,
        "a sockperf message of {max_message} bytes is too small to announce"
    );
    let header = SockperfHeader {
        sequence: 0,
        flags: FLAG_CLIENT | FLAG_PONG_REQUEST,
        length: u32::try_from(max_message)?,
    };
    Ok(StalledFrame {
        head: Bytes::copy_from_slice(&header.to_bytes()),
        tail: Bytes::from(vec![0u8; (max_message - HEADER_LEN).min(TAIL_BYTES)]),
        announced: max_message as u64,
    })
}

/// An HTTP/1.1 request whose head is never finished: the request line and
/// headers announcing a [`HTTP_ANNOUNCED_BYTES`] body, without the blank
/// line that ends them; trickling continues the header block (a slowloris).
pub fn http(host: &str, port_id: &str) -> StalledFrame {
    let head = format!(
        "POST /nifi-api/data-transfer/input-ports/{port_id}/transactions HTTP/1.1\r\n\
         Host: {host}\r\n\
         Content-Type: application/octet-stream\r\n\
         Content-Length: {HTTP_ANNOUNCED_BYTES}\r\n"
    );
    let mut tail = String::from("X-Trickle: ");
    tail.extend(std::iter::repeat_n('a', TAIL_BYTES - tail.len()));
    StalledFrame {
        head: Bytes::from(head),
        tail: Bytes::from(tail),
        announced: HTTP_ANNOUNCED_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidegate_forward::codec::{ForwardDecoder, Limits};
    use tidegate_wire::codec::peek_header;

    #[test]
    fn the_wire_head_announces_exactly_the_maximum_frame() {
        let f = wire(1 << 20).unwrap();
        let (ty, len) = peek_header(&f.head, 1 << 20).unwrap().unwrap();
        assert_eq!(ty, FrameType::Publish);
        assert_eq!(len, 1 << 20);
        // One byte more than the maximum would be refused at once.
        assert!(peek_header(&f.head, (1 << 20) - 1).is_err());
        assert_eq!(f.tail.len(), TAIL_BYTES);
    }

    #[test]
    fn the_forward_head_is_a_chunk_the_decoder_waits_for() {
        let max = 1 << 20;
        let f = forward(max).unwrap();
        let limits = Limits {
            max_frame_bytes: max,
            ..Limits::default()
        };
        let mut d = ForwardDecoder::new(limits);
        let mut buf = BytesMut::from(&f.head[..]);
        buf.extend_from_slice(&f.tail);
        assert_eq!(
            d.next_value(&mut buf).unwrap(),
            None,
            "incomplete, not refused"
        );
        // The same head against a limit one byte smaller is refused: it is
        // the largest chunk the decoder waits for.
        let mut d = ForwardDecoder::new(Limits {
            max_frame_bytes: max - 1,
            ..limits
        });
        let mut buf = BytesMut::from(&f.head[..]);
        assert!(d.next_value(&mut buf).is_err());
    }

    #[test]
    fn the_s2s_head_announces_the_content_length() {
        let f = s2s(64 << 20);
        assert_eq!(f.head.len(), 12);
        assert_eq!(&f.head[..4], &[0, 0, 0, 0]);
        assert_eq!(
            u64::from_be_bytes(f.head[4..12].try_into().unwrap()),
            64 << 20
        );
    }

    #[test]
    fn the_sockperf_head_is_a_header_asking_for_a_reply() {
        let f = sockperf(65_536).unwrap();
        let h = SockperfHeader::parse(&f.head).unwrap();
        assert_eq!(h.length, 65_536);
        assert!(h.wants_pong());
    }

    #[test]
    fn the_http_head_announces_a_body_and_never_ends() {
        let f = http("127.0.0.1:8080", "input");
        let text = std::str::from_utf8(&f.head).unwrap();
        assert!(text.contains("Content-Length: 1099511627776\r\n"), "{text}");
        assert!(!text.contains("\r\n\r\n"), "{text}");
        assert!(!f.tail.windows(2).any(|w| w == b"\r\n"));
    }
}
