//! Fuzzes the Forward stream decoder: arbitrary bytes, fed in arbitrary
//! pieces (the first byte picks the piece size), through framing, every
//! mode, gzip and JSON connections, then the msgpack → JSON transcoder on
//! every record. Nothing may panic, and memory stays within the limits.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tidegate_forward::codec::transcode::msgpack_to_json;
use tidegate_forward::codec::{ForwardDecoder, Limits, RecordBytes};

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(step % 64) + 1;
    let limits = Limits {
        max_frame_bytes: 1 << 16,
        max_decompressed_bytes: 1 << 20,
        max_depth: 32,
    };
    let mut decoder = ForwardDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    for piece in rest.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            events.clear();
            match decoder.decode(&mut buf, &mut events) {
                Ok(Some(_)) => {
                    for e in &events {
                        if let RecordBytes::Msgpack(r) = &e.record {
                            let mut out = Vec::new();
                            let _ = msgpack_to_json(r, limits.max_depth, &mut out);
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
