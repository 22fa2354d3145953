//! The topic bus: which subscriber queues a topic reaches.
//!
//! Exact topics live in a sharded hash map (a publish takes one shard's read
//! lock; a subscribe one shard's write lock), so publish cost follows the
//! subscribers of that topic, not the total. Wildcard patterns live in a token
//! trie that is skipped entirely while no wildcard subscription exists.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::subscriber::SubscriberQueue;
use crate::topic::{is_system_topic, Pattern};
use crate::trie::TrieNode;

const SHARDS: usize = 64;

/// aHash: the topic is hashed twice per publish (shard, then map), and SipHash
/// cost more than the whole single-subscriber fan-out in the criterion bench.
type FastHash = ahash::RandomState;

type Shard = RwLock<HashMap<Box<str>, Vec<Arc<SubscriberQueue>>, FastHash>>;

#[derive(Debug)]
pub(crate) struct TopicBus {
    shard_hash: FastHash,
    exact: Box<[Shard]>,
    wildcards: RwLock<TrieNode>,
    wildcard_count: AtomicUsize,
}

impl Default for TopicBus {
    fn default() -> Self {
        TopicBus {
            shard_hash: FastHash::new(),
            exact: (0..SHARDS).map(|_| RwLock::default()).collect(),
            wildcards: RwLock::default(),
            wildcard_count: AtomicUsize::new(0),
        }
    }
}

impl TopicBus {
    fn shard_of(&self, topic: &str) -> usize {
        (self.shard_hash.hash_one(topic) as usize) % SHARDS
    }

    pub(crate) fn insert(&self, pattern: &Pattern, sub: &Arc<SubscriberQueue>) {
        if pattern.is_literal() {
            let topic = pattern.as_str();
            let mut shard = self.exact[self.shard_of(topic)].write();
            match shard.get_mut(topic) {
                Some(list) => list.push(sub.clone()),
                None => {
                    shard.insert(topic.into(), vec![sub.clone()]);
                }
            }
        } else {
            self.wildcards.write().insert(pattern, sub);
            self.wildcard_count.fetch_add(1, Ordering::Release);
        }
    }

    pub(crate) fn remove(&self, pattern: &Pattern, id: u64) {
        if pattern.is_literal() {
            let topic = pattern.as_str();
            let mut shard = self.exact[self.shard_of(topic)].write();
            if let Some(list) = shard.get_mut(topic) {
                list.retain(|s| s.id != id);
                if list.is_empty() {
                    shard.remove(topic);
                }
            }
        } else {
            self.wildcards.write().remove(pattern.tokens(), id);
            self.wildcard_count.fetch_sub(1, Ordering::Release);
        }
    }

    /// Calls `f` with every queue subscribed to `topic` (once per matching
    /// subscription).
    pub(crate) fn for_each_subscriber(
        &self,
        topic: &str,
        mut f: impl FnMut(&Arc<SubscriberQueue>),
    ) {
        if let Some(list) = self.exact[self.shard_of(topic)].read().get(topic) {
            list.iter().for_each(&mut f);
        }
        if self.wildcard_count.load(Ordering::Acquire) > 0 {
            let tokens: Vec<&str> = topic.split('.').collect();
            self.wildcards
                .read()
                .for_each_match_from_root(&tokens, is_system_topic(topic), &mut f);
        }
    }
}
