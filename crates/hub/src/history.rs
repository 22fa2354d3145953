//! [`History`]: the hub's recent messages per topic, for subscribers that
//! come back (push connection state recovery).
//!
//! With a history installed ([`crate::Hub::enable_history`]), every local
//! fan-out takes one lock, gives the message the next hub-wide sequence
//! number ([`crate::Message::seq`]), keeps a copy in its topic's log and
//! queues it to the subscribers — all under that lock, so every subscriber
//! queue receives messages in sequence order. A subscriber that saw
//! sequence `L` has therefore seen (or lost to its own overflow policy)
//! everything before `L` on its topics, and what it missed is exactly the
//! history's messages after `L` on them ([`History::replay`], given its
//! subscriptions and when each started, [`Since`]).
//!
//! Bounded twice: each topic keeps its last `per_topic` messages, and all
//! topics together at most `max_bytes` (each copy's payload, topic, key and
//! attributes, plus a fixed overhead; the oldest go first, whatever their
//! topic). The copy is the history's own — its payload copied, without the
//! encodings sessions cache on the original — so the bound is what it
//! holds. A topic remembers the newest sequence it let go, so a replay that
//! would need it fails instead of leaving a hole; a topic whose log emptied
//! is forgotten past `max_topics`, and from then on any replay from before
//! what it let go fails, whatever its subscriptions (conservative: the
//! history no longer knows whether they matched it).
//!
//! Off by default: the lock serialises fan-out, which only recovery needs.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::start_trie::StartTrie;
use crate::topic::Pattern;
use crate::{Message, SharedMessage};

/// What one kept message counts against `max_bytes` besides its payload,
/// topic, key and attributes (the copy's own fields, its entries in the
/// logs), so that empty messages are bounded too.
const ENTRY_OVERHEAD: usize = 64;

fn cost(m: &Message) -> usize {
    let attrs: usize = m
        .attributes
        .iter()
        .map(|(n, v)| n.len() + v.len() + 48)
        .sum();
    m.payload.len() + m.topic.len() + m.key.as_ref().map_or(0, |k| k.len()) + attrs + ENTRY_OVERHEAD
}

/// Messages the history let go during one fan-out, dropped by the caller
/// after the lock is released.
pub(crate) type Evicted = Vec<SharedMessage>;

/// Type of the topics map: aHash, as the hub's bus (the topic is hashed
/// once per fan-out under the lock).
type Topics = HashMap<Arc<str>, TopicLog, ahash::RandomState>;

/// How much the history keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Messages kept per topic (at least 1).
    pub per_topic: usize,
    /// Bytes kept over all topics: each copy's payload, topic, key and
    /// attributes, and 64 per message for the rest of it and the logs.
    pub max_bytes: usize,
    /// Topics remembered, those with an empty log included.
    pub max_topics: usize,
}

/// Why a replay cannot give everything after the asked sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotKept {
    /// Messages after it were let go.
    #[error("messages after {after} are no longer kept (the history let go of {forgotten})")]
    Forgotten {
        /// The asked sequence.
        after: u64,
        /// The newest sequence let go that the replay would need.
        forgotten: u64,
    },
    /// The sequence was never given out here.
    #[error("sequence {0} was never given out by this hub")]
    Unknown(u64),
    /// More matching messages than the replay may return.
    #[error("more than {0} messages to replay")]
    TooMany(usize),
}

/// A subscriber's subscriptions, each with the history sequence it started
/// at, so a replay gives a topic's messages only from when the subscriber
/// wanted them.
#[derive(Debug, Default, Clone)]
pub struct Since {
    exact: HashMap<String, u64, ahash::RandomState>,
    wildcards: Vec<(Pattern, u64)>,
}

impl Since {
    /// `pattern` was subscribed when the history's next sequence was
    /// `from` (a pattern held already keeps its earlier start).
    pub fn add(&mut self, pattern: &str, from: u64) {
        let Ok(p) = Pattern::parse(pattern) else {
            return;
        };
        if p.is_literal() {
            self.exact.entry(pattern.to_owned()).or_insert(from);
        } else if !self.wildcards.iter().any(|(q, _)| q.as_str() == pattern) {
            self.wildcards.push((p, from));
        }
    }

    /// `pattern` was unsubscribed; false if it was not held.
    pub fn remove(&mut self, pattern: &str) -> bool {
        let before = self.wildcards.len();
        self.wildcards.retain(|(q, _)| q.as_str() != pattern);
        self.exact.remove(pattern).is_some() || self.wildcards.len() < before
    }

