//! Every accepted write, value or tombstone, published on the hub so a
//! wire or push subscriber can watch one key or all of them.
//!
//! Topic mapping (all under `kv.`; subscribe to `kv.>` for every key):
//! - `kv.k.<key>` when the key is 1 to [`MAX_PLAIN_KEY_BYTES`] bytes of
//!   `A-Z a-z 0-9 - _` (a valid single topic token);
//! - otherwise `kv.h.<hex>`, the first 16 bytes of the key's SHA-256 in
//!   hex — keys with dots, spaces, wildcards, non-ASCII or great length.
//!
//! The message always carries the exact key as its `key`, the write
//! timestamp (ns) as its timestamp, the attribute `kv.op` = `put` or
//! `delete`, and the value as payload (empty for a delete). One message per
//! accepted client write, published by the coordinating node once `ack`
//! replicas have it.

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tidegate_hub::{Hub, Message};

use crate::record::Record;

/// Longest key published under its own name.
pub const MAX_PLAIN_KEY_BYTES: usize = 200;
/// Attribute naming the operation.
pub const OP_ATTRIBUTE: &str = "kv.op";

/// The topic a write of `key` is published on.
pub fn topic_for(key: &[u8]) -> String {
    let plain = !key.is_empty()
        && key.len() <= MAX_PLAIN_KEY_BYTES
        && key
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    if plain {
        // Checked ASCII above.
        format!("kv.k.{}", String::from_utf8_lossy(key))
    } else {
        format!("kv.h.{}", hex::encode(&Sha256::digest(key)[..16]))
    }
}

/// The message announcing an accepted write.
pub fn message_for(key: &[u8], record: &Record) -> Message {
    let op = if record.tombstone { "delete" } else { "put" };
    Message::new(topic_for(key), record.value.clone())
        .with_key(Bytes::copy_from_slice(key))
        .with_timestamp_ns(record.timestamp)
        .with_attribute(OP_ATTRIBUTE, op)
}

/// Publishes an accepted write; a hub that is shutting down drops it.
pub async fn publish(hub: &Hub, key: &[u8], record: &Record) {
    if let Err(e) = hub.publish(message_for(key, record)).await {
        tracing::debug!(error = %e, "kv: write not published on the hub");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_maps_to_a_valid_topic_and_plain_keys_keep_their_name() {
        assert_eq!(topic_for(b"user-42"), "kv.k.user-42");
        for key in [
            &b"a.b"[..],
            b"*",
            b">",
            b"with space",
            b"",
            "ключ".as_bytes(),
            &[0u8, 0xff],
            &[b'x'; 500],
        ] {
            let t = topic_for(key);
            assert!(t.starts_with("kv.h."), "{t}");
            tidegate_hub::topic::validate_topic(&t).unwrap();
        }
        assert_ne!(topic_for(b"a.b"), topic_for(b"a.c"));
    }
}
