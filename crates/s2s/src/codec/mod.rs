//! The Site-to-Site wire format, pure: bytes in, values out, no I/O.
//!
//! The small messages of a connection (magic, handshake, requests, response
//! codes, peer lists) are decoded by functions that take the bytes received
//! so far and answer `Ok(Some((value, consumed)))`, `Ok(None)` when more
//! bytes are needed, or a [`CodecError`] when the input can never become
//! valid. FlowFile packets, which can be large and arrive in many reads, go
//! through the resumable [`PacketDecoder`] instead, which never decodes a
//! byte twice. Encoders append to a `BytesMut`. Sizes are bounded by
//! [`PacketLimits`] before anything is allocated, so hostile input cannot
//! make a decoder allocate without bound.
//!
//! Not here: sockets, timeouts, transactions (see `server` and `client`).

mod compression;
mod error;
mod handshake;
mod packet;
mod packet_decoder;
mod peers;
mod reader;
mod response;
mod utf;

pub use compression::{encode_compressed, COMPRESSION_CHUNK, MAX_CHUNK, SYNC};
pub use error::CodecError;
pub use handshake::{
    decode_handshake, decode_magic, decode_request, decode_resource_offer, decode_resource_reply,
    encode_handshake, encode_request, encode_resource_offer, encode_resource_reply, Handshake,
    RequestType, ResourceOffer, ResourceReply, CODEC_NAME, CODEC_VERSION, MAGIC, PROTOCOL_NAME,
    PROTOCOL_VERSION,
};
pub use packet::{encode_packet, encode_packet_header, DataPacket, PacketLimits};
pub use packet_decoder::PacketDecoder;
pub use peers::{decode_peer_list, encode_peer_list, PeerInfo, MAX_PEER_HOST_BYTES};
pub use response::{decode_response, encode_response, Response, ResponseCode};
pub(crate) use utf::modified_utf8_len;
pub use utf::{decode_utf, encode_utf};

/// What every decoder returns: a value and the bytes it used, `None` for
/// "need more bytes", or an error for input that can never be valid.
pub type Decoded<T> = Result<Option<(T, usize)>, CodecError>;

/// The CRC32 (IEEE, as `java.util.zip.CRC32`) of a transaction's
/// uncompressed packet bytes, rendered as NiFi sends it: a decimal string.
pub fn checksum_string(crc: &crc32fast::Hasher) -> String {
    crc.clone().finalize().to_string()
}

#[cfg(test)]
mod proptests {
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;

    use super::*;

    fn attrs() -> impl Strategy<Value = Vec<(String, String)>> {
        prop::collection::vec((".{0,20}", ".{0,40}"), 0..8)
    }

    proptest! {
        #[test]
        fn packets_round_trip(a in attrs(), content in prop::collection::vec(any::<u8>(), 0..5000), gzip in any::<bool>()) {
            let p = DataPacket { attributes: a, content: Bytes::from(content) };
            let mut plain = BytesMut::new();
            encode_packet(&p, &mut plain);
            let mut wire = BytesMut::new();
            if gzip { encode_compressed(&plain, &mut wire) } else { wire.extend_from_slice(&plain) }
            let mut crc = crc32fast::Hasher::new();
            let mut decoder = PacketDecoder::new(gzip, PacketLimits::default());
            let (q, n) = decoder.decode(&mut wire, &mut crc).unwrap().unwrap();
            prop_assert_eq!(q, p);
            prop_assert_eq!(n, plain.len());
            prop_assert!(wire.is_empty());
            prop_assert!(decoder.is_idle());
            prop_assert_eq!(crc.finalize(), crc32fast::hash(&plain));
        }

        #[test]
        fn handshakes_round_trip(id in ".{0,40}", uri in ".{0,40}", props in attrs()) {
            let h = Handshake { comms_id: id, transit_uri: uri, properties: props };
            let mut out = BytesMut::new();
            encode_handshake(&h, &mut out).unwrap();
            let (g, n) = decode_handshake(&out).unwrap().unwrap();
            prop_assert_eq!(g, h);
            prop_assert_eq!(n, out.len());
        }

        #[test]
        fn utf_round_trips(s in ".{0,300}") {
            let mut out = BytesMut::new();
            encode_utf(&s, &mut out).unwrap();
            prop_assert_eq!(decode_utf(&out).unwrap().unwrap(), (s, out.len()));
        }

        #[test]
        fn responses_round_trip(b in any::<u8>(), msg in ".{0,50}") {
            if let Some(code) = ResponseCode::from_byte(b) {
                let mut out = BytesMut::new();
                encode_response(code, Some(&msg), &mut out);
                let (r, n) = decode_response(&out).unwrap().unwrap();
                prop_assert_eq!(r.code, code);
                prop_assert_eq!(n, out.len());
                if code.has_message() { prop_assert_eq!(r.message, Some(msg)); }
            }
        }

        #[test]
        fn peer_lists_round_trip(hosts in prop::collection::vec(("[a-z.]{1,20}", any::<i32>(), any::<bool>(), any::<i32>()), 0..5)) {
            let peers: Vec<PeerInfo> = hosts.into_iter().map(|(host, port, secure, flow_file_count)| PeerInfo { host, port, secure, flow_file_count }).collect();
            let mut out = BytesMut::new();
            encode_peer_list(&peers, &mut out).unwrap();
            prop_assert_eq!(decode_peer_list(&out).unwrap().unwrap(), (peers, out.len()));
        }

        #[test]
        fn resource_offers_round_trip(name in ".{0,40}", version in any::<i32>()) {
            let offer = ResourceOffer { name, version };
            let mut out = BytesMut::new();
            encode_resource_offer(&offer, &mut out).unwrap();
            prop_assert_eq!(decode_resource_offer(&out).unwrap().unwrap(), (offer, out.len()));
        }

        #[test]
        fn resource_replies_round_trip(kind in 0u8..3, version in any::<i32>(), msg in ".{0,50}") {
            let reply = match kind {
                0 => ResourceReply::Ok,
                1 => ResourceReply::DifferentVersion(version),
                _ => ResourceReply::Abort(msg),
            };
            let mut out = BytesMut::new();
            encode_resource_reply(&reply, &mut out);
            prop_assert_eq!(decode_resource_reply(&out).unwrap().unwrap(), (reply, out.len()));
        }

        #[test]
        fn decoders_never_panic_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            for gzip in [false, true] {
                let mut buf = BytesMut::from(&bytes[..]);
                let mut d = PacketDecoder::new(gzip, PacketLimits::default());
                while let Ok(Some(_)) = d.decode(&mut buf, &mut crc32fast::Hasher::new()) {}
            }
            let _ = decode_handshake(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_request(&bytes);
            let _ = decode_peer_list(&bytes);
            let _ = decode_resource_offer(&bytes);
            let _ = decode_resource_reply(&bytes);
        }
    }
}
