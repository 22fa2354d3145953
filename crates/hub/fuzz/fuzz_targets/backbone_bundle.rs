//! Fuzzes the backbone bundle decoder (anyone who can write to the
//! backbone topic can write anything): arbitrary bytes never panic, never
//! yield more than the message bound or an unpublishable topic, and what
//! decodes encodes back to bytes that decode to the same messages.

#![no_main]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tidegate_hub::backbone::bundle::{decode, encode, MAX_BUNDLE_MESSAGES};
use tidegate_hub::topic::validate_topic;

fuzz_target!(|data: &[u8]| {
    let value = Bytes::copy_from_slice(data);
    let Ok(msgs) = decode(&value) else { return };
    assert!(msgs.len() <= MAX_BUNDLE_MESSAGES);
    let ok: Vec<_> = msgs.into_iter().flatten().collect();
    for m in &ok {
        assert!(validate_topic(&m.topic).is_ok());
    }
    let shared: Vec<_> = ok.iter().cloned().map(Arc::new).collect();
    let mut again = BytesMut::new();
    encode(&shared, &mut again);
    let back: Vec<_> = decode(&again.freeze())
        .expect("an encoded bundle decodes")
        .into_iter()
        .map(|m| m.expect("a decoded topic stays valid"))
        .collect();
    assert_eq!(back, ok);
});
