//! Fuzzes the Engine.IO polling payload decoder (and through it the packet
//! decoder): any bytes must decode or be refused without panicking, within
//! maxPayload, and whatever decodes must encode back to a payload that
//! decodes to the same packets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidegate_push::engineio::payload::{decode_payload, encode_payload};
use tidegate_push::engineio::EioPacket;

const MAX_PAYLOAD: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = EioPacket::decode_text(text);
    }
    let Ok(packets) = decode_payload(data, MAX_PAYLOAD) else {
        return;
    };
    let texts: Vec<String> = packets.iter().map(EioPacket::to_text).collect();
    let (body, n) = encode_payload(texts.iter().map(|t| t.as_bytes()), usize::MAX);
    assert_eq!(n, packets.len());
    let again = decode_payload(&body, usize::MAX).expect("re-encoded payload decodes");
    assert_eq!(again, packets);
});
