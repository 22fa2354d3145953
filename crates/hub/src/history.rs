//! [`History`]: the hub's recent messages per topic, for subscribers that
//! come back (push connection state recovery).
//!
//! With a history installed ([`crate::Hub::enable_history`]), every local
//! fan-out takes one lock, gives the message the next hub-wide sequence
//! number ([`crate::Message::seq`]), keeps it in its topic's log and queues
//! it to the subscribers — all under that lock, so every subscriber queue
//! receives messages in sequence order. A subscriber that saw sequence `L`
//! has therefore seen (or lost to its own overflow policy) everything
//! before `L` on its topics, and what it missed is exactly the history's
//! messages after `L` on them.
//!
//! Bounded twice: each topic keeps its last `per_topic` messages, and all
//! topics together at most `max_bytes` of payload (the oldest go first,
//! whatever their topic). A topic remembers the newest sequence it let go,
//! so a replay that would need it fails instead of leaving a hole; a topic
//! whose log emptied is forgotten past `max_topics`, and then any replay
//! from before what it let go fails.
//!
//! Off by default: the lock serialises fan-out, which only recovery needs.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::{Message, SharedMessage};

/// What one kept message counts against `max_bytes` besides its payload
/// and topic (the copy's own fields, its entries in the logs), so that
/// empty payloads are bounded too.
const ENTRY_OVERHEAD: usize = 64;

fn cost(m: &Message) -> usize {
    m.payload.len() + m.topic.len() + ENTRY_OVERHEAD
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
    /// Bytes kept over all topics: payloads and topics, and 64 per message
    /// for the rest of each copy and the logs.
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

#[derive(Debug, Default)]
struct TopicLog {
    entries: VecDeque<(u64, SharedMessage)>,
    /// The newest sequence this topic let go (0: none).
    forgotten: u64,
}

#[derive(Debug)]
struct Inner {
    limits: HistoryLimits,
    /// The sequence the next message gets.
    next: u64,
    topics: Topics,
    /// Every kept entry, oldest first, for the byte bound.
    order: VecDeque<(u64, Arc<str>)>,
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
        self.inner.lock().order.len()
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages after sequence `after` on the topics `wanted` accepts,
    /// in sequence order, at most `max`, and the sequence live delivery
    /// continues from (messages before it are in the replay or were sent
    /// already). `wanted` gets a topic and returns the sequence from which
    /// the subscriber wants it (`None`: not at all), so a subscription made
    /// after `after` replays only what came after it.
    pub fn replay(
        &self,
        after: u64,
        max: usize,
        mut wanted: impl FnMut(&str) -> Option<u64>,
    ) -> Result<(Vec<SharedMessage>, u64), NotKept> {
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
        let mut out: Vec<(u64, SharedMessage)> = Vec::new();
        for (topic, log) in &h.topics {
            let Some(from) = wanted(topic) else { continue };
            let from = from.max(after + 1);
            if log.forgotten >= from {
                return Err(NotKept::Forgotten {
                    after,
                    forgotten: log.forgotten,
                });
            }
            let start = log.entries.partition_point(|(s, _)| *s < from);
            for (s, m) in log.entries.range(start..) {
                if out.len() >= max {
                    return Err(NotKept::TooMany(max));
                }
                out.push((*s, m.clone()));
            }
        }
        out.sort_unstable_by_key(|(s, _)| *s);
        Ok((out.into_iter().map(|(_, m)| m).collect(), h.next))
    }
}

impl Recording<'_> {
    /// Gives `msg` its sequence and keeps a copy of it in its topic's log:
    /// a copy without the encoded forms sessions cache on the original, so
    /// those go with the last session that used them and `max_bytes`
    /// bounds what the history really holds. Returns what was let go, for
    /// the caller to drop once the lock is released.
    #[must_use]
    pub(crate) fn record(&mut self, msg: &SharedMessage) -> Evicted {
        let h = &mut *self.0;
        let seq = h.next;
        h.next += 1;
        msg.encoded.set_seq(seq);
        // `Message::clone` leaves the encoded forms (and the sequence) behind.
        let kept: SharedMessage = Arc::new((**msg).clone());
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
    /// emptied topics past the topic bound, and drops order entries of
    /// messages a topic already let go.
    fn shed(&mut self, evicted: &mut Evicted) {
        while self.bytes > self.limits.max_bytes || self.order.len() > 4 * self.topics_kept() {
            let Some((seq, topic)) = self.order.pop_front() else {
                break;
            };
            let Some(log) = self.topics.get_mut(&topic) else {
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
            }
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

    /// Entries kept, an upper bound of what `order` must hold.
    fn topics_kept(&self) -> usize {
        (self.topics.len() * self.limits.per_topic).max(1)
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

    #[test]
    fn sequences_are_hub_wide_and_replays_merge_topics_in_order() {
        let h = History::new(limits(10, 1 << 20));
        assert_eq!(h.next_seq(), 1);
        let a1 = publish(&h, "a", "a1");
        publish(&h, "b", "b1");
        publish(&h, "c", "c1");
        publish(&h, "a", "a2");
        assert_eq!(a1.seq(), Some(1));
        let (got, next) = h.replay(1, 100, |t| (t != "c").then_some(0)).unwrap();
        assert_eq!(payloads(&got), ["b1", "a2"]);
        assert_eq!(next, 5);
        // A subscription made at 4 wants nothing before it.
        let (got, _) = h
            .replay(0, 100, |t| match t {
                "a" => Some(0),
                "c" => Some(4),
                _ => None,
            })
            .unwrap();
        assert_eq!(payloads(&got), ["a1", "a2"]);
        assert_eq!(h.replay(5, 100, |_| Some(0)), Err(NotKept::Unknown(5)));
        assert_eq!(h.replay(0, 2, |_| Some(0)), Err(NotKept::TooMany(2)));
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
            h.replay(0, 100, |t| (t == "a").then_some(0)),
            Err(NotKept::Forgotten {
                after: 0,
                forgotten: 1
            })
        );
        // A client that wants only b, or saw a1, is fine.
        assert!(h.replay(0, 100, |t| (t == "b").then_some(0)).is_ok());
        let (got, _) = h.replay(1, 100, |_| Some(0)).unwrap();
        assert_eq!(payloads(&got), ["a2", "a3", "b1"]);
    }

    #[test]
    fn the_byte_bound_lets_the_oldest_go_across_topics() {
        let h = History::new(limits(100, 2 * (ENTRY_OVERHEAD + 5)));
        publish(&h, "a", "aaaa"); // 1
        publish(&h, "b", "bbbb"); // 2
        publish(&h, "c", "cccc"); // 3: over the bound, "a" goes
        assert_eq!(h.len(), 2);
        assert!(h.replay(0, 100, |t| (t == "a").then_some(0)).is_err());
        let (got, _) = h.replay(1, 100, |_| Some(0)).unwrap();
        assert_eq!(payloads(&got), ["bbbb", "cccc"]);
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
        assert!(h.replay(10, 100, |_| Some(0)).is_err());
        let (got, _) = h.replay(999, 100, |_| Some(0)).unwrap();
        assert_eq!(payloads(&got), ["x"]);
    }
}
