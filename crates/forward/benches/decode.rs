//! Codec throughput alone (no sockets, no hub): a 1000-record PackedForward
//! chunk of ~100-byte records cut from a stream buffer and decoded, with and
//! without the msgpack → JSON payload conversion.
//!
//! `cargo bench -p tidegate-forward --bench decode`

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidegate_forward::codec::encode::{
    packed_entries, record_from_json, write_packed_forward, EntriesWrap, MessageOption, TimeForm,
};
use tidegate_forward::codec::transcode::msgpack_to_json;
use tidegate_forward::codec::{EventTime, ForwardDecoder, Limits, RecordBytes};

const RECORDS: usize = 1000;

fn chunk() -> Vec<u8> {
    let rec = record_from_json(&serde_json::json!({"message": "x".repeat(84)}));
    let entries = packed_entries(
        &vec![(EventTime::new(1_700_000_000, 1), rec.as_slice()); RECORDS],
        TimeForm::FixExt8,
    );
    let mut out = Vec::new();
    let opt = MessageOption {
        chunk: Some("0123456789abcdef0123456789abcdef"),
        size: Some(RECORDS as u64),
        gzip: false,
    };
    write_packed_forward(&mut out, "bench.app", &entries, EntriesWrap::Str32, &opt);
    out
}

fn bench(c: &mut Criterion) {
    let bytes = chunk();
    let mut g = c.benchmark_group("packed_forward_1000x100B");
    g.throughput(Throughput::Elements(RECORDS as u64));
    let mut events = Vec::with_capacity(RECORDS);
    g.bench_function("decode", |b| {
        let mut d = ForwardDecoder::new(Limits::default());
        b.iter(|| {
            let mut buf = BytesMut::from(&bytes[..]);
            events.clear();
            d.decode(&mut buf, &mut events).unwrap().unwrap();
        })
    });
    g.bench_function("decode_and_json", |b| {
        let mut d = ForwardDecoder::new(Limits::default());
        b.iter(|| {
            let mut buf = BytesMut::from(&bytes[..]);
            events.clear();
            d.decode(&mut buf, &mut events).unwrap().unwrap();
            for e in &events {
                if let RecordBytes::Msgpack(r) = &e.record {
                    let mut out = Vec::with_capacity(r.len() + 32);
                    msgpack_to_json(r, 64, &mut out).unwrap();
                    std::hint::black_box(out);
                }
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
