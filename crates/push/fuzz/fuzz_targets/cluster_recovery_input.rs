//! Fuzzes what cluster recovery reads from outside: the offset a
//! reconnecting client sends (`seq;p:pos,…`) and the session announcements
//! read from the backbone. Any bytes must parse or be ignored without
//! panicking; what parses re-encodes to itself; a registry fed any
//! announcements stays within its bytes.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tidegate_hub::backbone::SESSIONS_TOPIC;
use tidegate_hub::Message;
use tidegate_push::recovery::cluster::{encode_offset, parse_offset, ClusterSessions, Update};

const REGISTRY_BYTES: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let o = parse_offset(text);
        // A tag is re-encoded as it was read, when it has no separator.
        let tag = o.tag.clone().unwrap_or_default();
        if !tag.contains([';', ',', ':', '~']) {
            let again = parse_offset(&encode_offset(o.seq, &tag, &o.positions));
            assert_eq!((again.seq, &again.positions), (o.seq, &o.positions));
        }
    }
    let registry = Arc::new(ClusterSessions::new(REGISTRY_BYTES));
    // One announcement, then the same bytes split in two.
    for chunk in std::iter::once(data).chain(data.chunks(data.len() / 2 + 1)) {
        let msg = Message::new(SESSIONS_TOPIC, bytes::Bytes::copy_from_slice(chunk));
        if let Some(u) = Update::from_message(&msg) {
            assert_eq!(Update::from_message(&u.to_message()), Some(u.clone()));
        }
        registry.handle(&msg);
        assert!(registry.bytes() <= REGISTRY_BYTES);
    }
});
