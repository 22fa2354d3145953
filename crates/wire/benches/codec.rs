//! Codec cost per frame: decoding the seed-002 ECHO stream (89-byte frames)
//! and encoding MESSAGE frames, each next to an anchor measured in the same
//! run — a bare scan of the length prefixes (the least any decoder must do)
//! and a bare copy of the same bytes.
//!
//! `cargo bench -p tidegate-wire --bench codec -- --warm-up-time 1 --measurement-time 3`

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use tidegate_hub::Message;
use tidegate_wire::codec::{decode_frame, encode_echo, encode_message};
use tidegate_wire::FrameType;

const FRAMES: usize = 1000;

fn echo_stream() -> BytesMut {
    let mut b = BytesMut::new();
    for i in 0..FRAMES as i64 {
        encode_echo(if i % 100 == 0 { 1 } else { 0 }, i, i, &[0u8; 64], &mut b).unwrap();
    }
    b
}

fn decode(c: &mut Criterion) {
    let stream = echo_stream();
    let mut g = c.benchmark_group("decode_echo_x1000");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("decode_frame", |b| {
        b.iter(|| {
            let mut buf = stream.clone();
            let mut n = 0;
            while let Some(f) = decode_frame(&mut buf, 1 << 20).unwrap() {
                n += black_box(f).frame_type() as usize;
            }
            n
        })
    });
    g.bench_function("anchor_scan_prefixes", |b| {
        b.iter(|| {
            let buf = stream.clone();
            let (mut pos, mut n) = (0usize, 0usize);
            while pos + 4 <= buf.len() {
                let len = u32::from_le_bytes(buf[pos..pos + 4].try_into().unwrap()) as usize;
                n += black_box(buf[pos + 4]) as usize;
                pos += 4 + len;
            }
            n
        })
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let msg = Message::new("orders.eu.paris", Bytes::from(vec![7u8; 100]))
        .with_attribute("source", "bench");
    let mut one = BytesMut::new();
    encode_message(FrameType::Message, &msg, &mut one).unwrap();
    let mut g = c.benchmark_group("encode_message_x1000");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("encode_message", |b| {
        let mut out = BytesMut::with_capacity(one.len() * FRAMES);
        b.iter(|| {
            out.clear();
            for _ in 0..FRAMES {
                encode_message(FrameType::Message, black_box(&msg), &mut out).unwrap();
            }
            out.len()
        })
    });
    g.bench_function("anchor_copy_encoded", |b| {
        let mut out = BytesMut::with_capacity(one.len() * FRAMES);
        b.iter(|| {
            out.clear();
            for _ in 0..FRAMES {
                out.extend_from_slice(black_box(&one));
            }
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