    /// Whether `pattern` is held.
    pub fn contains(&self, pattern: &str) -> bool {
        self.exact.contains_key(pattern)
            || self.wildcards.iter().any(|(q, _)| q.as_str() == pattern)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcards.is_empty()
    }

    /// The patterns held.
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.exact
            .keys()
            .map(String::as_str)
            .chain(self.wildcards.iter().map(|(p, _)| p.as_str()))
    }

    /// Whether a held pattern matches `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        self.exact.contains_key(topic) || self.wildcards.iter().any(|(p, _)| p.matches(topic))
    }

    /// The sequence from which messages on `topic` are wanted (the earliest
    /// of the matching subscriptions), or None when none matches.
    pub fn wanted(&self, topic: &str) -> Option<u64> {
        let exact = self.exact.get(topic).copied();
        self.wildcards
            .iter()
            .filter(|(p, _)| p.matches(topic))
            .map(|(_, from)| *from)
            .chain(exact)
            .min()
    }
}

#[derive(Debug, Default)]
struct TopicLog {
    entries: VecDeque<(u64, SharedMessage)>,
    /// The newest sequence this topic let go (0: none).
    forgotten: u64,
}

impl TopicLog {
    /// Whether the entry `seq` of this log is still kept (entries go from
    /// the front only, so what is kept is what is not older than it).
    fn keeps(&self, seq: u64) -> bool {
        self.entries.front().is_some_and(|(s, _)| *s <= seq)
    }
}

#[derive(Debug)]
struct Inner {
    limits: HistoryLimits,
    /// The sequence the next message gets.
    next: u64,
    topics: Topics,
    /// Kept entries, oldest first, for the byte bound — and entries a topic
    /// already let go by its own bound (`stale` of them), dropped when they
    /// reach the front or by [`Inner::compact`].
    order: VecDeque<(u64, Arc<str>)>,
    stale: usize,
    bytes: usize,
    /// Topics whose log emptied, oldest first (may hold stale names).
    emptied: VecDeque<Arc<str>>,
    /// The newest sequence let go by a topic that was forgotten.
    forgotten_topics: u64,
}

/// The hub's recent history. See the module docs.
#[derive(Debug)]
pub struct History {
    inner: Mutex<Inner>,
}

/// The history held locked: what the hub's fan-out does under the lock.
pub(crate) struct Recording<'a>(MutexGuard<'a, Inner>);

impl History {
    /// An empty history with `limits`; sequences start at 1.
    pub fn new(limits: HistoryLimits) -> Self {
        History {
            inner: Mutex::new(Inner {
                limits: HistoryLimits {
                    per_topic: limits.per_topic.max(1),
                    ..limits
                },
                next: 1,
                topics: Topics::default(),
                order: VecDeque::new(),
                stale: 0,
                bytes: 0,
                emptied: VecDeque::new(),
                forgotten_topics: 0,
            }),
        }
    }

