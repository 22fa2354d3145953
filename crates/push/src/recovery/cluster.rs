//! Connection state recovery on another node (cluster mode).
//!
//! A Socket.IO client whose node died reconnects wherever the load balancer
//! sends it, with its `pid` and the offset of the last event it received.
//! Two things must be known there: what the session was subscribed to, and
//! how far the client got in the backbone, the cluster's history.
//!
//! - **Subscriptions.** Each node tells the others, through the backbone's
//!   [`SESSIONS_TOPIC`], what its recoverable sessions subscribe to, as
//!   [`Update`]s (added, removed, gone, recovered here), and every node
//!   keeps what it read in a bounded [`ClusterSessions`] registry. A
//!   subscription remembers where it started in each backbone partition
//!   (the node's [`delivered`](tidegate_hub::Backbone::delivered) positions
//!   when it was made), so a replay gives a topic's messages only from when
//!   the session wanted them. Sessions are keyed by a hash of the pid: what
//!   the nodes tell each other does not let anyone take a session over.
//! - **Positions.** In cluster mode an event's offset is per session:
//!   `seq;p:pos,p:pos`, the hub sequence (for recovery on the same node)
//!   and, per backbone partition, the position after the last message of
//!   that partition sent to the session ([`encode_offset`]). The client
//!   keeps only its last offset, so that one string must say where it is
//!   in every partition.
//!
//! A node knows the sessions announced while it was reading the backbone.
//! One started after a session subscribed learns it from the session's
//! next whole-state announcement (`Own`), which every session repeats each
//! `[push] cluster_reannounce_ms`; until then it cannot recover it.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tidegate_hub::backbone::{Positions, SESSIONS_TOPIC};
use tidegate_hub::{Message, Pattern};

/// Default bytes the registry keeps over all sessions (oldest updated go
/// first): about 2 million subscriptions of 20-byte patterns.
pub const DEFAULT_REGISTRY_BYTES: usize = 128 << 20;

/// Largest update read from the backbone; bigger ones are ignored.
pub const MAX_UPDATE_BYTES: usize = 1 << 20;

/// Largest state one session's namespace may grow to by updates; past it
/// the session is forgotten (it could not be recovered whole).
pub const MAX_ENTRY_BYTES: usize = 4 << 20;

/// Most partitions an offset may name.
pub const MAX_OFFSET_PARTITIONS: usize = 4096;

/// What each entry costs besides its strings.
const ENTRY_OVERHEAD: usize = 256;

/// A subscription and where it started, per backbone partition.
pub type Subscription = (String, Arc<Positions>);

/// Subscriptions made together (one subscribe request): where they
/// started, once, and their patterns.
pub type Group = (Positions, Vec<String>);

/// `subs` gathered by shared start (one group per subscribe request).
pub fn groups(subs: impl IntoIterator<Item = Subscription>) -> Vec<Group> {
    // By the shared start itself (one per subscribe request), not by value:
    // a lookup per subscription instead of a comparison with every group.
    let mut at: HashMap<*const Positions, usize> = HashMap::new();
    let mut out: Vec<(Arc<Positions>, Vec<String>)> = Vec::new();
    for (p, start) in subs {
        match at.get(&Arc::as_ptr(&start)) {
            Some(&i) => out[i].1.push(p),
            None => {
                at.insert(Arc::as_ptr(&start), out.len());
                out.push((start, vec![p]));
            }
        }
    }
    out.into_iter()
        .map(|(s, ps)| (Arc::unwrap_or_clone(s), ps))
        .collect()
}

