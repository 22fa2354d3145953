//! Fuzzes the wire decoder: arbitrary bytes must never panic, never consume
//! more than given, and every frame decoded must re-encode to bytes that
//! decode to the same frame.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tidegate_wire::codec::{decode_frame, encode_frame};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = decode_frame(&mut buf, 64 * 1024) {
        let mut again = BytesMut::new();
        encode_frame(&frame, &mut again).expect("a decoded frame re-encodes");
        let back = decode_frame(&mut again, usize::MAX).expect("re-encoded frame decodes");
        assert_eq!(back, Some(frame));
        assert!(again.is_empty());
    }
    assert!(buf.len() <= data.len());
});
