//! The packet decoder against its encoder, property-tested: transactions of
//! packets, plain or compressed, cut at random points, decode to what was
//! encoded; and any bytes decode alike in one piece and byte by byte.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tidegate_s2s::codec::{
    encode_compressed, encode_packet, encode_packet_header, CodecError, DataPacket, PacketDecoder,
    PacketLimits,
};

fn packet() -> impl Strategy<Value = DataPacket> {
    let attrs = prop::collection::vec((".{0,12}", ".{0,30}"), 0..6);
    // Up to 9 kB: both sides of the decoder's 4 KiB copy-or-share threshold.
    let content = prop::collection::vec(any::<u8>(), 0..9_000);
    (attrs, content).prop_map(|(attributes, content)| DataPacket {
        attributes,
        content: Bytes::from(content),
    })
}

/// The wire bytes of `packets` and their uncompressed bytes (the CRC's input).
fn encode(packets: &[DataPacket], gzip: bool) -> (Vec<u8>, Vec<u8>) {
    let (mut wire, mut plain) = (BytesMut::new(), BytesMut::new());
    for p in packets {
        let mut one = BytesMut::new();
        encode_packet(p, &mut one);
        if gzip {
            encode_compressed(&one, &mut wire);
        } else {
            wire.extend_from_slice(&one);
        }
        plain.extend_from_slice(&one);
    }
    (wire.to_vec(), plain.to_vec())
}

/// What decoding `wire` cut at `cuts` gave: packets, CRC, and the first
/// error or (without one) the bytes left over and whether the decoder
/// stands between packets.
#[derive(Debug, PartialEq)]
struct Outcome {
    packets: Vec<(DataPacket, usize)>,
    crc: u32,
    end: Result<(Vec<u8>, usize, bool), CodecError>,
}

fn decode_in_pieces(wire: &[u8], cuts: &[usize], gzip: bool, limits: PacketLimits) -> Outcome {
    let mut decoder = PacketDecoder::new(gzip, limits);
    let mut crc = crc32fast::Hasher::new();
    let mut buf = BytesMut::new();
    let mut packets = Vec::new();
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    cuts.push(wire.len());
    cuts.sort_unstable();
    let mut from = 0;
    for to in cuts {
        buf.extend_from_slice(&wire[from..to]);
        from = to;
        loop {
            match decoder.decode(&mut buf, &mut crc) {
                Ok(Some(done)) => packets.push(done),
                Ok(None) => break,
                Err(e) => {
                    return Outcome {
                        packets,
                        crc: crc.finalize(),
                        end: Err(e),
                    }
                }
            }
        }
    }
    Outcome {
        packets,
        crc: crc.finalize(),
        end: Ok((buf.to_vec(), decoder.held_bytes(), decoder.is_idle())),
    }
}

proptest! {
    #[test]
    fn packets_round_trip_at_random_split_points(
        packets in prop::collection::vec(packet(), 1..4),
        gzip in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let (wire, plain) = encode(&packets, gzip);
        let got = decode_in_pieces(&wire, &cuts, gzip, PacketLimits::default());
        let want: Vec<(DataPacket, usize)> =
            packets.iter().map(|p| (p.clone(), p.encoded_len())).collect();
        prop_assert_eq!(got.packets, want);
        prop_assert_eq!(got.crc, crc32fast::hash(&plain));
        prop_assert_eq!(got.end, Ok((Vec::new(), 0, true)));
    }

    #[test]
    fn any_bytes_decode_alike_in_one_piece_and_byte_by_byte(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        gzip in any::<bool>(),
    ) {
        let limits = PacketLimits { max_content_bytes: 1 << 16, ..PacketLimits::default() };
        let every_byte: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(
            decode_in_pieces(&bytes, &[], gzip, limits),
            decode_in_pieces(&bytes, &every_byte, gzip, limits)
        );
    }

    #[test]
    fn a_cut_transaction_decodes_alike_in_one_piece_and_byte_by_byte(
        packets in prop::collection::vec(packet(), 1..3),
        gzip in any::<bool>(),
        keep in any::<usize>(),
    ) {
        // Valid bytes cut short: both ways stop at the same field, holding
        // the same bytes.
        let (wire, _) = encode(&packets, gzip);
        let wire = &wire[..keep % (wire.len() + 1)];
        let every_byte: Vec<usize> = (0..wire.len()).collect();
        prop_assert_eq!(
            decode_in_pieces(wire, &[], gzip, PacketLimits::default()),
            decode_in_pieces(wire, &every_byte, gzip, PacketLimits::default())
        );
    }
}

#[test]
fn a_large_flowfile_in_small_pieces_holds_only_what_arrived() {
    // 32 MiB announced; 1 MiB sent in 1 KiB pieces.
    let mut buf = BytesMut::new();
    encode_packet_header(&[("filename".into(), "big".into())], 32 << 20, &mut buf);
    let header = buf.len();
    let mut decoder = PacketDecoder::new(false, PacketLimits::default());
    let mut crc = crc32fast::Hasher::new();
    assert_eq!(decoder.decode(&mut buf, &mut crc), Ok(None));
    assert!(buf.is_empty(), "the header is taken once whole");
    let piece = [7u8; 1024];
    for _ in 0..1024 {
        buf.extend_from_slice(&piece);
        assert_eq!(decoder.decode(&mut buf, &mut crc), Ok(None));
    }
    // The content waits in the reader's buffer, which grew with it.
    assert_eq!(buf.len(), 1 << 20);
    assert!(buf.capacity() <= 2 << 20, "capacity {}", buf.capacity());
    assert_eq!(decoder.held_bytes(), header);
    assert_eq!(decoder.announced_bytes(), (header + (32 << 20)) as u64);
    assert_eq!(decoder.next_field_len(), 32 << 20);
}

#[test]
fn a_content_length_over_the_limit_is_refused_before_any_content() {
    let mut buf = BytesMut::new();
    encode_packet_header(&[], 256 << 20, &mut buf);
    let mut decoder = PacketDecoder::new(false, PacketLimits::default());
    assert_eq!(
        decoder.decode(&mut buf, &mut crc32fast::Hasher::new()),
        Err(CodecError::TooLarge {
            what: "content length",
            value: 256 << 20,
            limit: 64 << 20,
        })
    );
}