/// The registry key of session `pid`: its SHA-256, hex, first 128 bits.
pub fn key_of(pid: &str) -> String {
    let digest = Sha256::digest(pid.as_bytes());
    let mut s = String::with_capacity(32);
    for b in &digest[..16] {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// One change to a session namespace's state, as sent on
/// [`SESSIONS_TOPIC`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    /// [`key_of`] the session's pid.
    pub key: String,
    /// The namespace.
    pub nsp: String,
    /// Which incarnation of the session sent it: a session recovered on
    /// another node gets a new owner, and what its old node says later
    /// (that the parked copy expired) no longer applies.
    pub owner: String,
    /// This owner's count of updates of this namespace, from 1 (its
    /// CONNECT, or the `Own` of a recovery): a gap means an update was
    /// lost (dropped by a full backbone, evicted, sent before this node
    /// read), and a state with a gap cannot be recovered from.
    pub version: u64,
    /// The change.
    pub op: Op,
}

/// What an [`Update`] changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Subscriptions added together (a pattern already held keeps its
    /// first start).
    Add {
        /// The JWT subject the session was opened with.
        subject: Option<String>,
        /// The namespace's socket id (kept across a recovery).
        sid: Option<String>,
        /// Where they started.
        start: Positions,
        /// The patterns.
        patterns: Vec<String>,
    },
    /// The whole state, after a CONNECT or a recovery.
    Own {
        /// The JWT subject.
        subject: Option<String>,
        /// The socket id.
        sid: Option<String>,
        /// Every subscription, by start.
        groups: Vec<Group>,
    },
    /// Subscriptions removed.
    Remove {
        /// The patterns.
        patterns: Vec<String>,
    },
    /// The session namespace ended (left, or not recovered in time).
    Gone,
}

impl Update {
    /// The backbone message carrying this update.
    pub fn to_message(&self) -> Message {
        let body = serde_json::to_vec(self).unwrap_or_default();
        Message::new(SESSIONS_TOPIC, Bytes::from(body))
    }

    /// The update a backbone message carries, if it is one within bounds.
    pub fn from_message(msg: &Message) -> Option<Update> {
        if msg.payload.len() > MAX_UPDATE_BYTES {
            return None;
        }
        serde_json::from_slice(&msg.payload).ok()
    }
}

/// What the registry knows of one session namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The incarnation that last claimed it.
    pub owner: String,
    /// The JWT subject it was opened with.
    pub subject: Option<String>,
    /// Its socket id.
    pub sid: Option<String>,
    /// Its subscriptions: pattern → index in `starts`.
    patterns: HashMap<String, usize>,
    /// Where its subscriptions started, one per subscribe request, with
    /// how many of its patterns still use it (an unused one is emptied).
    starts: Vec<(Arc<Positions>, usize)>,
    /// Every update of its owner since the first was applied: the state
    /// is whole and may be recovered.
    pub complete: bool,
    version: u64,
    bytes: usize,
    generation: u64,
}

impl Entry {
    fn new(owner: String, version: u64) -> Entry {
        Entry {
            owner,
            subject: None,
            sid: None,
            patterns: HashMap::new(),
            starts: Vec::new(),
            complete: version == 1,
            version: version.saturating_sub(1),
            bytes: 0,
            generation: 0,
        }
    }

    fn add(&mut self, start: Positions, patterns: Vec<String>) {
        let at = self.starts.len();
        let mut used = 0;
        for p in patterns {
            if let std::collections::hash_map::Entry::Vacant(v) = self.patterns.entry(p) {
                v.insert(at);
                used += 1;
            }
        }
        if used > 0 {
            self.starts.push((Arc::new(start), used));
        }
    }

    fn remove(&mut self, pattern: &str) {
        let Some(i) = self.patterns.remove(pattern) else {
            return;
        };
        if let Some((start, refs)) = self.starts.get_mut(i) {
            *refs -= 1;
            if *refs == 0 {
                *start = Arc::default();
            }
        }
    }

    /// Its subscriptions, each with where it started.
    pub fn subs(&self) -> Vec<Subscription> {
        self.patterns
            .iter()
            .map(|(p, i)| (p.clone(), self.starts[*i].0.clone()))
            .collect()
    }

    fn cost(&self, key: &(String, String)) -> usize {
        // The key twice (the map and the order), maps' and strings'
        // overheads as flat costs.
        ENTRY_OVERHEAD
            + 2 * (key.0.len() + key.1.len())
            + self.owner.len()
            + self.subject.as_ref().map_or(0, String::len)
            + self.sid.as_ref().map_or(0, String::len)
            + self.patterns.keys().map(|p| 48 + p.len()).sum::<usize>()
            + self
                .starts
                .iter()
                .map(|(s, _)| 32 + 48 * s.len())
                .sum::<usize>()
    }
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<(String, String), Entry>,
    /// Keys by when they were last updated; an element whose generation is
    /// no longer its entry's is stale and skipped.
    order: VecDeque<((String, String), u64)>,
    bytes: usize,
    generation: u64,
}

/// Most recoveries from the backbone at once on one node: each reads the
/// backbone with a consumer of its own, and a node's death sends all its
/// clients to the others at once. Past it a client starts afresh.
pub const MAX_CONCURRENT_RECOVERIES: usize = 8;

