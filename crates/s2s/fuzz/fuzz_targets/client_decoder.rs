//! Fuzzes everything the RAW client (the S2S sink's, talking to a real
//! NiFi) decodes from the server, in the order a connection presents it:
//! the protocol reply, the handshake's response code, the codec reply,
//! then peer lists, response codes and FlowFile packets (plain or
//! compressed) in the order the first bytes choose. Nothing may panic,
//! allocate past the limits, or consume more than it was given; each small
//! message survives its encoder (decode(encode(x)) == x, wherever the
//! encoder takes x: a string of more than 64 KiB in Java's encoding is
//! refused by `writeUTF`, a peer host longer than the limit in Java's
//! encoding by the peer-list encoder).
#![no_main]

use bytes::{Buf, BytesMut};
use libfuzzer_sys::fuzz_target;
use tidegate_s2s::codec::{
    decode_peer_list, decode_resource_reply, decode_response, encode_peer_list,
    encode_resource_reply, encode_response, encode_utf, CodecError, Decoded, PacketDecoder,
    PacketLimits, ResourceReply, Response, MAX_CHUNK, MAX_PEER_HOST_BYTES,
};

/// Every small decoder the client uses on `buf`, each checked against its
/// encoder.
fn round_trips(buf: &[u8]) {
    let fits = |s: &str| encode_utf(s, &mut BytesMut::new()).is_ok();
    if let Ok(Some((r, n))) = decode_resource_reply(buf) {
        assert!(n <= buf.len());
        if !matches!(&r, ResourceReply::Abort(m) if !fits(m)) {
            let mut out = BytesMut::new();
            encode_resource_reply(&r, &mut out);
            assert_eq!(decode_resource_reply(&out), Ok(Some((r, out.len()))));
        }
    }
    if let Ok(Some((r, n))) = decode_response(buf) {
        assert!(n <= buf.len());
        assert_eq!(r.message.is_some(), r.code.has_message());
        if r.message.as_deref().is_none_or(fits) {
            let mut out = BytesMut::new();
            encode_response(r.code, r.message.as_deref(), &mut out);
            assert_eq!(decode_response(&out), Ok(Some((r, out.len()))));
        }
    }
    if let Ok(Some((peers, n))) = decode_peer_list(buf) {
        assert!(n <= buf.len());
        // A host is bounded on the wire; written back in Java's form (a raw
        // NUL byte becomes `C0 80`) it may no longer fit, and the encoder
        // refuses the list, writing nothing.
        let java_len = |h: &str| {
            let mut b = BytesMut::new();
            encode_utf(h, &mut b).map_or(usize::MAX, |()| b.len() - 2)
        };
        let mut out = BytesMut::new();
        let encoded = encode_peer_list(&peers, &mut out);
        if peers
            .iter()
            .all(|p| java_len(&p.host) as u64 <= MAX_PEER_HOST_BYTES)
        {
            assert_eq!(encoded, Ok(()));
            assert_eq!(decode_peer_list(&out), Ok(Some((peers, out.len()))));
        } else {
            assert!(matches!(
                encoded,
                Err(CodecError::TooLarge {
                    what: "peer host",
                    ..
                })
            ));
            assert!(out.is_empty());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    // Byte 0: compression; bytes 1..4: which decoder each later step uses.
    let (head, rest) = data.split_at(4);
    round_trips(rest);
    let gzip = head[0] & 1 == 1;
    let choices = [head[1], head[2], head[3]];
    let limits = PacketLimits {
        max_content_bytes: 1 << 20,
        ..PacketLimits::default()
    };
    let mut buf = BytesMut::from(rest);
    fn step<T>(buf: &mut BytesMut, d: impl Fn(&[u8]) -> Decoded<T>) -> Option<T> {
        match d(&buf[..]) {
            Ok(Some((v, n))) => {
                assert!(n <= buf.len());
                buf.advance(n);
                Some(v)
            }
            _ => None,
        }
    }
    // Connection set-up, as `RawClient::connect_with` reads it.
    if step(&mut buf, decode_resource_reply) != Some(ResourceReply::Ok) {
        return;
    }
    let Some(Response { .. }) = step(&mut buf, decode_response) else {
        return;
    };
    if step(&mut buf, decode_resource_reply).is_none() {
        return;
    }
    // Then what the transactions read.
    let mut crc = crc32fast::Hasher::new();
    let mut packets = PacketDecoder::new(gzip, limits);
    for i in 0..64 {
        if buf.is_empty() {
            return;
        }
        round_trips(&buf);
        let c = choices[i % 3] >> (2 * (i / 3 % 4));
        let ok = match c % 3 {
            0 => step(&mut buf, decode_peer_list).is_some(),
            1 => {
                let before = buf.len();
                let done = packets.decode(&mut buf, &mut crc);
                assert!(buf.len() <= before);
                assert!(packets.held_bytes() as u64 <= limits.max_packet_bytes() + MAX_CHUNK);
                matches!(done, Ok(Some(_)))
            }
            _ => step(&mut buf, decode_response).is_some(),
        };
        if !ok {
            return;
        }
    }
});
