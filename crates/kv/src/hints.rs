//! Hinted handoff: when a replica does not take a write, the coordinator
//! keeps the stamped record on its own disk (the engine's `hints`
//! keyspace, one hint per node and key, the newest wins) and a background
//! task delivers it when the replica answers again, then forgets it.
//!
//! Bounded: at most [`MAX_HINTS_PER_NODE`] keys are kept per node; past
//! that a hint is dropped and counted (the replica then catches up
//! through read repair, anti-entropy or later writes). Hints are kept whatever the write's
//! outcome for the client (201 or 504): the record is newer than what the
//! replica has, so delivering it is always safe under last-write-wins.
//! The bound counts keys, not bytes: the engine keeps no byte count of a
//! node's hints (one replaced in place or found on disk at start-up has no
//! size known here), so their disk use is bounded only by the keys times
//! `[http] max_body_bytes`.
//!
//! Every [`REPLAY_INTERVAL`] a round offers each node its hints in key
//! order, each as a signed one-entry `PUT` [`BATCH_PATH`] of its own (not
//! through the client's per-peer batch queue, whose batch-wide answer
//! would hide a refusal of this one record). What the replica makes of a
//! hint decides what comes next, so that a hint that can never be
//! delivered does not hold back the ones after it:
//!
//! - taken (applied, or not newer than the replica's): the hint is forgotten;
//! - refused (400 or 413: this request can never be taken as it is, e.g. a
//!   value over the replica's body limit): the hint is dropped, counted in
//!   `hints_refused`, and the next one offered (the key is left to
//!   anti-entropy and read repair);
//! - no answer at all (connection failed or reset, replica timeout): the
//!   replica is asked for an empty batch. No answer to that either: it is
//!   away, the round ends (later hints would fail too). An answer: the
//!   failure was this hint's (a replica that refuses a large body early
//!   and closes the connection loses the 413 to a reset about half the
//!   time), so it is set aside for the round and the next one offered. A
//!   hint set aside in [`MAX_LOST_ROUNDS`] rounds, each time with the
//!   replica taking another hint after it (or nothing left after it), is
//!   dropped and counted as refused. [`MAX_LOST_IN_A_ROW`] hints set aside
//!   in a row end the round without counting: then the replica, not the
//!   hints, is at fault;
//! - any other answer — a failed entry (the replica's storage failed: that
//!   is the replica's state, not the record's), another status (403, 408,
//!   429, 5xx), a malformed answer: the replica is unwell; the round ends
//!   and the hint is offered again next round.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::{Method, StatusCode};
use parking_lot::Mutex;

use crate::batch::{self, BatchOp, BatchReply};
use crate::client::{ReplicaClient, BATCH_PATH};
use crate::engine::Engine;
use crate::metrics::KvMetrics;
use crate::record::Record;

/// Most keys with a pending hint per replica.
pub const MAX_HINTS_PER_NODE: usize = 100_000;
/// How often pending hints are offered to their replicas.
pub const REPLAY_INTERVAL: Duration = Duration::from_millis(500);
/// Rounds in which a hint may get no answer from a replica that answers
/// otherwise before it is dropped as refused.
pub const MAX_LOST_ROUNDS: u32 = 3;
/// Hints in a row that may get no answer from a replica that answers
/// otherwise before the round ends (the replica is then at fault).
pub const MAX_LOST_IN_A_ROW: usize = 8;
/// Hints read from disk per step of a replay (each is sent on its own).
const REPLAY_BATCH: usize = 256;
/// Largest answer read for one offered hint (one reply entry is one byte).
const MAX_OFFER_ANSWER_BYTES: usize = 1024;

/// What a replica made of one offered hint.
#[derive(Debug, PartialEq, Eq)]
enum Offer {
    /// Applied, or not newer than what the replica has: forget the hint.
    Taken,
    /// Refused for what it is (400, 413): it can never be delivered as it
    /// is; drop it and offer the next one.
    Refused(StatusCode),
    /// No answer (connection failed or reset, timeout): the replica is
    /// away, or this hint's request is what failed.
    Lost(String),
    /// An answer that says nothing about this hint (the replica is unwell
    /// or misconfigured): keep it, end the round.
    Away(String),
}

/// A hint set aside in a round: its key and the record offered.
type Aside = (Bytes, Record);