/// The sessions other nodes (and this one) announced, bounded by bytes.
#[derive(Debug)]
pub struct ClusterSessions {
    inner: Mutex<Inner>,
    max_bytes: usize,
    /// Recoveries from the backbone running now (at most
    /// [`MAX_CONCURRENT_RECOVERIES`]).
    pub recoveries: tokio::sync::Semaphore,
    /// Session namespaces known (`tidegate_push_cluster_sessions`).
    pub known: Gauge,
}

impl Default for ClusterSessions {
    fn default() -> Self {
        ClusterSessions::new(DEFAULT_REGISTRY_BYTES)
    }
}

impl ClusterSessions {
    /// An empty registry keeping at most `max_bytes`.
    pub fn new(max_bytes: usize) -> Self {
        ClusterSessions {
            inner: Mutex::new(Inner::default()),
            max_bytes,
            recoveries: tokio::sync::Semaphore::new(MAX_CONCURRENT_RECOVERIES),
            known: Gauge::default(),
        }
    }

    /// Applies what a backbone message says (ignored unless it is an
    /// [`Update`]).
    pub fn handle(self: &Arc<Self>, msg: &Message) {
        if let Some(u) = Update::from_message(msg) {
            self.apply(u);
        }
    }

    /// Applies one update.
    pub fn apply(&self, u: Update) {
        let mut g = self.inner.lock();
        self.apply_locked(&mut g, u);
        self.known.set(g.map.len() as i64);
    }

    fn apply_locked(&self, g: &mut Inner, u: Update) {
        let inner = g;
        let key = (u.key, u.nsp);
        let old = inner.map.get(&key).map(|e| e.bytes).unwrap_or(0);
        match u.op {
            Op::Add {
                subject,
                sid,
                start,
                patterns,
            } => {
                let e = inner
                    .map
                    .entry(key.clone())
                    .or_insert_with(|| Entry::new(u.owner.clone(), u.version));
                if e.owner != u.owner {
                    // Only `Own` moves a session to another owner.
                    return;
                }
                if u.version != e.version.saturating_add(1) {
                    e.complete = false;
                }
                e.version = u.version;
                e.subject = subject;
                e.sid = sid.or(e.sid.take());
                e.add(start, patterns);
            }
            Op::Own {
                subject,
                sid,
                groups,
            } => {
                let mut e = Entry::new(u.owner, 1);
                e.version = u.version;
                e.subject = subject;
                e.sid = sid;
                for (start, patterns) in groups {
                    e.add(start, patterns);
                }
                inner.map.insert(key.clone(), e);
            }
            Op::Remove { patterns } => match inner.map.get_mut(&key) {
                Some(e) if e.owner == u.owner => {
                    if u.version != e.version.saturating_add(1) {
                        e.complete = false;
                    }
                    e.version = u.version;
                    for p in &patterns {
                        e.remove(p);
                    }
                }
                _ => return,
            },
            Op::Gone => {
                if inner.map.get(&key).is_some_and(|e| e.owner == u.owner) {
                    inner.map.remove(&key);
                    inner.bytes -= old;
                }
                return;
            }
        }
        inner.generation += 1;
        let generation = inner.generation;
        let Some(e) = inner.map.get_mut(&key) else {
            return;
        };
        e.bytes = e.cost(&key);
        e.generation = generation;
        let new = e.bytes;
        inner.bytes = inner.bytes - old + new;
        if new > MAX_ENTRY_BYTES {
            inner.map.remove(&key);
            inner.bytes -= new;
        } else {
            inner.order.push_back((key, generation));
        }
        while inner.bytes > self.max_bytes {
            let Some((k, gen)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&k).is_some_and(|e| e.generation == gen) {
                let gone = inner.map.remove(&k).map_or(0, |e| e.bytes);
                inner.bytes -= gone;
            }
        }
        if inner.order.len() > 2 * inner.map.len() + 64 {
            let Inner { map, order, .. } = inner;
            order.retain(|(k, gen)| map.get(k).is_some_and(|e| e.generation == *gen));
        }
    }

    /// What is known of session `key`'s namespace `nsp`.
    pub fn get(&self, key: &str, nsp: &str) -> Option<Entry> {
        self.inner
            .lock()
            .map
            .get(&(key.to_owned(), nsp.to_owned()))
            .cloned()
    }

