//! Hash trees over key ranges, the comparison step of anti-entropy
//! ([`crate::anti_entropy`]). Pure: keys and records in, hashes and leaf
//! lists out, no I/O, so it can be fuzzed and property-tested alone.
//!
//! The key space is cut by hash, as Cassandra cuts its token ring: leaf
//! `i` of a tree covers the keys whose 64-bit range hash falls in the
//! `i`-th of [`LEAVES`] equal slices of the hash space. Every node cuts the
//! same way, so two replicas' trees line up leaf for leaf without agreeing
//! on anything first, and a tree takes [`LEAVES`] × 8 bytes whatever the
//! number of keys. A leaf's hash is the wrapping sum of its entries'
//! hashes (order-free, so one unordered scan builds every leaf at once);
//! an inner node hashes its two children; the root covers everything.
//!
//! Wire forms: a tree travels as its leaves (`u64` big-endian each, exactly
//! [`LEAVES`] of them); a set of leaves to stream as strictly increasing
//! `u16` big-endian indices.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::record::Record;

/// Depth of a tree: 2^12 = 4096 leaves (32 KiB on the wire). A node with
/// a million keys has ~250 per leaf, which is what one missed write makes
/// the peer stream.
pub const DEPTH: u32 = 12;
/// Leaves of a tree.
pub const LEAVES: usize = 1 << DEPTH;
/// Bytes of an encoded tree.
pub const TREE_BYTES: usize = LEAVES * 8;
/// Seed of the range hash, so a key's leaf does not follow its replica
/// placement (which hashes the key with the nodes' seeds).
const RANGE_SEED: u64 = 0x7469_6465_6761_7465; // "tidegate"

/// A tree or a leaf list that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TreeError {
    /// A tree must be exactly [`TREE_BYTES`] long.
    #[error("tree of {0} bytes, expected {TREE_BYTES}")]
    TreeLength(usize),
    /// A leaf list must be whole `u16`s, at most [`LEAVES`] of them.
    #[error("leaf list of {0} bytes")]
    LeafListLength(usize),
    /// A leaf index out of range or not after the previous one.
    #[error("leaf {0} out of range or out of order")]
    LeafIndex(u16),
}

/// The leaf (hash range) `key` belongs to.
pub fn leaf_of(key: &[u8]) -> usize {
    (xxh3_64_with_seed(key, RANGE_SEED) >> (64 - DEPTH)) as usize
}

/// The hash one entry adds to its leaf: the key and every field of the
/// record (two replicas agree on an entry only when they hold the same
/// version).
pub fn entry_hash(key: &[u8], record: &Record) -> u64 {
    let mut b = BytesMut::with_capacity(2 + key.len() + 32 + record.value.len());
    b.put_u16(key.len() as u16);
    b.put_slice(key);
    b.put_slice(&record.encode());
    xxh3_64(&b)
}

/// A hash tree over the [`LEAVES`] key ranges of one node's data (as
/// shared with one peer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerkleTree {
    leaves: Box<[u64]>,
}

impl Default for MerkleTree {
    fn default() -> Self {
        MerkleTree {
            leaves: vec![0; LEAVES].into_boxed_slice(),
        }
    }
}

impl MerkleTree {
    /// Adds one entry to its leaf.
    pub fn add(&mut self, key: &[u8], record: &Record) {
        let leaf = &mut self.leaves[leaf_of(key)];
        *leaf = leaf.wrapping_add(entry_hash(key, record));
    }

    /// Every level, the root's (one hash) first and the leaves last.
    fn levels(&self) -> Vec<Vec<u64>> {
        let mut levels = vec![self.leaves.to_vec()];
        while levels[0].len() > 1 {
            let parent = levels[0]
                .chunks_exact(2)
                .map(|pair| {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&pair[0].to_be_bytes());
                    b[8..].copy_from_slice(&pair[1].to_be_bytes());
                    xxh3_64(&b)
                })
                .collect();
            levels.insert(0, parent);
        }
        levels
    }

    /// The root hash: equal roots mean (but for a 2^-64 chance) equal data.
    pub fn root(&self) -> u64 {
        self.levels()[0][0]
    }

    /// The leaves whose hashes differ, found by walking down from the root
    /// into differing subtrees only. Sorted.
    pub fn differing_leaves(&self, other: &MerkleTree) -> Vec<u16> {
        let (mine, theirs) = (self.levels(), other.levels());
        let mut frontier = vec![0usize];
        for level in 0..mine.len() {
            let differing: Vec<usize> = frontier
                .into_iter()
                .filter(|&i| mine[level][i] != theirs[level][i])
                .collect();
            if level + 1 == mine.len() {
                return differing.into_iter().map(|i| i as u16).collect();
            }
            frontier = differing.iter().flat_map(|&i| [2 * i, 2 * i + 1]).collect();
        }
        Vec::new()
    }

    /// The tree's wire form: its leaves.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(TREE_BYTES);
        for &leaf in self.leaves.iter() {
            b.put_u64(leaf);
        }
        b.freeze()
    }

    /// Reads a tree's wire form.
    pub fn decode(bytes: &[u8]) -> Result<Self, TreeError> {
        if bytes.len() != TREE_BYTES {
            return Err(TreeError::TreeLength(bytes.len()));
        }
        let leaves = bytes
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().expect("8-byte chunk")))
            .collect();
        Ok(MerkleTree { leaves })
    }
}

