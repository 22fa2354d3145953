//! Fuzzes the sockperf header parser and echo rule: arbitrary bytes must
//! never panic; the bytes consumed are whole messages; each reply is its
//! request with only the CLIENT bit cleared.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tidegate_wire::sockperf_header::{echo_replies, SockperfHeader, FLAG_CLIENT, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = SockperfHeader::parse(data) {
        assert_eq!(h.to_bytes(), data[..HEADER_LEN]);
    }
    let mut out = Vec::new();
    let echoed = match echo_replies(data, 4096, &mut out) {
        Ok(e) => e,
        Err(_) => return,
    };
    let consumed = echoed.consumed;
    assert!(consumed <= data.len());
    // Walk the consumed messages and check each reply.
    let (mut pos, mut at, mut messages) = (0, 0, 0);
    while pos < consumed {
        let h = SockperfHeader::parse(&data[pos..]).expect("consumed a whole header");
        let len = h.length as usize;
        assert!(len >= HEADER_LEN && pos + len <= consumed);
        if h.wants_pong() {
            let reply = &out[at..at + len];
            let rh = SockperfHeader::parse(reply).unwrap();
            assert_eq!(rh.flags, h.flags & !FLAG_CLIENT);
            assert_eq!(rh.sequence, h.sequence);
            assert_eq!(&reply[HEADER_LEN..], &data[pos + HEADER_LEN..pos + len]);
            at += len;
        }
        pos += len;
        messages += 1;
    }
    assert_eq!(at, out.len());
    assert_eq!(messages, echoed.messages);
});