/// Hint bookkeeping of one coordinator.
pub struct Hints {
    engine: Arc<Engine>,
    /// Peer URLs, by ring index (this node's entry is never used).
    nodes: Vec<String>,
    /// Pending hints per node (keys).
    pending: Vec<AtomicUsize>,
    /// Rounds each hint was set aside in, by node and key, with the stamp
    /// of the record offered (a newer record starts again from none).
    lost: Mutex<HashMap<(usize, Bytes), (u64, u32)>>,
    /// Stored, delivered, dropped and pending hints.
    metrics: KvMetrics,
}

impl Hints {
    /// Bookkeeping for `nodes`, counting the hints already on disk.
    pub fn new(engine: Arc<Engine>, nodes: Vec<String>, metrics: KvMetrics) -> Self {
        let pending: Vec<AtomicUsize> = nodes
            .iter()
            .map(|n| AtomicUsize::new(engine.count_hints(n).unwrap_or(0)))
            .collect();
        let total: usize = pending.iter().map(|p| p.load(Ordering::Relaxed)).sum();
        metrics.hints_pending.set(total as i64);
        Hints {
            engine,
            nodes,
            pending,
            lost: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Keeps `record` for node `node` (blocking: call off the runtime).
    pub fn keep(&self, node: usize, key: &[u8], record: &Record) {
        if self.pending[node].load(Ordering::Relaxed) >= MAX_HINTS_PER_NODE {
            self.metrics.hints_dropped.inc();
            tracing::warn!(node = %self.nodes[node], "kv: hint dropped, the node's hint bound is reached");
            return;
        }
        match self.engine.put_hint(&self.nodes[node], key, record) {
            Ok(new) => {
                if new {
                    self.pending[node].fetch_add(1, Ordering::Relaxed);
                    self.metrics.hints_pending.inc();
                }
                self.metrics.hints_stored.inc();
            }
            Err(e) => tracing::error!(error = %e, "kv: storing a hint failed"),
        }
    }

    /// One round for `node`: offers its hints until it is away or unwell
    /// or none is left; hints it refuses are dropped on the way, hints
    /// that alone get no answer are set aside (see the module's notes).
    async fn replay(&self, node: usize, client: &ReplicaClient, timeout: Duration) {
        let url = &self.nodes[node];
        // Keys set aside this round, and the latest of them in a row.
        let mut aside: HashSet<Bytes> = HashSet::new();
        let mut run: Vec<Aside> = Vec::new();
        while self.pending[node].load(Ordering::Relaxed) > 0 {
            let engine = self.engine.clone();
            let owned = url.clone();
            // Enough to hold every hint set aside and a batch of new ones.
            let limit = REPLAY_BATCH + aside.len();
            let batch = tokio::task::spawn_blocking(move || engine.hints_for(&owned, limit))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            if batch.is_empty() {
                let gone = self.pending[node].swap(0, Ordering::Relaxed);
                self.metrics.hints_pending.dec_by(gone as i64);
                return;
            }
            let fresh: Vec<_> = batch
                .into_iter()
                .filter(|(key, _)| !aside.contains(key))
                .collect();
            if fresh.is_empty() {
                // Every hint left was set aside: nothing came after the
                // last of them to tell the replica's fault from theirs.
                self.count_lost(node, &mut run).await;
                return;
            }
            let mut moved = false;
            for (key, record) in fresh {
                match offer(client, url, &key, &record, timeout).await {
                    Offer::Taken => {
                        if self.remove(node, key, record).await {
                            self.metrics.hints_delivered.inc();
                            moved = true;
                        }
                        self.count_lost(node, &mut run).await;
                    }
                    Offer::Refused(status) => {
                        tracing::warn!(
                            node = %url,
                            key = %String::from_utf8_lossy(&key),
                            %status,
                            "kv: hint refused by its replica, dropped (the key is left to anti-entropy and read repair)"
                        );
                        if self.remove(node, key, record).await {
                            self.metrics.hints_refused.inc();
                            moved = true;
                        }
                        self.count_lost(node, &mut run).await;
                    }
                    Offer::Lost(why) => {
                        if !answers(client, url, timeout).await {
                            tracing::debug!(node = %url, reason = %why, "kv: hint replay paused, the node is away");
                            return;
                        }
                        tracing::debug!(
                            node = %url,
                            key = %String::from_utf8_lossy(&key),
                            reason = %why,
                            "kv: hint got no answer from a node that answers, set aside"
                        );
                        aside.insert(key.clone());
                        run.push((key, record));
                        moved = true;
                        if run.len() >= MAX_LOST_IN_A_ROW {
                            return;
                        }
                    }
                    Offer::Away(why) => {
                        tracing::debug!(node = %url, reason = %why, "kv: hint replay paused");
                        return; // try again next round
                    }
                }
            }
            if !moved {
                // Nothing could be removed (storage failing, or every hint
                // replaced meanwhile): the same hints would come back at
                // once; leave them to the next round.
                return;
            }
        }
    }

    /// Counts a round against each hint of `run` (set aside, and followed
    /// by a hint the replica answered, or by none); drops those set aside
    /// in [`MAX_LOST_ROUNDS`] rounds as refused.
    async fn count_lost(&self, node: usize, run: &mut Vec<Aside>) {
        for (key, record) in run.drain(..) {
            let rounds = {
                let mut lost = self.lost.lock();
                let entry = lost
                    .entry((node, key.clone()))
                    .or_insert((record.timestamp, 0));
                if entry.0 != record.timestamp {
                    *entry = (record.timestamp, 0);
                }
                entry.1 += 1;
                entry.1
            };
            if rounds < MAX_LOST_ROUNDS {
                continue;
            }
            tracing::warn!(
                node = %self.nodes[node],
                key = %String::from_utf8_lossy(&key),
                rounds,
                "kv: hint never answered by its replica, dropped (the key is left to anti-entropy and read repair)"
            );
            if self.remove(node, key, record).await {
                self.metrics.hints_refused.inc();
            }
        }
    }

    /// Removes the hint of `key` for `node` unless a newer one replaced it
    /// meanwhile; whether it was removed.
    async fn remove(&self, node: usize, key: Bytes, record: Record) -> bool {
        let engine = self.engine.clone();
        let url = self.nodes[node].clone();
        let lost_key = (node, key.clone());
        let removed =
            tokio::task::spawn_blocking(move || engine.remove_hint(&url, &key, &record)).await;
        let removed = matches!(removed, Ok(Ok(true)));
        if removed {
            self.lost.lock().remove(&lost_key);
            self.pending[node].fetch_sub(1, Ordering::Relaxed);
            self.metrics.hints_pending.dec();
        }
        removed
    }

    /// Replays every node's hints every [`REPLAY_INTERVAL`], for as long as
    /// the store lives (the task holds only a weak reference).
    pub fn spawn_replay(
        hints: &Arc<Hints>,
        client: ReplicaClient,
        self_index: usize,
        timeout: Duration,
    ) {
        let weak = Arc::downgrade(hints);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REPLAY_INTERVAL).await;
                let Some(hints) = weak.upgrade() else { return };
                for node in 0..hints.nodes.len() {
                    if node != self_index {
                        hints.replay(node, &client, timeout).await;
                    }
                }
            }
        });
    }
}

