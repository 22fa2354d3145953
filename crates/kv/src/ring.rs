//! Rendezvous (highest-random-weight) hashing over `[kv] nodes`: each node
//! scores a key with a 64-bit hash seeded by the node's URL; a key's
//! replicas are the `from` highest scores. The set for a smaller `from` is
//! a prefix of the set for a larger one, and adding or removing a node
//! moves only the keys that node wins or loses. No allocation per key
//! beyond the returned list.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The cluster's nodes and which one this process is.
#[derive(Debug, Clone)]
pub struct Ring {
    nodes: Vec<String>,
    seeds: Vec<u64>,
    self_index: usize,
}

impl Ring {
    /// A ring over `nodes` (URLs as configured); `self_index` is this node.
    pub fn new(nodes: Vec<String>, self_index: usize) -> Self {
        let seeds = nodes.iter().map(|n| xxh3_64(n.as_bytes())).collect();
        Ring {
            nodes,
            seeds,
            self_index,
        }
    }

    /// How many nodes the cluster has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a ring has at least this node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// This node's index.
    pub fn self_index(&self) -> usize {
        self.self_index
    }

    /// The URL of node `i`.
    pub fn url(&self, i: usize) -> &str {
        &self.nodes[i]
    }

    /// The `from` nodes that hold `key`, best first.
    pub fn replicas(&self, key: &[u8], from: usize) -> Vec<usize> {
        let mut scored: Vec<(u64, usize)> = self
            .seeds
            .iter()
            .enumerate()
            .map(|(i, &seed)| (xxh3_64_with_seed(key, seed), i))
            .collect();
        // Highest score first; equal scores (practically never) by index.
        scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(from).map(|(_, i)| i).collect()
    }

    /// The nodes that hold `key` when it was written with `from` =
    /// `written_to` (a record's [`crate::Record::replicas`]; 0, unknown,
    /// means every node; more than the cluster means every node too).
    pub fn owners(&self, key: &[u8], written_to: u8) -> Vec<usize> {
        let from = match written_to as usize {
            0 => self.len(),
            n => n.min(self.len()),
        };
        self.replicas(key, from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: usize) -> Ring {
        Ring::new(
            (0..n)
                .map(|i| format!("http://127.0.0.1:{}", 8000 + i))
                .collect(),
            0,
        )
    }

    #[test]
    fn smaller_sets_are_prefixes_and_keys_spread_over_nodes() {
        let r = ring(5);
        let mut owners = [0usize; 5];
        for k in 0..5000u32 {
            let key = k.to_string();
            let all = r.replicas(key.as_bytes(), 5);
            for f in 1..=5 {
                assert_eq!(r.replicas(key.as_bytes(), f), all[..f]);
            }
            owners[all[0]] += 1;
        }
        assert!(owners.iter().all(|&n| n > 800), "{owners:?}");
    }

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let (big, small) = (ring(4), ring(3));
        for k in 0..2000u32 {
            let key = k.to_string();
            let before = big.replicas(key.as_bytes(), 1)[0];
            if before != 3 {
                assert_eq!(small.replicas(key.as_bytes(), 1)[0], before);
            }
        }
    }
}