    /// Locks the history for one fan-out.
    pub(crate) fn lock(&self) -> Recording<'_> {
        Recording(self.inner.lock())
    }

    /// The sequence the next message will get: a subscriber that starts
    /// now has seen nothing before it.
    pub fn next_seq(&self) -> u64 {
        self.inner.lock().next
    }

    /// Messages kept, all topics.
    pub fn len(&self) -> usize {
        let h = self.inner.lock();
        h.order.len() - h.stale
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages after sequence `after` on the topics `since` wants
    /// (each from when its subscription started), in sequence order, at
    /// most `max`, and the sequence live delivery continues from (messages
    /// before it are in the replay or were sent already). The messages are
    /// fresh copies (with their sequence): encodings a session caches on
    /// them stay out of the history.
    pub fn replay(
        &self,
        after: u64,
        max: usize,
        since: &Since,
    ) -> Result<(Vec<SharedMessage>, u64), NotKept> {
        let mut out: Vec<(u64, SharedMessage)> = Vec::new();
        // Built before the lock: with wildcards every remembered topic is
        // matched, and one by one against thousands of patterns that held
        // the lock (and every publish) for seconds.
        let starts = (!since.wildcards.is_empty()).then(|| StartTrie::build(&since.wildcards));
        let next = {
            let h = self.inner.lock();
            if after >= h.next {
                return Err(NotKept::Unknown(after));
            }
            if h.forgotten_topics > after {
                return Err(NotKept::Forgotten {
                    after,
                    forgotten: h.forgotten_topics,
                });
            }
            let mut take = |log: &TopicLog, from: u64| {
                let from = from.max(after + 1);
                if log.forgotten >= from {
                    return Err(NotKept::Forgotten {
                        after,
                        forgotten: log.forgotten,
                    });
                }
                let start = log.entries.partition_point(|(s, _)| *s < from);
                if out.len() + (log.entries.len() - start) > max {
                    return Err(NotKept::TooMany(max));
                }
                out.extend(log.entries.range(start..).cloned());
                Ok(())
            };
            match &starts {
                None => {
                    // Exact subscriptions only: look each up, no scan.
                    for (topic, from) in &since.exact {
                        if let Some(log) = h.topics.get(topic.as_str()) {
                            take(log, *from)?;
                        }
                    }
                }
                Some(starts) => {
                    for (topic, log) in &h.topics {
                        // A topic with nothing after `after` has nothing
                        // to give (nor let go: `forgotten` < its entries).
                        if log.entries.back().is_none_or(|(s, _)| *s <= after)
                            && log.forgotten <= after
                        {
                            continue;
                        }
                        let exact = since.exact.get(&**topic).copied();
                        let from = match (exact, starts.wanted(topic)) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        if let Some(from) = from {
                            take(log, from)?;
                        }
                    }
                }
            }
            h.next
        };
        // Outside the lock: fan-out goes on meanwhile.
        out.sort_unstable_by_key(|(s, _)| *s);
        let copies = out
            .into_iter()
            .map(|(s, m)| {
                let copy = Arc::new((*m).clone());
                copy.encoded.set_seq(s);
                copy
            })
            .collect();
        Ok((copies, next))
    }
}

impl Recording<'_> {
    /// Gives `msg` its sequence and keeps a copy of it in its topic's log
    /// (see the module docs). Returns what was let go, for the caller to
    /// drop once the lock is released.
    #[must_use]
    pub(crate) fn record(&mut self, msg: &SharedMessage) -> Evicted {
        let h = &mut *self.0;
        let seq = h.next;
        h.next += 1;
        msg.encoded.set_seq(seq);
        // `Message::clone` leaves the encoded forms (and the sequence)
        // behind; the payload is copied so that the history does not keep
        // a larger buffer it is a slice of (a backbone bundle, a read
        // buffer) alive.
        let mut copy = (**msg).clone();
        copy.payload = bytes::Bytes::copy_from_slice(&msg.payload);
        let kept: SharedMessage = Arc::new(copy);
        kept.encoded.set_seq(seq);
        let mut evicted = Evicted::new();
        let topic: Arc<str> = match h.topics.get_key_value(msg.topic.as_str()) {
            Some((k, _)) => k.clone(),
            None => Arc::from(msg.topic.as_str()),
        };
        let per_topic = h.limits.per_topic;
        let added = cost(&kept);
        let log = h.topics.entry(topic.clone()).or_default();
        log.entries.push_back((seq, kept));
        let mut freed = 0;
        if log.entries.len() > per_topic {
            if let Some((s, m)) = log.entries.pop_front() {
                log.forgotten = s;
                freed += cost(&m);
                evicted.push(m);
                h.stale += 1;
            }
        }
        h.bytes = h.bytes + added - freed;
        h.order.push_back((seq, topic));
        h.shed(&mut evicted);
        evicted
    }
}

impl Inner {
    /// Lets the oldest entries go while over the byte bound, forgets
    /// emptied topics past the topic bound, and keeps `order` from filling
    /// with entries topics already let go.
    fn shed(&mut self, evicted: &mut Evicted) {
        while self.bytes > self.limits.max_bytes {
            let Some((seq, topic)) = self.order.pop_front() else {
                break;
            };
            let Some(log) = self.topics.get_mut(&topic) else {
                self.stale = self.stale.saturating_sub(1);
                continue;
            };
            if log.entries.front().is_some_and(|(s, _)| *s == seq) {
                if let Some((s, m)) = log.entries.pop_front() {
                    log.forgotten = s;
                    self.bytes -= cost(&m);
                    evicted.push(m);
                }
                if log.entries.is_empty() {
                    self.emptied.push_back(topic);
                }
            } else {
                self.stale = self.stale.saturating_sub(1);
            }
        }
        // Stale entries at the front go at once; past as many stale as
        // kept ones, all of them (amortised: each entry is passed over
        // once per halving).
        while let Some((seq, topic)) = self.order.front() {
            if self.topics.get(topic).is_some_and(|l| l.keeps(*seq)) {
                break;
            }
            self.order.pop_front();
            self.stale = self.stale.saturating_sub(1);
        }
        if self.stale > 1024 && self.stale > self.order.len() / 2 {
            self.compact();
        }
        while self.topics.len() > self.limits.max_topics {
            let Some(topic) = self.emptied.pop_front() else {
                break;
            };
            if self
                .topics
                .get(&topic)
                .is_some_and(|l| l.entries.is_empty())
            {
                if let Some(log) = self.topics.remove(&topic) {
                    self.forgotten_topics = self.forgotten_topics.max(log.forgotten);
                }
            }
        }
        // Stale names (topics that got messages again) are dropped lazily.
        while self.emptied.len() > self.limits.max_topics {
            self.emptied.pop_front();
        }
    }

