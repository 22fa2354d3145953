//! The packet decoder alone (no sockets, no hub): one 16 MiB FlowFile with
//! 32 attributes, plain and compressed, handed to the decoder in one piece
//! and in 1 KiB pieces. Each iteration copies the wire bytes into a fresh
//! buffer (as a socket read would) and then exposes them to the decoder in
//! pieces without copying them again, decoding after every piece; so the
//! two figures differ only by the decoder's own work, which a resumable
//! decoder keeps the same.
//!
//! `cargo bench -p tidegate-s2s --bench packet_decoder`

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidegate_s2s::codec::{
    encode_compressed, encode_packet, DataPacket, PacketDecoder, PacketLimits,
};

/// Content bytes of the FlowFile.
const CONTENT: usize = 16 << 20;
/// The trickle: bytes per read.
const PIECE: usize = 1 << 10;

/// Text-like content (a 32-letter alphabet from a xorshift), so the
/// compressed variant compresses about as a log file would.
fn flowfile() -> DataPacket {
    let mut x: u32 = 0x9e37_79b9;
    let content: Vec<u8> = (0..CONTENT)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            b"abcdefghijklmnopqrstuvwxyz ,.\n01"[(x % 32) as usize]
        })
        .collect();
    let attributes = (0..32)
        .map(|i| {
            (
                format!("attribute.{i:02}"),
                format!("value of attribute {i}, about forty bytes"),
            )
        })
        .collect();
    DataPacket {
        attributes,
        content: Bytes::from(content),
    }
}

/// Decodes `wire` exposed `piece` bytes at a time; returns the packet's size.
fn decode(wire: &[u8], piece: usize, gzip: bool) -> usize {
    let mut decoder = PacketDecoder::new(gzip, PacketLimits::default());
    let mut crc = crc32fast::Hasher::new();
    let mut unread = BytesMut::from(wire);
    let mut buf = unread.split_to(0);
    while !unread.is_empty() {
        // `unread` continues `buf` in memory: joining them copies nothing.
        buf.unsplit(unread.split_to(piece.min(unread.len())));
        if let Some((packet, n)) = decoder.decode(&mut buf, &mut crc).unwrap() {
            assert_eq!(packet.content.len(), CONTENT);
            return n;
        }
    }
    panic!("the packet did not complete");
}

fn bench(c: &mut Criterion) {
    let mut plain = BytesMut::new();
    encode_packet(&flowfile(), &mut plain);
    let mut compressed = BytesMut::new();
    encode_compressed(&plain, &mut compressed);
    let mut g = c.benchmark_group("decode_16MiB_flowfile");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(plain.len() as u64));
    for (name, wire, gzip) in [("plain", &plain, false), ("gzip", &compressed, true)] {
        g.bench_function(format!("{name}/one_piece"), |b| {
            b.iter(|| decode(wire, wire.len(), gzip))
        });
        g.bench_function(format!("{name}/1KiB_pieces"), |b| {
            b.iter(|| decode(wire, PIECE, gzip))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