/// A signed `PUT` [`BATCH_PATH`] of `body` to `node`: the status and the
/// answer, or why there is none (within `timeout`).
async fn exchange(
    client: &ReplicaClient,
    node: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    let exchange = async {
        let resp = client
            .signed(node, Method::PUT, BATCH_PATH, body)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let answer = Limited::new(resp.into_body(), MAX_OFFER_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, answer))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(done) => done,
        Err(_) => Err(format!("no answer in {} ms", timeout.as_millis())),
    }
}

/// Offers one hint to `node` as a signed one-entry batch, within `timeout`.
async fn offer(
    client: &ReplicaClient,
    node: &str,
    key: &Bytes,
    record: &Record,
    timeout: Duration,
) -> Offer {
    let body = batch::encode_ops(&[BatchOp::Put(key.clone(), record.clone())]);
    let (status, answer) = match exchange(client, node, body, timeout).await {
        Ok(done) => done,
        Err(why) => return Offer::Lost(why),
    };
    match status {
        StatusCode::OK => match batch::decode_replies(answer).as_deref() {
            Ok([BatchReply::Applied | BatchReply::NotNewer]) => Offer::Taken,
            Ok([BatchReply::Failed]) => Offer::Away("the replica failed to store it".into()),
            Ok(other) => Offer::Away(format!("unexpected answer {other:?}")),
            Err(e) => Offer::Away(format!("bad answer: {e}")),
        },
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => Offer::Refused(status),
        other => Offer::Away(format!("answered {other}")),
    }
}