    /// Drops every entry of `order` whose message its topic let go.
    fn compact(&mut self) {
        let topics = &self.topics;
        self.order
            .retain(|(seq, topic)| topics.get(topic).is_some_and(|l| l.keeps(*seq)));
        self.stale = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_topic: usize, max_bytes: usize) -> HistoryLimits {
        HistoryLimits {
            per_topic,
            max_bytes,
            max_topics: 1000,
        }
    }

    fn publish(h: &History, topic: &str, payload: &str) -> SharedMessage {
        let m = Arc::new(Message::new(topic, payload.to_owned()));
        drop(h.lock().record(&m));
        m
    }

    fn payloads(v: &[SharedMessage]) -> Vec<String> {
        v.iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    fn since(subs: &[(&str, u64)]) -> Since {
        let mut s = Since::default();
        for (p, from) in subs {
            s.add(p, *from);
        }
        s
    }

    /// A complexity guard, not a benchmark: matching every remembered topic
    /// against every wildcard one by one (20,000 × 10,000 here) took
    /// over ten seconds in a debug build, and held the lock every publish takes.
    #[test]
    fn a_replay_with_many_wildcards_over_many_topics_is_not_their_product() {
        let h = History::new(HistoryLimits {
            per_topic: 1,
            max_bytes: usize::MAX,
            max_topics: 100_000,
        });
        for i in 0..20_000 {
            publish(&h, &format!("t{i}.x"), "p");
        }
        let mut s = Since::default();
        for i in 0..10_000 {
            s.add(&format!("w{i}.*"), 1);
        }
        s.add("t7.*", 1);
        s.add("t9.x", 1);
        let started = std::time::Instant::now();
        let (got, _) = h.replay(0, 100, &s).unwrap();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        let topics: Vec<&str> = got.iter().map(|m| m.topic.as_str()).collect();
        assert_eq!(topics, ["t7.x", "t9.x"]);
    }

    #[test]
    fn sequences_are_hub_wide_and_replays_merge_topics_in_order() {
        let h = History::new(limits(10, 1 << 20));
        assert_eq!(h.next_seq(), 1);
        let a1 = publish(&h, "a", "a1");
        publish(&h, "b", "b1");
        publish(&h, "c", "c1");
        publish(&h, "a", "a2");
        assert_eq!(a1.seq(), Some(1));
        let (got, next) = h.replay(1, 100, &since(&[("a", 0), ("b", 0)])).unwrap();
        assert_eq!(payloads(&got), ["b1", "a2"]);
        assert_eq!(got[1].seq(), Some(4));
        assert_eq!(next, 5);
        // A subscription made at 4 wants nothing before it.
        let (got, _) = h.replay(0, 100, &since(&[("a", 0), ("c", 4)])).unwrap();
        assert_eq!(payloads(&got), ["a1", "a2"]);
        // Wildcards scan every topic.
        let (got, _) = h.replay(0, 100, &since(&[(">", 0)])).unwrap();
        assert_eq!(payloads(&got), ["a1", "b1", "c1", "a2"]);
        assert_eq!(
            h.replay(5, 100, &since(&[(">", 0)])),
            Err(NotKept::Unknown(5))
        );
        assert_eq!(
            h.replay(0, 2, &since(&[(">", 0)])),
            Err(NotKept::TooMany(2))
        );
    }

    #[test]
    fn a_topic_that_let_go_of_what_a_replay_needs_refuses_it() {
        let h = History::new(limits(2, 1 << 20));
        for i in 1..=3 {
            publish(&h, "a", &format!("a{i}"));
        }
        publish(&h, "b", "b1");
        // a1 (sequence 1) is gone: a client at 0 missed it.
        assert_eq!(
            h.replay(0, 100, &since(&[("a", 0)])),
            Err(NotKept::Forgotten {
                after: 0,
                forgotten: 1
            })
        );
        // A client that wants only b, or saw a1, is fine.
        assert!(h.replay(0, 100, &since(&[("b", 0)])).is_ok());
        let (got, _) = h.replay(1, 100, &since(&[(">", 0)])).unwrap();
        assert_eq!(payloads(&got), ["a2", "a3", "b1"]);
    }

    #[test]
    fn the_byte_bound_lets_the_oldest_go_across_topics() {
        let h = History::new(limits(100, 2 * (ENTRY_OVERHEAD + 5)));
        publish(&h, "a", "aaaa"); // 1
        publish(&h, "b", "bbbb"); // 2
        publish(&h, "c", "cccc"); // 3: over the bound, "a" goes
        assert_eq!(h.len(), 2);
        assert!(h.replay(0, 100, &since(&[("a", 0)])).is_err());
        let (got, _) = h.replay(1, 100, &since(&[(">", 0)])).unwrap();
        assert_eq!(payloads(&got), ["bbbb", "cccc"]);
    }

    #[test]
    fn a_busy_topic_neither_grows_the_order_nor_pushes_a_quiet_one_out() {
        let h = History::new(limits(16, 1 << 20));
        publish(&h, "quiet", "q");
        for i in 0..100_000 {
            publish(&h, "hot", &i.to_string());
        }
        let inner = h.inner.lock();
        assert!(inner.order.len() <= 2 * 17 + 1024, "{}", inner.order.len());
        drop(inner);
        assert_eq!(h.len(), 17);
        let (got, _) = h.replay(0, 100, &since(&[("quiet", 0)])).unwrap();
        assert_eq!(payloads(&got), ["q"]);
    }

    #[test]
    fn the_history_keeps_its_own_copies() {
        let h = History::new(limits(4, 1 << 20));
        let big = bytes::Bytes::from(vec![b'x'; 4096]);
        let m = Arc::new(Message::new("t", big.slice(0..3)));
        drop(h.lock().record(&m));
        drop(m);
        let (got, _) = h.replay(0, 10, &since(&[("t", 0)])).unwrap();
        assert_eq!(&got[0].payload[..], b"xxx");
        // The replayed copy caches its own encodings, not the history's.
        got[0]
            .encoded
            .get_or_try_encode::<()>(crate::EncodedForm::PushJson, || Ok(bytes::Bytes::new()))
            .unwrap();
        let inner = h.inner.lock();
        let kept = &inner.topics.get("t").unwrap().entries[0].1;
        assert!(!kept.encoded.is_cached(crate::EncodedForm::PushJson));
    }

    #[test]
    fn forgotten_topics_make_older_replays_fail_and_memory_stays_bounded() {
        let h = History::new(HistoryLimits {
            per_topic: 1,
            max_bytes: 3 * (ENTRY_OVERHEAD + 5),
            max_topics: 5,
        });
        for i in 0..1000 {
            publish(&h, &format!("t{i}"), "x");
        }
        let inner = h.inner.lock();
        assert!(inner.topics.len() <= 5, "{}", inner.topics.len());
        assert!(inner.order.len() <= 3 && inner.emptied.len() <= 5);
        assert!(inner.forgotten_topics >= 990);
        drop(inner);
        assert!(h.replay(10, 100, &since(&[(">", 0)])).is_err());
        let (got, _) = h.replay(999, 100, &since(&[(">", 0)])).unwrap();
        assert_eq!(payloads(&got), ["x"]);
    }

    #[test]
    fn the_earliest_matching_subscription_decides() {
        let mut s = Since::default();
        s.add("news.a", 5);
        s.add("news.*", 9);
        s.add("news.a", 12);
        assert_eq!(s.wanted("news.a"), Some(5));
        assert_eq!(s.wanted("news.b"), Some(9));
        assert_eq!(s.wanted("sport.a"), None);
        assert!(s.contains("news.*") && s.matches("news.b") && !s.matches("sport.a"));
        assert!(s.remove("news.a"));
        assert!(!s.remove("news.a"));
        assert_eq!(s.wanted("news.a"), Some(9));
        assert_eq!(s.patterns().collect::<Vec<_>>(), ["news.*"]);
        assert!(s.remove("news.*"));
        assert_eq!(s.wanted("news.b"), None);
        assert!(s.is_empty());
        s.add("bad..pattern", 1);
        assert_eq!(s.wanted("bad..pattern"), None);
    }
}
