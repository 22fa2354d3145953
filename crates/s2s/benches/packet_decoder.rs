//! The packet decoder alone (no sockets, no hub): one 16 MiB FlowFile with
//! 32 attributes, plain and compressed, handed to the decoder in one piece
//! and in 1 KiB pieces. Each iteration copies the wire bytes into a fresh
//! buffer (as a socket read would) and then exposes them to the decoder in
//! pieces without copying them again, decoding after every piece; so the
//! two figures differ only by the decoder's own work, which a resumable
//! decoder keeps the same.
//!
//! Measured in CPU time of the benchmarking thread, not wall time: the
//! question is what decoding costs, and on a shared machine wall time also
//! counts the time other processes take the core away.
//!
//! `cargo bench -p tidegate-s2s --bench packet_decoder`

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::measurement::{Measurement, ValueFormatter};
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

/// The same-run anchor: [`decode`] without the decoder (the copy into a
/// read buffer and the exposing of pieces), so its own share can be told.
fn feed_only(wire: &[u8], piece: usize) -> usize {
    let mut unread = BytesMut::from(wire);
    let mut buf = unread.split_to(0);
    while !unread.is_empty() {
        buf.unsplit(unread.split_to(piece.min(unread.len())));
        std::hint::black_box(&buf);
    }
    buf.len()
}

fn bench(c: &mut Criterion<ThreadCpu>) {
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
    g.bench_function("plain/one_piece_feed_only", |b| {
        b.iter(|| feed_only(&plain, plain.len()))
    });
    g.bench_function("plain/1KiB_pieces_feed_only", |b| {
        b.iter(|| feed_only(&plain, PIECE))
    });
    g.finish();
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
struct ThreadCpu;

fn thread_cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }

    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

/// Nanoseconds shown as µs/ms, bytes per CPU second as MiB/s or GiB/s.
struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e6 {
            (1e-3, "µs (cpu)")
        } else {
            (1e-6, "ms (cpu)")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        typical_ns: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let bytes = match *throughput {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => b as f64,
            Throughput::Elements(e) => e as f64,
        };
        let (denominator, unit) = if bytes * 1e9 / typical_ns < (1u64 << 30) as f64 {
            ((1u64 << 20) as f64, "MiB/s (cpu)")
        } else {
            ((1u64 << 30) as f64, "GiB/s (cpu)")
        };
        values
            .iter_mut()
            .for_each(|v| *v = bytes * 1e9 / *v / denominator);
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench
}
criterion_main!(benches);
