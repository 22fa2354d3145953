//! Fuzzes the packet decoder on the trickle path: the same bytes decoded in
//! one piece and fed one byte at a time must give the same packets, sizes,
//! CRC, error, and (without an error) the same unfinished bytes and state.
//! Nothing may panic, and memory stays within the (small) limits below.
//!
//! The first byte picks the mode: bit 0 decodes the rest as compressed
//! packets; bit 1 first compresses the rest as NiFi would (so the chunk layer
//! is valid zlib and the packet decoder behind it sees fuzzed bytes).

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tidegate_s2s::codec::{encode_compressed, CodecError, DataPacket, PacketDecoder, PacketLimits};

const LIMITS: PacketLimits = PacketLimits {
    max_attributes: 64,
    max_attribute_bytes: 4 << 10,
    max_attributes_total_bytes: 16 << 10,
    max_content_bytes: 1 << 20,
};

/// Everything a run of the decoder produced.
#[derive(Debug, PartialEq)]
struct Outcome {
    packets: Vec<(DataPacket, usize)>,
    crc: u32,
    error: Option<CodecError>,
    /// Without an error: the bytes left undecoded, what the decoder holds,
    /// and whether it stands between packets.
    left: Option<(Vec<u8>, usize, bool)>,
}

fn run(input: &[u8], piece: usize, gzip: bool) -> Outcome {
    let mut decoder = PacketDecoder::new(gzip, LIMITS);
    let mut crc = crc32fast::Hasher::new();
    let mut buf = BytesMut::new();
    let mut packets = Vec::new();
    for p in input.chunks(piece.max(1)) {
        buf.extend_from_slice(p);
        loop {
            match decoder.decode(&mut buf, &mut crc) {
                Ok(Some(done)) => packets.push(done),
                Ok(None) => break,
                Err(e) => {
                    return Outcome {
                        packets,
                        crc: crc.finalize(),
                        error: Some(e),
                        left: None,
                    }
                }
            }
        }
    }
    Outcome {
        packets,
        crc: crc.finalize(),
        error: None,
        left: Some((buf.to_vec(), decoder.held_bytes(), decoder.is_idle())),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut wrapped = BytesMut::new();
    let (input, gzip) = if mode & 2 != 0 {
        encode_compressed(rest, &mut wrapped);
        (&wrapped[..], true)
    } else {
        (rest, mode & 1 != 0)
    };
    let whole = run(input, input.len(), gzip);
    let trickled = run(input, 1, gzip);
    assert_eq!(whole, trickled, "one piece and byte by byte disagree");
});
