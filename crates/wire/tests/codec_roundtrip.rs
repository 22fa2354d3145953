//! Property tests of the wire codec: every frame survives encode → decode,
//! whatever way the bytes are split, and arbitrary bytes never panic the
//! decoder.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tidegate_hub::Message;
use tidegate_wire::codec::{decode_frame, encode_frame};
use tidegate_wire::{Echo, ErrorCode, ErrorFrame, Frame};

const MAX: usize = 1 << 20;

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn message() -> impl Strategy<Value = Message> {
    (
        ".{0,40}",
        proptest::option::of(bytes(32)),
        any::<u64>(),
        proptest::collection::vec((".{0,12}", ".{0,24}"), 0..4),
        bytes(256),
    )
        .prop_map(|(topic, key, timestamp_ns, attributes, payload)| Message {
            topic,
            key,
            timestamp_ns,
            attributes,
            payload,
            encoded: Default::default(),
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        message().prop_map(Frame::Publish),
        message().prop_map(Frame::Message),
        ".{0,40}".prop_map(Frame::Subscribe),
        ".{0,40}".prop_map(Frame::Unsubscribe),
        (any::<i32>(), any::<i64>(), any::<i64>(), bytes(128)).prop_map(|(o, t, c, extra)| {
            Frame::Echo(Echo {
                options: o,
                send_time_ns: t,
                correlation_id: c,
                extra,
            })
        }),
        any::<u64>().prop_map(Frame::Ping),
        any::<u64>().prop_map(Frame::Pong),
        (any::<u16>(), ".{0,60}").prop_map(|(c, m)| Frame::Error(ErrorFrame {
            code: ErrorCode::from_u16(c),
            message: m,
        })),
    ]
}

proptest! {
    #[test]
    fn every_frame_round_trips(f in frame()) {
        let mut buf = BytesMut::new();
        encode_frame(&f, &mut buf).unwrap();
        prop_assert_eq!(decode_frame(&mut buf, MAX), Ok(Some(f)));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_stream_of_frames_decodes_the_same_however_it_is_split(
        frames in proptest::collection::vec(frame(), 1..8),
        chunk in 1usize..97,
    ) {
        let mut wire = BytesMut::new();
        for f in &frames {
            encode_frame(f, &mut wire).unwrap();
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in wire.chunks(chunk) {
            buf.extend_from_slice(piece);
            while let Some(f) = decode_frame(&mut buf, MAX).unwrap() {
                got.push(f);
            }
        }
        prop_assert_eq!(got, frames);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_overread(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut buf = BytesMut::from(&data[..]);
        while let Ok(Some(_)) = decode_frame(&mut buf, 256) {}
        prop_assert!(buf.len() <= data.len());
    }

    #[test]
    fn the_error_code_mapping_is_a_bijection(code in any::<u16>()) {
        prop_assert_eq!(ErrorCode::from_u16(code).as_u16(), code);
    }
}
