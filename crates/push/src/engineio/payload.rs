//! The polling payload: Engine.IO packets joined by the record separator
//! `\x1e`, binary ones as `b`+base64, the whole within `maxPayload`.

use super::packet::{EioError, EioPacket};

/// The separator between packets of one polling payload.
pub const SEPARATOR: char = '\x1e';

/// Decodes a POSTed polling body into its packets. The body is checked
/// against `max_payload` before anything is decoded.
pub fn decode_payload(body: &[u8], max_payload: usize) -> Result<Vec<EioPacket>, EioError> {
    if body.len() > max_payload {
        return Err(EioError::TooLarge {
            len: body.len(),
            max: max_payload,
        });
    }
    let text = std::str::from_utf8(body).map_err(|_| EioError::NotUtf8)?;
    text.split(SEPARATOR)
        .map(|part| match part.strip_prefix('b') {
            Some(b64) => EioPacket::decode_base64(b64),
            None => EioPacket::decode_text(part),
        })
        .collect()
}

/// Joins already-encoded packet texts into one payload, taking packets from
/// the front of `parts` while the payload stays within `max_payload` (at
/// least one is always taken, so an oversize packet cannot wedge a session).
/// Returns the payload and how many parts it holds.
///
/// Two passes: the first measures what fits, so the body (up to
/// maxPayload, a megabyte) is allocated once instead of grown by doubling.
pub fn encode_payload<'a, I>(parts: I, max_payload: usize) -> (Vec<u8>, usize)
where
    I: IntoIterator<Item = &'a [u8]>,
    I::IntoIter: Clone,
{
    let parts = parts.into_iter();
    let (mut len, mut n) = (0usize, 0usize);
    for p in parts.clone() {
        let extra = p.len() + usize::from(n > 0);
        if n > 0 && len + extra > max_payload {
            break;
        }
        len += extra;
        n += 1;
    }
    let mut out = Vec::with_capacity(len);
    for (i, p) in parts.take(n).enumerate() {
        if i > 0 {
            out.push(SEPARATOR as u8);
        }
        out.extend_from_slice(p);
    }
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    #[test]
    fn the_spec_example_decodes() {
        let got = decode_payload(b"4hello\x1e2\x1e4world\x1ebAQI=", 100).unwrap();
        assert_eq!(
            got,
            vec![
                EioPacket::Message("hello".into()),
                EioPacket::Ping("".into()),
                EioPacket::Message("world".into()),
                EioPacket::Binary(Bytes::from_static(&[1, 2])),
            ]
        );
    }

    #[test]
    fn oversize_and_garbage_are_refused() {
        assert!(matches!(
            decode_payload(&[b'4'; 11], 10),
            Err(EioError::TooLarge { len: 11, max: 10 })
        ));
        assert_eq!(decode_payload(&[0xff, 0xfe], 10), Err(EioError::NotUtf8));
        assert_eq!(decode_payload(b"4a\x1e\x1e4b", 10), Err(EioError::Empty));
    }

    #[test]
    fn encoding_stops_at_max_payload_but_takes_one() {
        let parts: Vec<&[u8]> = vec![b"4aaaa", b"4bbbb", b"4cccc"];
        let (out, n) = encode_payload(parts.iter().copied(), 11);
        assert_eq!((out.as_slice(), n), (&b"4aaaa\x1e4bbbb"[..], 2));
        let (out, n) = encode_payload(parts.iter().copied(), 2);
        assert_eq!((out.as_slice(), n), (&b"4aaaa"[..], 1));
    }

    fn packet() -> impl Strategy<Value = EioPacket> {
        // Message text must not contain the separator (the protocol cannot
        // carry it in polling); everything else round-trips.
        let text = "[^\u{1e}]{0,40}";
        prop_oneof![
            Just(EioPacket::Close),
            text.prop_map(EioPacket::Ping),
            text.prop_map(EioPacket::Pong),
            text.prop_map(EioPacket::Message),
            Just(EioPacket::Upgrade),
            Just(EioPacket::Noop),
            proptest::collection::vec(any::<u8>(), 0..64)
                .prop_map(|v| EioPacket::Binary(Bytes::from(v))),
        ]
    }

    proptest! {
        #[test]
        fn payloads_round_trip(packets in proptest::collection::vec(packet(), 1..8)) {
            let texts: Vec<String> = packets.iter().map(EioPacket::to_text).collect();
            let (body, n) = encode_payload(texts.iter().map(|t| t.as_bytes()), usize::MAX);
            prop_assert_eq!(n, packets.len());
            prop_assert_eq!(decode_payload(&body, usize::MAX).unwrap(), packets);
        }

        #[test]
        fn any_bytes_decode_without_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_payload(&body, 128);
        }
    }
}
