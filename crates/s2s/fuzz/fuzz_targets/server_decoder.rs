//! Fuzzes everything the RAW server decodes from a client, in the order a
//! connection presents it: magic, protocol offer, handshake, then requests,
//! packets (plain or compressed, chosen by the first byte) and response
//! codes. No input may panic or allocate past the limits.
#![no_main]

use bytes::{Buf, BytesMut};
use libfuzzer_sys::fuzz_target;
use tidegate_s2s::codec::{
    decode_handshake, decode_magic, decode_request, decode_resource_offer, decode_response,
    PacketDecoder, PacketLimits,
};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    // Byte 0: compression; bytes 1..4: which decoder each step uses.
    let (head, rest) = data.split_at(4);
    let gzip = head[0] & 1 == 1;
    let choices = [head[1], head[2], head[3]];
    let limits = PacketLimits {
        max_content_bytes: 1 << 20,
        ..PacketLimits::default()
    };
    let mut buf = BytesMut::from(rest);
    macro_rules! step {
        ($d:expr) => {
            match $d(&buf[..]) {
                Ok(Some((_, n))) => buf.advance(n),
                _ => return,
            }
        };
    }
    step!(decode_magic);
    step!(decode_resource_offer);
    step!(decode_handshake);
    let mut crc = crc32fast::Hasher::new();
    let mut packets = PacketDecoder::new(gzip, limits);
    for i in 0..64 {
        if buf.is_empty() {
            return;
        }
        let c = choices[i % 3] >> (2 * (i / 3 % 4));
        match c % 3 {
            0 => step!(decode_request),
            1 => match packets.decode(&mut buf, &mut crc) {
                Ok(Some(_)) => {}
                _ => return,
            },
            _ => step!(decode_response),
        }
    }
});
