//! Fuzzes every decoder of node-to-node KV traffic: the record format
//! (internal entity requests, hints, the disk), the anti-entropy entry
//! stream fed in arbitrary pieces (the first byte picks the piece size),
//! the hash-tree wire form, the leaf list and the replica batch (operations
//! and replies). Nothing may panic, buffers
//! stay within one frame, and whatever decodes encodes back to a record
//! that decodes the same.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tidegate_kv::batch;
use tidegate_kv::entry_stream::{encode_entry, EntryDecoder, FRAME_HEADER_BYTES};
use tidegate_kv::merkle::{decode_leaves, encode_leaves, MerkleTree};
use tidegate_kv::Record;

const MAX_RECORD: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    if let Ok(r) = Record::decode(Bytes::copy_from_slice(rest)) {
        assert_eq!(Record::decode(r.encode()).unwrap(), r);
    }
    if let Ok(ops) = batch::decode_ops(Bytes::copy_from_slice(rest)) {
        assert_eq!(batch::decode_ops(batch::encode_ops(&ops)).unwrap(), ops);
    }
    if let Ok(replies) = batch::decode_replies(Bytes::copy_from_slice(rest)) {
        assert_eq!(
            batch::decode_replies(batch::encode_replies(&replies)).unwrap(),
            replies
        );
    }
    if let Ok(leaves) = decode_leaves(rest) {
        assert_eq!(&encode_leaves(&leaves)[..], rest);
    }
    if let Ok(tree) = MerkleTree::decode(rest) {
        assert_eq!(&tree.encode()[..], rest);
    }

    let step = usize::from(step % 64) + 1;
    let decoder = EntryDecoder::new(MAX_RECORD);
    let mut buf = BytesMut::new();
    'feed: for piece in rest.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some((key, record))) => {
                    let mut again = BytesMut::new();
                    encode_entry(&key, &record, &mut again);
                    let (k2, r2) = decoder.decode(&mut again).unwrap().unwrap();
                    assert_eq!((k2, r2), (key, record));
                }
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
        assert!(buf.len() <= FRAME_HEADER_BYTES + 4096 + MAX_RECORD + step);
    }
});