    /// Session namespaces known.
    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    /// True when none is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

/// Characters of a session's owner id an offset carries ([`owner_tag`]).
pub const OWNER_TAG_LEN: usize = 8;

/// The part of owner id `owner` an offset carries: enough to tell this
/// incarnation of a session from another.
pub fn owner_tag(owner: &str) -> &str {
    owner.get(..OWNER_TAG_LEN).unwrap_or(owner)
}

/// The offset a cluster-mode event carries: `seq~tag;p:pos,p:pos` — the
/// hub sequence of the node that sent it, which incarnation of the session
/// sent it ([`owner_tag`]; a sequence means something only there), and the
/// backbone positions.
pub fn encode_offset(seq: u64, tag: &str, positions: &Positions) -> String {
    let mut s = String::with_capacity(32 + 24 * positions.len());
    let _ = write!(s, "{seq}~{tag};");
    for (i, (p, at)) in positions.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{p}:{at}");
    }
    s
}

/// What a client's offset says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOffset {
    /// The hub sequence of its last event.
    pub seq: u64,
    /// Which incarnation of the session sent it (cluster mode).
    pub tag: Option<String>,
    /// Its backbone positions (cluster mode).
    pub positions: Positions,
}

/// An offset a client sent back: `17` (single node) or
/// `17~tag;p:pos,…` ([`encode_offset`]). What does not parse counts as
/// nothing received: a clean replay or none, never a panic.
pub fn parse_offset(s: &str) -> ClientOffset {
    let (head, rest) = s.split_once(';').unwrap_or((s, ""));
    let (seq, tag) = match head.split_once('~') {
        Some((seq, tag)) => (seq, Some(tag.chars().take(OWNER_TAG_LEN).collect())),
        None => (head, None),
    };
    let seq = seq.parse().unwrap_or(0);
    let mut positions = Positions::new();
    for part in rest.split(',').take(MAX_OFFSET_PARTITIONS) {
        let Some((p, at)) = part.split_once(':') else {
            continue;
        };
        if let (Ok(p), Ok(at)) = (p.parse::<i32>(), at.parse::<i64>()) {
            if p >= 0 && at >= 0 {
                positions.insert(p, at);
            }
        }
    }
    ClientOffset {
        seq,
        tag,
        positions,
    }
}

/// Where a replay for subscriptions `subs`, of a client that had
/// `had`, starts in each partition: after what the client had, and not
/// before the earliest subscription started.
pub fn replay_from(had: &Positions, subs: &[Subscription]) -> Positions {
    let mut from = Positions::new();
    for (_, starts) in subs {
        for (p, at) in starts.iter() {
            let e = from.entry(*p).or_insert(*at);
            *e = (*e).min(*at);
        }
    }
    for (p, at) in had {
        let e = from.entry(*p).or_insert(*at);
        *e = (*e).max(*at);
    }
    from
}