/// Whether `node` answers an empty batch (signed, within `timeout`).
async fn answers(client: &ReplicaClient, node: &str, timeout: Duration) -> bool {
    matches!(
        exchange(client, node, Bytes::new(), timeout).await,
        Ok((StatusCode::OK, _))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SyncPolicy;
    use axum::response::{IntoResponse, Response};

    /// How the fake peer answers a batch holding a key.
    #[derive(Clone, Copy)]
    enum Answer {
        /// 200 with this reply code (1 applied, 2 not newer, 5 failed).
        Reply(u8),
        /// This status.
        Status(u16),
        /// Nothing, for longer than the tests' timeout.
        Never,
    }

    /// The tests' replica timeout.
    const TIMEOUT: Duration = Duration::from_millis(200);

    /// A peer that answers each one-entry batch as `answer` says for its
    /// key (and an empty one with 200), and records the keys it was
    /// offered. Returns its URL.
    async fn fake_peer(
        answer: fn(&[u8]) -> Answer,
    ) -> (String, Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
        let offered = Arc::new(Mutex::new(Vec::new()));
        let seen = offered.clone();
        let app = axum::Router::new().route(
            BATCH_PATH,
            axum::routing::put(move |body: Bytes| async move {
                let ops = batch::decode_ops(body).unwrap();
                let key = match &ops[..] {
                    [] => return batch::encode_replies(&[]).into_response(),
                    [BatchOp::Put(key, _)] => key,
                    _ => panic!("not one put: {ops:?}"),
                };
                seen.lock().push(String::from_utf8_lossy(key).into_owned());
                let r: Response = match answer(key) {
                    Answer::Status(s) => StatusCode::from_u16(s).unwrap().into_response(),
                    Answer::Reply(code) => {
                        let reply = match code {
                            1 => BatchReply::Applied,
                            2 => BatchReply::NotNewer,
                            _ => BatchReply::Failed,
                        };
                        batch::encode_replies(&[reply]).into_response()
                    }
                    Answer::Never => {
                        tokio::time::sleep(TIMEOUT * 10).await;
                        StatusCode::OK.into_response()
                    }
                };
                r
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (url, offered, served)
    }

    /// Hints kept on this node (index 0) for `peer` (index 1), one per key.
    fn hints_for(peer: &str, keys: &[&str]) -> (Arc<Hints>, KvMetrics, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(dir.path(), SyncPolicy::None).unwrap());
        let metrics = KvMetrics::default();
        let nodes = vec!["http://127.0.0.1:1".to_owned(), peer.to_owned()];
        let hints = Arc::new(Hints::new(engine, nodes, metrics.clone()));
        for (i, k) in keys.iter().enumerate() {
            let record = Record::value(i as u64 + 1, Bytes::from(format!("v{k}")));
            hints.keep(1, k.as_bytes(), &record);
        }
        (hints, metrics, dir)
    }

    fn client() -> ReplicaClient {
        ReplicaClient::new(Bytes::from_static(b"secret")).with_batching(true)
    }

    const KEYS: [&str; 7] = ["a1", "a2", "z1", "z2", "z3", "z4", "z5"];

    #[tokio::test]
    async fn a_refused_hint_is_dropped_and_the_ones_after_it_are_still_delivered() {
        // a1 is over the replica's body limit, a2 is not a request it can
        // read: neither can ever be taken, and they come first in key order.
        let (peer, offered, served) = fake_peer(|key| match key {
            b"a1" => Answer::Status(413),
            b"a2" => Answer::Status(400),
            b"z2" => Answer::Reply(2), // not newer: delivered all the same
            _ => Answer::Reply(1),
        })
        .await;
        let (hints, metrics, _dir) = hints_for(&peer, &KEYS);
        assert_eq!(metrics.hints_pending.get(), 7);

        hints.replay(1, &client(), TIMEOUT).await;

        assert_eq!(*offered.lock(), KEYS, "every hint offered once, in order");
        assert_eq!(metrics.hints_delivered.get(), 5);
        assert_eq!(metrics.hints_refused.get(), 2);
        assert_eq!(metrics.hints_dropped.get(), 0);
        assert_eq!(metrics.hints_pending.get(), 0);
        assert_eq!(hints.pending[1].load(Ordering::Relaxed), 0);
        assert_eq!(hints.engine.count_hints(&peer).unwrap(), 0);
        // Nothing is left to offer: the next round sends nothing.
        hints.replay(1, &client(), TIMEOUT).await;
        assert_eq!(offered.lock().len(), KEYS.len());
        served.abort();
    }

    #[tokio::test]
    async fn a_hint_alone_unanswered_is_set_aside_and_dropped_after_its_rounds() {
        // a1 never gets an answer (as a large body refused early can lose
        // its 413 to a reset) while the peer answers everything else.
        let (peer, offered, served) = fake_peer(|key| match key {
            b"a1" => Answer::Never,
            b"a2" => Answer::Status(413),
            _ => Answer::Reply(1),
        })
        .await;
        let (hints, metrics, _dir) = hints_for(&peer, &KEYS);

        hints.replay(1, &client(), TIMEOUT).await;
        assert_eq!(*offered.lock(), KEYS, "a1 held nothing back");
        assert_eq!(metrics.hints_delivered.get(), 5);
        assert_eq!(metrics.hints_refused.get(), 1);
        assert_eq!(metrics.hints_pending.get(), 1, "a1 kept for now");

        for round in 2..=MAX_LOST_ROUNDS {
            assert_eq!(metrics.hints_pending.get(), 1, "round {round}");
            hints.replay(1, &client(), TIMEOUT).await;
        }
        assert_eq!(
            offered.lock().len(),
            KEYS.len() + MAX_LOST_ROUNDS as usize - 1
        );
        assert_eq!(metrics.hints_refused.get(), 2, "a1 dropped");
        assert_eq!(metrics.hints_pending.get(), 0);
        assert_eq!(hints.engine.count_hints(&peer).unwrap(), 0);
        assert!(hints.lost.lock().is_empty());
        served.abort();
    }

    #[tokio::test]
    async fn many_hints_unanswered_in_a_row_end_the_round_and_are_kept() {
        // The peer answers an empty batch but no write: the fault is its.
        let (peer, offered, served) = fake_peer(|_| Answer::Never).await;
        let keys: Vec<String> = (0..MAX_LOST_IN_A_ROW + 2)
            .map(|i| format!("k{i:02}"))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (hints, metrics, _dir) = hints_for(&peer, &keys);
        for _ in 0..MAX_LOST_ROUNDS {
            hints.replay(1, &client(), TIMEOUT).await;
        }
        assert_eq!(
            offered.lock().len(),
            MAX_LOST_IN_A_ROW * MAX_LOST_ROUNDS as usize
        );
        assert_eq!(metrics.hints_refused.get(), 0);
        assert_eq!(metrics.hints_pending.get(), keys.len() as i64);
        assert!(hints.lost.lock().is_empty(), "no round counted");
        served.abort();
    }

    #[tokio::test]
    async fn a_peer_that_is_away_or_unwell_keeps_every_hint_and_ends_the_round() {
        // Answers that say nothing about the hint itself: a signature
        // refused (secret or clock), a request timeout, overload, a server
        // error, an entry the replica failed to store.
        let unwell: [fn(&[u8]) -> Answer; 5] = [
            |_| Answer::Status(403),
            |_| Answer::Status(408),
            |_| Answer::Status(429),
            |_| Answer::Status(500),
            |_| Answer::Reply(5),
        ];
        for (i, answer) in unwell.into_iter().enumerate() {
            let (peer, offered, served) = fake_peer(answer).await;
            let (hints, metrics, _dir) = hints_for(&peer, &KEYS);
            hints.replay(1, &client(), TIMEOUT).await;
            assert_eq!(*offered.lock(), ["a1"], "case {i}: the round goes on");
            assert_eq!(metrics.hints_pending.get(), 7, "case {i}");
            assert_eq!(metrics.hints_refused.get(), 0, "case {i}");
            assert_eq!(metrics.hints_delivered.get(), 0, "case {i}");
            assert_eq!(hints.engine.count_hints(&peer).unwrap(), 7, "case {i}");
            served.abort();
        }

        // Nobody listening: no answer, and none to the empty batch either.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let (hints, metrics, _dir) = hints_for(&peer, &KEYS);
        for _ in 0..=MAX_LOST_ROUNDS {
            hints.replay(1, &client(), TIMEOUT).await;
        }
        assert_eq!(metrics.hints_pending.get(), 7);
        assert_eq!(metrics.hints_refused.get(), 0);
        assert_eq!(hints.engine.count_hints(&peer).unwrap(), 7);
        assert!(hints.lost.lock().is_empty());
    }
}