/// The wire form of a set of leaves (sorted, no duplicates).
pub fn encode_leaves(leaves: &[u16]) -> Bytes {
    let mut b = BytesMut::with_capacity(leaves.len() * 2);
    for &l in leaves {
        b.put_u16(l);
    }
    b.freeze()
}

/// Reads a set of leaves: whole `u16`s, each below [`LEAVES`] and above
/// the previous one.
pub fn decode_leaves(bytes: &[u8]) -> Result<Vec<u16>, TreeError> {
    if !bytes.len().is_multiple_of(2) || bytes.len() > LEAVES * 2 {
        return Err(TreeError::LeafListLength(bytes.len()));
    }
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for c in bytes.chunks_exact(2) {
        let l = u16::from_be_bytes([c[0], c[1]]);
        if l as usize >= LEAVES || out.last().is_some_and(|&p| p >= l) {
            return Err(TreeError::LeafIndex(l));
        }
        out.push(l);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tree(entries: &[(&str, u64)]) -> MerkleTree {
        let mut t = MerkleTree::default();
        for (k, ts) in entries {
            t.add(k.as_bytes(), &Record::value(*ts, Bytes::from_static(b"v")));
        }
        t
    }

    #[test]
    fn equal_data_gives_equal_roots_whatever_the_order() {
        let a = tree(&[("a", 1), ("b", 2), ("c", 3)]);
        let b = tree(&[("c", 3), ("a", 1), ("b", 2)]);
        assert_eq!(a.root(), b.root());
        assert!(a.differing_leaves(&b).is_empty());
    }

    #[test]
    fn a_missing_or_older_entry_shows_in_exactly_its_leaf() {
        let full = tree(&[("a", 1), ("b", 2), ("c", 3)]);
        let missing = tree(&[("a", 1), ("c", 3)]);
        let older = tree(&[("a", 1), ("b", 1), ("c", 3)]);
        assert_ne!(full.root(), missing.root());
        assert_eq!(full.differing_leaves(&missing), vec![leaf_of(b"b") as u16]);
        assert_eq!(full.differing_leaves(&older), vec![leaf_of(b"b") as u16]);
        assert_eq!(
            full.differing_leaves(&MerkleTree::default()).len(),
            [leaf_of(b"a"), leaf_of(b"b"), leaf_of(b"c")]
                .into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        );
    }

    proptest! {
        #[test]
        fn trees_round_trip_and_diffs_are_exactly_the_changed_leaves(
            keys in proptest::collection::btree_set("[a-z0-9]{1,12}", 0..200),
            drop in proptest::collection::vec(any::<bool>(), 200),
        ) {
            let (mut all, mut some) = (MerkleTree::default(), MerkleTree::default());
            let mut expected = std::collections::BTreeSet::new();
            for (i, k) in keys.iter().enumerate() {
                let r = Record::value(i as u64, Bytes::new());
                all.add(k.as_bytes(), &r);
                if drop[i] {
                    expected.insert(leaf_of(k.as_bytes()) as u16);
                } else {
                    some.add(k.as_bytes(), &r);
                }
            }
            prop_assert_eq!(MerkleTree::decode(&all.encode()).unwrap(), all.clone());
            let got: Vec<u16> = all.differing_leaves(&some);
            prop_assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn leaf_lists_round_trip_and_garbage_never_panics(
            set in proptest::collection::btree_set(0u16..LEAVES as u16, 0..100),
            junk in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let leaves: Vec<u16> = set.into_iter().collect();
            prop_assert_eq!(decode_leaves(&encode_leaves(&leaves)).unwrap(), leaves);
            if let Ok(l) = decode_leaves(&junk) {
                prop_assert_eq!(&encode_leaves(&l)[..], &junk[..]);
            }
            let _ = MerkleTree::decode(&junk);
        }
    }

    #[test]
    fn malformed_wire_forms_are_refused() {
        assert_eq!(MerkleTree::decode(&[0; 8]), Err(TreeError::TreeLength(8)));
        assert_eq!(decode_leaves(&[0]), Err(TreeError::LeafListLength(1)));
        assert_eq!(decode_leaves(&[0, 2, 0, 1]), Err(TreeError::LeafIndex(1)));
        assert_eq!(
            decode_leaves(&(LEAVES as u16).to_be_bytes()),
            Err(TreeError::LeafIndex(LEAVES as u16))
        );
    }
}