/// Whether one of `subs` wanted a message on `topic` at position `at` of
/// partition `p`: it matches and was in place by then (a subscription
/// with no start for `p` wanted all of it).
pub fn wanted(subs: &[(Pattern, Arc<Positions>)], topic: &str, p: i32, at: i64) -> bool {
    subs.iter()
        .any(|(pat, starts)| pat.matches(topic) && starts.get(&p).is_none_or(|s| at >= *s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pos(v: &[(i32, i64)]) -> Positions {
        v.iter().copied().collect()
    }

    fn add(key: &str, owner: &str, version: u64, subs: &[(&str, &[(i32, i64)])]) -> Update {
        Update {
            key: key.into(),
            nsp: "/".into(),
            owner: owner.into(),
            version,
            op: Op::Add {
                subject: None,
                sid: None,
                start: pos(subs.first().map_or(&[][..], |(_, s)| s)),
                patterns: subs.iter().map(|(p, _)| p.to_string()).collect(),
            },
        }
    }

    fn sorted(mut subs: Vec<Subscription>) -> Vec<(String, Positions)> {
        subs.sort();
        subs.into_iter().map(|(p, s)| (p, (*s).clone())).collect()
    }

    #[test]
    fn updates_survive_the_backbone_message() {
        let u = add("k", "o", 1, &[("news.>", &[(0, 5), (3, 7)])]);
        assert_eq!(Update::from_message(&u.to_message()), Some(u));
        let g = Update {
            key: "k".into(),
            nsp: "/a".into(),
            owner: "o".into(),
            version: 2,
            op: Op::Gone,
        };
        assert_eq!(Update::from_message(&g.to_message()), Some(g));
        assert_eq!(
            Update::from_message(&Message::new(SESSIONS_TOPIC, "{not json")),
            None
        );
    }

    #[test]
    fn adds_accumulate_and_removes_and_gone_need_the_owner() {
        let r = ClusterSessions::default();
        r.apply(add("k", "o1", 1, &[("a", &[(0, 1)])]));
        r.apply(add("k", "o1", 2, &[("b", &[(0, 2)]), ("a", &[(0, 2)])]));
        let e = r.get("k", "/").unwrap();
        assert!(e.complete);
        assert_eq!(
            sorted(e.subs()),
            vec![("a".into(), pos(&[(0, 1)])), ("b".into(), pos(&[(0, 2)]))],
            "a pattern keeps its first start"
        );
        // Recovered elsewhere: a new owner; the old one's word is void.
        r.apply(Update {
            key: "k".into(),
            nsp: "/".into(),
            owner: "o2".into(),
            version: 1,
            op: Op::Own {
                subject: None,
                sid: None,
                groups: groups(e.subs()),
            },
        });
        r.apply(add("k", "o1", 3, &[("c", &[(0, 3)])]));
        for op in [
            Op::Remove {
                patterns: vec!["a".into()],
            },
            Op::Gone,
        ] {
            r.apply(Update {
                key: "k".into(),
                nsp: "/".into(),
                owner: "o1".into(),
                version: 4,
                op,
            });
        }
        let e = r.get("k", "/").unwrap();
        assert_eq!((e.subs().len(), e.owner.as_str()), (2, "o2"));
        r.apply(Update {
            key: "k".into(),
            nsp: "/".into(),
            owner: "o2".into(),
            version: 2,
            op: Op::Gone,
        });
        assert!(r.get("k", "/").is_none());
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn a_state_with_a_lost_update_cannot_be_recovered() {
        let r = ClusterSessions::default();
        // Its first update was lost (or evicted, or sent before this node
        // read the backbone).
        r.apply(add("k", "o", 2, &[("b", &[(0, 2)])]));
        assert!(!r.get("k", "/").unwrap().complete);
        // A gap in the middle.
        r.apply(add("j", "o", 1, &[]));
        r.apply(add("j", "o", 2, &[("a", &[(0, 1)])]));
        assert!(r.get("j", "/").unwrap().complete);
        r.apply(add("j", "o", 4, &[("c", &[(0, 1)])]));
        assert!(!r.get("j", "/").unwrap().complete);
        // A recovery's whole state makes it whole again.
        r.apply(Update {
            key: "j".into(),
            nsp: "/".into(),
            owner: "p".into(),
            version: 1,
            op: Op::Own {
                subject: None,
                sid: None,
                groups: vec![],
            },
        });
        assert!(r.get("j", "/").unwrap().complete);
        r.apply(add("j", "p", 2, &[("d", &[])]));
        assert!(r.get("j", "/").unwrap().complete);
    }

    #[test]
    fn the_registry_forgets_the_oldest_past_its_bytes() {
        let r = ClusterSessions::new(10_000);
        for i in 0..1000 {
            r.apply(add(&format!("k{i}"), "o", 1, &[("news.>", &[(0, i)])]));
            assert!(r.bytes() <= 10_000);
        }
        assert!(r.get("k999", "/").is_some());
        assert!(r.get("k0", "/").is_none());
        assert!(r.len() < 1000);
        // Updating an old entry keeps it over newer ones.
        let first = (0..1000)
            .find(|i| r.get(&format!("k{i}"), "/").is_some())
            .unwrap();
        r.apply(add(&format!("k{first}"), "o", 2, &[("more", &[])]));
        for i in 1000..1010 {
            r.apply(add(&format!("k{i}"), "o", 1, &[("news.>", &[(0, i)])]));
        }
        assert!(r.get(&format!("k{first}"), "/").is_some());
    }

    #[test]
    fn a_replay_starts_after_what_the_client_had_and_not_before_its_subscriptions() {
        let subs = vec![
            ("a".to_string(), Arc::new(pos(&[(0, 100), (1, 50)]))),
            ("b".to_string(), Arc::new(pos(&[(0, 200), (1, 60)]))),
        ];
        assert_eq!(
            replay_from(&pos(&[(0, 150)]), &subs),
            pos(&[(0, 150), (1, 50)])
        );
        let parsed: Vec<(Pattern, Arc<Positions>)> = subs
            .iter()
            .map(|(p, s)| (Pattern::parse(p).unwrap(), s.clone()))
            .collect();
        assert!(wanted(&parsed, "a", 0, 150));
        assert!(!wanted(&parsed, "b", 0, 150), "b started at 200");
        assert!(wanted(&parsed, "b", 0, 200));
        assert!(!wanted(&parsed, "c", 0, 300));
        assert!(wanted(&parsed, "a", 7, 0), "no start for 7: all of it");
    }

    #[test]
    fn subscriptions_made_together_share_their_start() {
        let a = Arc::new(pos(&[(0, 1)]));
        let b = Arc::new(pos(&[(0, 2)]));
        let g = groups([
            ("x".to_string(), a.clone()),
            ("y".to_string(), b.clone()),
            ("z".to_string(), a.clone()),
        ]);
        assert_eq!(
            g,
            vec![
                (pos(&[(0, 1)]), vec!["x".to_string(), "z".to_string()]),
                (pos(&[(0, 2)]), vec!["y".to_string()]),
            ]
        );
        // An entry of 10,000 subscriptions in one request costs one start.
        let r = ClusterSessions::default();
        let many: Vec<String> = (0..10_000).map(|i| format!("t.{i}")).collect();
        r.apply(Update {
            key: "k".into(),
            nsp: "/".into(),
            owner: "o".into(),
            version: 1,
            op: Op::Add {
                subject: None,
                sid: None,
                start: pos(&[(0, 5), (1, 6), (2, 7)]),
                patterns: many,
            },
        });
        assert!(r.bytes() < 10_000 * 64, "{}", r.bytes());
        assert_eq!(r.get("k", "/").unwrap().subs().len(), 10_000);
    }

    #[test]
    fn a_session_that_keeps_subscribing_and_unsubscribing_stays_small() {
        let r = ClusterSessions::default();
        r.apply(add("k", "o", 1, &[]));
        for v in 0..2_000u64 {
            let p = format!("t.{v}");
            r.apply(Update {
                key: "k".into(),
                nsp: "/".into(),
                owner: "o".into(),
                version: 2 + 2 * v,
                op: Op::Add {
                    subject: None,
                    sid: None,
                    start: pos(&[(0, 1), (1, 2), (2, 3), (3, 4)]),
                    patterns: vec![p.clone()],
                },
            });
            r.apply(Update {
                key: "k".into(),
                nsp: "/".into(),
                owner: "o".into(),
                version: 3 + 2 * v,
                op: Op::Remove { patterns: vec![p] },
            });
        }
        let e = r.get("k", "/").unwrap();
        assert!(e.complete && e.subs().is_empty());
        assert!(r.bytes() < 2_000 * 64, "{}", r.bytes());
    }

    #[test]
    fn hostile_offsets_parse_to_something_bounded() {
        let plain = |seq, positions| ClientOffset {
            seq,
            tag: None,
            positions,
        };
        assert_eq!(parse_offset("17"), plain(17, Positions::new()));
        assert_eq!(parse_offset(""), plain(0, Positions::new()));
        assert_eq!(parse_offset("x;0:-1,:,5:9,a:b"), plain(0, pos(&[(5, 9)])));
        let tagged = parse_offset("3~abcdefghijk;1:2");
        assert_eq!((tagged.seq, tagged.tag.as_deref()), (3, Some("abcdefgh")));
        let huge: String = (0..10_000).map(|i| format!("{i}:1,")).collect();
        assert_eq!(
            parse_offset(&format!("1;{huge}")).positions.len(),
            MAX_OFFSET_PARTITIONS
        );
    }

    proptest! {
        #[test]
        fn offsets_round_trip(seq in any::<u64>(), tag in "[A-Za-z0-9_-]{8}", v in proptest::collection::btree_map(0i32..1000, 0i64..i64::MAX, 0..20)) {
            prop_assert_eq!(
                parse_offset(&encode_offset(seq, &tag, &v)),
                ClientOffset { seq, tag: Some(tag.clone()), positions: v }
            );
        }

        #[test]
        fn any_offset_text_parses_without_panic(s in ".{0,200}") {
            let _ = parse_offset(&s);
        }
    }
}
