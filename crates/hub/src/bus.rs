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
use crate::topic::{Pattern, TopicError, MAX_WILDCARD_TOKENS};
use crate::trie::PatternTrie;

const SHARDS: usize = 64;

/// aHash: the topic is hashed twice per publish (shard, then map), and SipHash
/// cost more than the whole single-subscriber fan-out in the criterion bench.
type FastHash = ahash::RandomState;

type Shard = RwLock<HashMap<Box<str>, Vec<Arc<SubscriberQueue>>, FastHash>>;

#[derive(Debug)]
pub(crate) struct TopicBus {
    shard_hash: FastHash,
    exact: Box<[Shard]>,
    /// The queues of the wildcard subscriptions, by pattern.
    wildcards: RwLock<PatternTrie<Vec<Arc<SubscriberQueue>>>>,
    wildcard_count: AtomicUsize,
    /// Tokens of all wildcard subscriptions, bounded by `wildcard_limit`
    /// (changed under the trie's write lock).
    wildcard_tokens: AtomicUsize,
    /// [`MAX_WILDCARD_TOKENS`], or a small bound in tests.
    wildcard_limit: usize,
}

impl Default for TopicBus {
    fn default() -> Self {
        TopicBus {
            shard_hash: FastHash::new(),
            exact: (0..SHARDS).map(|_| RwLock::default()).collect(),
            wildcards: RwLock::default(),
            wildcard_count: AtomicUsize::new(0),
            wildcard_tokens: AtomicUsize::new(0),
            wildcard_limit: MAX_WILDCARD_TOKENS,
        }
    }
}

impl TopicBus {
    fn shard_of(&self, topic: &str) -> usize {
        (self.shard_hash.hash_one(topic) as usize) % SHARDS
    }

    /// Adds `sub`'s subscription to `pattern`; refused when the hub holds
    /// [`MAX_WILDCARD_TOKENS`] tokens of wildcard patterns already.
    pub(crate) fn insert(
        &self,
        pattern: &Pattern,
        sub: &Arc<SubscriberQueue>,
    ) -> Result<(), TopicError> {
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
            let n = pattern.tokens().len();
            let mut trie = self.wildcards.write();
            // Counted under the trie's lock, so concurrent subscribers
            // cannot pass the bound together.
            let held = self.wildcard_tokens.load(Ordering::Relaxed);
            if held + n > self.wildcard_limit {
                return Err(TopicError::WildcardsFull);
            }
            trie.slot_mut(pattern.tokens()).push(sub.clone());
            self.wildcard_tokens.store(held + n, Ordering::Relaxed);
            self.wildcard_count.fetch_add(1, Ordering::Release);
        }
        Ok(())
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
            let mut trie = self.wildcards.write();
            trie.change(pattern.tokens(), |queues| queues.retain(|s| s.id != id));
            self.wildcard_tokens
                .fetch_sub(pattern.tokens().len(), Ordering::Relaxed);
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
            self.wildcards
                .read()
                .for_each_match(topic, &mut |queues| queues.iter().for_each(&mut f));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::hub::Hub;
    use crate::routes::RouteTable;
    use crate::topic::TopicError;
    use crate::SubscriberOptions;

    #[test]
    fn wildcard_tokens_are_bounded_hub_wide_and_given_back_on_unsubscribe() {
        let mut hub = Hub::new(RouteTable::default());
        std::sync::Arc::get_mut(&mut hub.inner)
            .expect("not shared yet")
            .bus
            .wildcard_limit = 10;
        let mut a = hub.subscriber(SubscriberOptions::default());
        let mut b = hub.subscriber(SubscriberOptions::default());
        assert_eq!(a.subscribe("a.b.c.*"), Ok(true)); // 4 tokens
        assert_eq!(b.subscribe("d.e.>"), Ok(true)); // 3
        assert_eq!(b.subscribe("f.g.h.*"), Err(TopicError::WildcardsFull));
        // Exact topics are not counted.
        assert_eq!(b.subscribe("f.g.h.i.j.k.l.m.n.o.p"), Ok(true));
        assert!(!b.patterns().any(|p| p == "f.g.h.*"));
        assert!(a.unsubscribe("a.b.c.*"));
        assert_eq!(b.subscribe("f.g.h.*"), Ok(true));
        drop(b);
        assert_eq!(a.subscribe("x.y.z.*"), Ok(true));
    }
}
