//! Hinted handoff: when a replica does not take a write, the coordinator
//! keeps the stamped record on its own disk (the engine's `hints`
//! keyspace, one hint per node and key, the newest wins) and a background
//! task delivers it when the replica answers again, then forgets it.
//!
//! Bounded per node twice ([`crate::hint_bounds`]): at most
//! [`MAX_HINTS_PER_NODE`] keys and at most `[kv] max_hint_bytes_per_node`
//! bytes (each hint's key and stored record). A hint that would take a
//! node past either is dropped and counted in `hints_dropped` (the replica
//! then catches up through read repair, anti-entropy or later writes); a
//! newer hint for a key already hinted counts only what it adds. The
//! totals are counted on disk at start-up and then follow every hint
//! stored, replaced, delivered or dropped: a hint reserves its room in the
//! node's [`HintLedger`] before it is written and settles it after, so no
//! lock on the totals is held across the disk, and the hints in flight
//! count against the bounds. A count that fails at start-up is tried
//! again by the replay task, every [`COUNT_RETRY_INTERVAL`] until it
//! succeeds (until then the totals count only the hints kept since, so
//! the replay would not know of the others). Hints
//! are kept whatever the write's outcome for the client (201 or 504): the
//! record is newer than what the replica has, so delivering it is always
//! safe under last-write-wins.
//!
//! A node's hints are written one at a time, at most
//! [`MAX_KEEPS_IN_FLIGHT`] of at most [`MAX_KEEP_BYTES_IN_FLIGHT`] together
//! waiting ([`crate::hint_gate`]); one more is dropped and counted in
//! `hints_dropped` like one past a bound. A hint larger than the node's
//! byte bound is dropped before it waits: it could not be kept, and would
//! hold its record in memory meanwhile.
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
//!
//! A hint whose record cannot be decoded (damaged on disk) can never be
//! delivered: it is deleted and counted in `hints_refused`, and the ones
//! after it offered. A read of the hints that fails (the storage failing)
//! ends the round, logged at most once per `WARNING_EVERY` (10 s).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::{Method, StatusCode};
use parking_lot::Mutex;

use crate::batch::{self, BatchOp, BatchReply};
use crate::client::{ReplicaClient, BATCH_PATH};
use crate::engine::{hint_bytes, Engine, HintPut, HintTotals};
use crate::error::KvError;
use crate::hint_bounds::{Exceeded, HintBounds, HintLedger, Reservation};
use crate::hint_gate::KeepGate;
use crate::log_every::LogEvery;
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
/// Hints per replica that may wait to be written or be written at once
/// ([`crate::hint_gate`]): as many as a replica going away can fail at
/// once — its client queue (8,192 operations) and two batches in flight
/// (4,096 each) — so that only a stalled disk makes one more be dropped.
pub const MAX_KEEPS_IN_FLIGHT: usize = 16_384;
/// Bytes of hints ([`hint_bytes`]) per replica that may wait to be
/// written or be written at once, unless one hint alone is larger
/// ([`crate::hint_gate`]). Each holds its record in memory, after the
/// client was answered and outside the hub's in-flight byte budget. 64 MiB
/// is 8 times the two batches a replica going away fails at once (4 MiB
/// each), so that on a healthy disk only values of several MiB failing in
/// a burst fill it; a replica that misses those catches up through read
/// repair and anti-entropy. Not lowered to a node's byte bound when that
/// is lower: hints waiting for the same keys replace each other on disk,
/// so more may wait than the bound holds.
pub const MAX_KEEP_BYTES_IN_FLIGHT: u64 = 64 * 1024 * 1024;
/// How often a count of a node's hints on disk that failed is tried again
/// (it scans them all, holding back that node's new hints meanwhile).
pub const COUNT_RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// Hints read from disk per step of a replay (each is sent on its own).
const REPLAY_BATCH: usize = 256;
/// At most one warning of each kind per node this often.
const WARNING_EVERY: Duration = Duration::from_secs(10);
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

/// One node's warnings that may repeat at every write or every round,
/// each logged at most once per [`WARNING_EVERY`].
struct Warnings {
    /// A hint dropped at a bound: while a node is away with its bound
    /// full, every write to it drops one.
    dropped: Mutex<LogEvery>,
    /// A hint dropped with [`MAX_KEEPS_IN_FLIGHT`] in flight, or their
    /// bytes at their bound.
    busy: Mutex<LogEvery>,
    /// A hint that cannot be decoded, deleted.
    unreadable: Mutex<LogEvery>,
    /// Reading or counting the hints failed (every round, while the
    /// storage fails).
    storage: Mutex<LogEvery>,
}

impl Warnings {
    fn new() -> Self {
        let every = || Mutex::new(LogEvery::new(WARNING_EVERY));
        Warnings {
            dropped: every(),
            busy: every(),
            unreadable: every(),
            storage: every(),
        }
    }
}

/// One more of the warnings `every` counts: how many were not logged
/// since the last one, when this one is to be logged.
fn due(every: &Mutex<LogEvery>) -> Option<u64> {
    every.lock().occurred(Instant::now())
}

/// Hint bookkeeping of one coordinator.
pub struct Hints {
    engine: Arc<Engine>,
    /// Peer URLs, by ring index (this node's entry is never used).
    nodes: Vec<String>,
    /// What one node's hints may hold.
    bounds: HintBounds,
    /// Pending hints per node (keys and bytes), by ring index.
    ledgers: Vec<Arc<HintLedger>>,
    /// Each node's hints on their way to disk, by ring index.
    gates: Vec<KeepGate>,
    /// When each node's hints are to be counted on disk again, by ring
    /// index: `None` once counted (the count at start-up failed
    /// otherwise).
    count_due: Vec<Mutex<Option<Instant>>>,
    /// Rounds each hint was set aside in, by node and key, with the stamp
    /// of the record offered (a newer record starts again from none).
    lost: Mutex<HashMap<(usize, Bytes), (u64, u32)>>,
    /// Stored, delivered, dropped and pending hints.
    metrics: KvMetrics,
    /// Each node's repeating warnings, by ring index.
    warnings: Vec<Warnings>,
}

impl Hints {
    /// Bookkeeping for `nodes`, each holding at most `bounds`, counting
    /// the hints already on disk (a scan of them: blocking).
    pub fn new(
        engine: Arc<Engine>,
        nodes: Vec<String>,
        bounds: HintBounds,
        metrics: KvMetrics,
    ) -> Self {
        // One scan: the totals of the listed nodes, and the hints of nodes
        // no longer listed dropped.
        let census = engine.hint_census(&nodes).map_err(|e| {
            tracing::error!(error = %e, "kv: counting the hints on disk failed, the replay task tries again");
        });
        if let Ok(census) = &census {
            for (node, count) in &census.gone {
                tracing::warn!(%node, count, "kv: dropped the hints kept for a node no longer in [kv] nodes");
            }
        }
        let mut ledgers = Vec::with_capacity(nodes.len());
        let mut count_due = Vec::with_capacity(nodes.len());
        for i in 0..nodes.len() {
            let on_disk = census.as_ref().ok().map(|c| c.totals[i]);
            // Counted as none until the replay task counts again (removals
            // saturate at zero meanwhile).
            count_due.push(Mutex::new(on_disk.is_none().then(Instant::now)));
            ledgers.push(Arc::new(HintLedger::new(
                on_disk.unwrap_or_default(),
                metrics.hints_pending.clone(),
                metrics.hints_pending_bytes.clone(),
            )));
        }
        Hints {
            engine,
            warnings: nodes.iter().map(|_| Warnings::new()).collect(),
            gates: nodes
                .iter()
                .map(|_| KeepGate::new(MAX_KEEPS_IN_FLIGHT, MAX_KEEP_BYTES_IN_FLIGHT))
                .collect(),
            nodes,
            bounds,
            ledgers,
            count_due,
            lost: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Keeps `record` for node `node` ([`Hints::keep`]) on the blocking
    /// pool, once the node's hints before it are written; drops it and
    /// counts it when it alone is past the node's byte bound, or when the
    /// hints in flight for the node are at their bounds already (see
    /// [`crate::hint_gate`]).
    pub async fn keep_soon(self: &Arc<Self>, node: usize, key: Bytes, record: Record) {
        let bytes = hint_bytes(key.len(), record.encoded_len());
        if bytes > self.bounds.bytes {
            // It can never be kept (bar replacing a larger hint kept under
            // a bound lowered since: not worth holding a record that large
            // in memory behind the queue for).
            self.metrics.hints_dropped.inc();
            if let Some(unlogged) = due(&self.warnings[node].dropped) {
                tracing::warn!(
                    node = %self.nodes[node],
                    bound = Exceeded::Bytes.as_str(),
                    hint_bytes = bytes,
                    max_bytes = self.bounds.bytes,
                    dropped_unlogged = unlogged,
                    "kv: hint dropped, it alone is past the node's hint bound \
                     (one warning per {} s; tidegate_kv_hints_dropped_total counts them all)",
                    WARNING_EVERY.as_secs()
                );
            }
            return;
        }
        let gate = &self.gates[node];
        let ticket = match gate.try_enter(bytes) {
            Ok(ticket) => ticket,
            Err(full) => {
                self.metrics.hints_dropped.inc();
                if let Some(unlogged) = due(&self.warnings[node].busy) {
                    tracing::warn!(
                        node = %self.nodes[node],
                        bound = full.as_str(),
                        hint_bytes = bytes,
                        in_flight = gate.in_flight(),
                        in_flight_bytes = gate.in_flight_bytes(),
                        max_in_flight = MAX_KEEPS_IN_FLIGHT,
                        max_in_flight_bytes = gate.max_bytes(),
                        dropped_unlogged = unlogged,
                        "kv: hint dropped, too many of this node's hints (or bytes of them) \
                         are waiting for the disk \
                         (one warning per {} s; tidegate_kv_hints_dropped_total counts them all)",
                        WARNING_EVERY.as_secs()
                    );
                }
                return;
            }
        };
        let turn = ticket.turn().await;
        let hints = self.clone();
        // Held until written, even if this future is dropped meanwhile: the
        // blocking task runs on, and the next hint waits for it.
        let _ = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            hints.keep(node, &key, &record);
        })
        .await;
    }

    /// Keeps `record` for node `node`, unless it would take the node past
    /// its bounds (blocking: call off the runtime).
    pub fn keep(&self, node: usize, key: &[u8], record: &Record) {
        // No lock on the node's totals across the disk: the change reserves
        // its room under the key's lock, between reading the hint it
        // replaces and writing (so a hint checked meanwhile, for this key
        // or another, counts this one), and settles after the write, still
        // under the key's lock (so a change of the key after it, which sees
        // this hint on disk, finds it settled: settled later, a removal or
        // replacement of it would take its bytes from totals that did not
        // hold them yet). Held shared, so that a recount of the node waits
        // for this change.
        let ledger = self.ledgers[node].change();
        let mut over_bound = None;
        let admit = |change| {
            ledger
                .reserve(&self.bounds, change)
                .map_err(|why| over_bound = Some(why))
                .ok()
        };
        let put = self
            .engine
            .put_hint(&self.nodes[node], key, record, admit, Reservation::settle);
        match put {
            Ok(HintPut::Stored(_)) => {
                self.metrics.hints_stored.inc();
            }
            Ok(HintPut::NotNewer) => {
                // A hint at least as new is kept for the key: delivering
                // it covers this write.
                self.metrics.hints_stored.inc();
            }
            Ok(HintPut::NotAdmitted(change)) => {
                self.metrics.hints_dropped.inc();
                if let Some(unlogged) = due(&self.warnings[node].dropped) {
                    let (bound, totals) = over_bound.map_or(("", HintTotals::default()), |r| {
                        (r.bound.as_str(), r.totals)
                    });
                    tracing::warn!(
                        node = %self.nodes[node],
                        bound,
                        hint_bytes = change.bytes,
                        pending_keys = totals.keys,
                        pending_bytes = totals.bytes,
                        dropped_unlogged = unlogged,
                        "kv: hint dropped, it would take the node past its hint bound \
                         (one warning per {} s; tidegate_kv_hints_dropped_total counts them all)",
                        WARNING_EVERY.as_secs()
                    );
                }
            }
            // The reservation, dropped unsettled by put_hint, gave its room
            // back.
            Err(e) => tracing::error!(error = %e, "kv: storing a hint failed"),
        }
    }

    /// One round for `node`: offers its hints until it is away or unwell
    /// or none is left; hints it refuses are dropped on the way, hints
    /// that alone get no answer are set aside (see the module's notes).
    async fn replay(&self, node: usize, client: &ReplicaClient, timeout: Duration) {
        let url = &self.nodes[node];
        self.count_if_due(node).await;
        // Keys set aside this round, and the latest of them in a row.
        let mut aside: HashSet<Bytes> = HashSet::new();
        let mut run: Vec<Aside> = Vec::new();
        while self.ledgers[node].keys() > 0 {
            let engine = self.engine.clone();
            let owned = url.clone();
            // Enough to hold every hint set aside and a batch of new ones.
            let limit = REPLAY_BATCH + aside.len();
            let read = tokio::task::spawn_blocking(move || engine.hints_for(&owned, limit)).await;
            let read = read.map_err(|e| e.to_string());
            let batch = match read.and_then(|r| r.map_err(|e| e.to_string())) {
                Ok(batch) => batch,
                Err(error) => {
                    // The storage failing: nothing says the totals are
                    // wrong, so no count (a scan of every hint, holding
                    // back the node's new ones); the next round tries again.
                    if let Some(unlogged) = due(&self.warnings[node].storage) {
                        tracing::error!(node = %url, %error, failed_unlogged = unlogged, "kv: reading the hints failed, replay paused for the round");
                    }
                    return;
                }
            };
            if batch.is_empty() {
                // Hints counted but none on disk: the totals are wrong;
                // count again (once: they are right after it).
                self.recount(node).await;
                return;
            }
            // Hints that can never be delivered, deleted: they must not
            // come first in every batch and hold back those after them.
            let mut moved = self.forget_unreadable(node, batch.unreadable).await;
            let fresh: Vec<_> = batch
                .hints
                .into_iter()
                .filter(|(key, _)| !aside.contains(key))
                .collect();
            if fresh.is_empty() {
                if moved {
                    continue; // more may follow the ones deleted
                }
                // Every hint left was set aside: nothing came after the
                // last of them to tell the replica's fault from theirs.
                self.count_lost(node, &mut run).await;
                return;
            }
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
        let ledger = self.ledgers[node].clone();
        let lost_key = (node, key.clone());
        let removed = tokio::task::spawn_blocking(move || {
            // Subtracted once removed: until then the totals still count
            // it (never less than the disk holds).
            let change = ledger.change();
            let removed = engine.remove_hint(&url, &key, &record)?;
            if let Some(bytes) = removed {
                change.removed(bytes);
            }
            Ok::<_, KvError>(removed.is_some())
        })
        .await;
        let removed = matches!(removed, Ok(Ok(true)));
        if removed {
            self.lost.lock().remove(&lost_key);
        }
        removed
    }

    /// Deletes the hints of `keys` for `node` that still cannot be
    /// decoded, counting them as refused; whether any was.
    async fn forget_unreadable(&self, node: usize, keys: Vec<Bytes>) -> bool {
        if keys.is_empty() {
            return false;
        }
        let engine = self.engine.clone();
        let url = self.nodes[node].clone();
        let ledger = self.ledgers[node].clone();
        let forgotten = tokio::task::spawn_blocking(move || {
            let mut forgotten = Vec::new();
            for key in keys {
                let change = ledger.change();
                match engine.remove_unreadable_hint(&url, &key) {
                    Ok(Some(bytes)) => {
                        change.removed(bytes);
                        forgotten.push(key);
                    }
                    Ok(None) => {} // replaced by a newer hint meanwhile
                    Err(e) => return (forgotten, Some(e.to_string())),
                }
            }
            (forgotten, None)
        })
        .await;
        let (forgotten, error) = match forgotten {
            Ok(done) => done,
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        if let Some(error) = error {
            if let Some(unlogged) = due(&self.warnings[node].storage) {
                tracing::error!(node = %self.nodes[node], %error, failed_unlogged = unlogged, "kv: deleting a hint that cannot be decoded failed");
            }
        }
        for key in &forgotten {
            self.metrics.hints_refused.inc();
            self.lost.lock().remove(&(node, key.clone()));
            if let Some(unlogged) = due(&self.warnings[node].unreadable) {
                tracing::error!(
                    node = %self.nodes[node],
                    key = %String::from_utf8_lossy(key),
                    deleted_unlogged = unlogged,
                    "kv: hint cannot be decoded (damaged on disk), deleted (the key is left to anti-entropy and read repair)"
                );
            }
        }
        !forgotten.is_empty()
    }

    /// Counts `node`'s hints on disk again and takes that as its totals
    /// (waiting for the node's hint changes in flight, and holding back
    /// new ones meanwhile).
    async fn count_on_disk(&self, node: usize) -> Result<HintTotals, String> {
        let engine = self.engine.clone();
        let url = self.nodes[node].clone();
        let ledger = self.ledgers[node].clone();
        let counted = tokio::task::spawn_blocking(move || {
            // Exclusive: a change in flight would be counted or not
            // depending on when the scan passed it.
            let recount = ledger.recount();
            let on_disk = engine.hint_totals(&url)?;
            recount.recounted(on_disk);
            Ok::<_, KvError>(on_disk)
        })
        .await;
        match counted {
            Ok(Ok(on_disk)) => Ok(on_disk),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("panicked: {e}")),
        }
    }

    /// Counts the hints of `node` whose totals were found wrong.
    async fn recount(&self, node: usize) {
        match self.count_on_disk(node).await {
            Ok(on_disk) => tracing::warn!(
                node = %self.nodes[node],
                keys = on_disk.keys,
                bytes = on_disk.bytes,
                "kv: hint totals did not match the disk, counted again"
            ),
            Err(error) => {
                if let Some(unlogged) = due(&self.warnings[node].storage) {
                    tracing::error!(node = %self.nodes[node], %error, failed_unlogged = unlogged, "kv: counting the hints on disk failed");
                }
            }
        }
    }

    /// Counts the hints of `node` if the count at start-up failed and a
    /// try is due: until it succeeds the totals miss the hints on disk,
    /// and a node whose totals say none is not offered any.
    async fn count_if_due(&self, node: usize) {
        match *self.count_due[node].lock() {
            Some(at) if at <= Instant::now() => {}
            _ => return,
        }
        let next = match self.count_on_disk(node).await {
            Ok(on_disk) => {
                tracing::info!(
                    node = %self.nodes[node],
                    keys = on_disk.keys,
                    bytes = on_disk.bytes,
                    "kv: hints on disk counted (the count at start-up had failed)"
                );
                None
            }
            Err(error) => {
                tracing::error!(
                    node = %self.nodes[node],
                    %error,
                    "kv: counting the hints on disk failed again, next try in {} s",
                    COUNT_RETRY_INTERVAL.as_secs()
                );
                Some(Instant::now() + COUNT_RETRY_INTERVAL)
            }
        };
        *self.count_due[node].lock() = next;
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

    /// The bounds of a running node.
    const DEFAULT_BOUNDS: HintBounds = HintBounds {
        keys: MAX_HINTS_PER_NODE,
        bytes: crate::config::DEFAULT_MAX_HINT_BYTES_PER_NODE,
    };

    /// Hint bookkeeping of this node (index 0) for `peer` (index 1), on
    /// the engine in `dir`.
    fn hints_in(dir: &std::path::Path, peer: &str, bounds: HintBounds) -> (Arc<Hints>, KvMetrics) {
        let engine = Arc::new(Engine::open(dir, SyncPolicy::None).unwrap());
        let metrics = KvMetrics::default();
        let nodes = vec!["http://127.0.0.1:1".to_owned(), peer.to_owned()];
        let hints = Arc::new(Hints::new(engine, nodes, bounds, metrics.clone()));
        (hints, metrics)
    }

    /// Hints kept on this node (index 0) for `peer` (index 1), one per key.
    fn hints_for(peer: &str, keys: &[&str]) -> (Arc<Hints>, KvMetrics, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let (hints, metrics) = hints_in(dir.path(), peer, DEFAULT_BOUNDS);
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
        assert_eq!(
            metrics.hints_pending_bytes.get(),
            0,
            "refused ones freed too"
        );
        assert_eq!(hints.ledgers[1].keys(), 0);
        assert_eq!(hints.engine.hint_totals(&peer).unwrap().keys, 0);
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
        assert_eq!(hints.engine.hint_totals(&peer).unwrap().keys, 0);
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
            assert_eq!(hints.engine.hint_totals(&peer).unwrap().keys, 7, "case {i}");
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
        assert_eq!(hints.engine.hint_totals(&peer).unwrap().keys, 7);
        assert!(hints.lost.lock().is_empty());
    }
    /// What a hint of `key` with a `value_len`-byte value (no expiry)
    /// counts for.
    /// The hints on disk for node 1 (`peer`), once the ledger's totals and
    /// the pending gauges are checked to say the same.
    fn totals_match_the_disk(hints: &Hints, metrics: &KvMetrics, peer: &str) -> HintTotals {
        let on_disk = hints.engine.hint_totals(peer).unwrap();
        assert_eq!(
            hints.ledgers[1].totals(),
            on_disk,
            "the totals are the disk's"
        );
        assert_eq!(metrics.hints_pending.get(), on_disk.keys as i64);
        assert_eq!(metrics.hints_pending_bytes.get(), on_disk.bytes as i64);
        on_disk
    }

    fn size(key: &str, value_len: usize) -> u64 {
        crate::engine::hint_bytes(key.len(), crate::record::HEADER_BYTES + value_len)
    }

    fn value(stamp: u64, len: usize) -> Record {
        Record::value(stamp, Bytes::from(vec![b'v'; len]))
    }

    /// A key of `prefix` followed by a number whose hint for `peer` shares
    /// a lock with none of `others`'.
    fn key_apart(hints: &Hints, peer: &str, prefix: &str, others: &[&[u8]]) -> Vec<u8> {
        (0..)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .find(|k| {
                others
                    .iter()
                    .all(|o| !hints.engine.hints_share_a_lock(peer, k, o))
            })
            .unwrap()
    }

    /// Waits until `done` holds, for at most 10 s (a deadline only a
    /// broken test reaches: it then fails, naming `what`).
    async fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "still not {what} after 10 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hint_write_held_up_leaves_the_ledger_to_other_keys_and_deliveries_and_a_count_waits()
    {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let (hints, metrics) = hints_in(dir.path(), peer, DEFAULT_BOUNDS);
        hints.keep(1, b"kept", &value(1, 10));
        let stuck = key_apart(&hints, peer, "stuck", &[b"kept"]);
        let free = key_apart(&hints, peer, "free", &[b"kept", &stuck]);
        let free_len = free.len();

        // One hint's write held up, as by a storage write stall: its key's
        // lock held on a thread of its own until `release` is dropped.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (held_tx, held) = std::sync::mpsc::channel();
        let staller = {
            let (hints, stuck) = (hints.clone(), stuck.clone());
            std::thread::spawn(move || {
                let _held = hints.engine.hold_hint(peer, &stuck);
                held_tx.send(()).unwrap();
                let _ = released.recv();
            })
        };
        held.recv().unwrap();
        let writer = {
            let (hints, stuck) = (hints.clone(), stuck.clone());
            std::thread::spawn(move || hints.keep(1, &stuck, &value(2, 10)))
        };
        // The writer has its leave to change the node's hints (and holds it
        // until its write is done): it is in flight, on its way to the held
        // key's lock or waiting there.
        wait_until("in flight", || hints.ledgers[1].change_in_flight()).await;

        // Another key's hint is written and another hint delivered
        // meanwhile: neither waits for the node's ledger (when it was
        // locked across the disk, they waited for the held-up write).
        // `keep` is called here, not `keep_soon`: through `keep_soon` the
        // other key's hint would still wait for the held-up write's turn
        // (the node's hints are written one at a time, `crate::hint_gate`).
        let others = async {
            let h = hints.clone();
            tokio::task::spawn_blocking(move || h.keep(1, &free, &value(3, 10)))
                .await
                .unwrap();
            hints
                .remove(1, Bytes::from_static(b"kept"), value(1, 10))
                .await
        };
        let removed = tokio::time::timeout(Duration::from_secs(10), others)
            .await
            .expect("another key's hint or a delivery waited for the write held up");
        assert!(removed);
        assert!(
            !writer.is_finished(),
            "the held-up write is still in flight"
        );
        assert_eq!(metrics.hints_pending.get(), 1);
        let free_bytes = hint_bytes(free_len, value(3, 10).encoded_len());
        assert_eq!(metrics.hints_pending_bytes.get(), free_bytes as i64);

        // A count of the disk waits for the write in flight, and counts it.
        let count = {
            let hints = hints.clone();
            tokio::spawn(async move { hints.count_on_disk(1).await })
        };
        let ledger = &hints.ledgers[1];
        wait_until("claimed by the count", || {
            ledger.recount_claimed() || count.is_finished()
        })
        .await;
        assert!(!count.is_finished(), "the count waits for the write");
        // Claimed while the writer holds its share: the count is waiting
        // for it (it cannot hold the claim yet).
        assert!(ledger.recount_claimed() && !writer.is_finished());
        drop(release);
        staller.join().unwrap();
        writer.join().unwrap();
        let counted = count.await.unwrap().unwrap();
        let on_disk = totals_match_the_disk(&hints, &metrics, peer);
        assert_eq!((counted, on_disk.keys), (on_disk, 2));
    }

    /// Keeps `record` for `key` of node 1 on a thread of its own, and
    /// returns once it is written but not yet settled, with the thread and
    /// a sender that lets it settle (by being dropped, or sent to).
    fn keep_held_before_settling(
        hints: &Arc<Hints>,
        key: &'static [u8],
        record: Record,
    ) -> (std::thread::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
        let (paused_tx, paused) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        hints.ledgers[1].pause_next_settle(move || {
            paused_tx.send(()).unwrap();
            let _ = go_rx.recv();
        });
        let keeper = {
            let hints = hints.clone();
            std::thread::spawn(move || hints.keep(1, key, &record))
        };
        paused.recv().unwrap();
        (keeper, go)
    }

    /// Gives another change of the key of a hint held before settling up
    /// to 1 s to finish (`finished` says whether it has). Where the hint
    /// is settled under its key's lock, the change waits for that lock and
    /// never finishes here (the time runs out, which is right: the wait
    /// can make the test pass wrongly only on a machine too slow to finish
    /// it in 1 s, never fail wrongly); where the hint is settled after,
    /// the change comes between its write and its settle, as the test
    /// means it to.
    async fn let_it_come_between(finished: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while !finished() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hint_is_settled_before_a_newer_hint_for_its_key_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let (hints, metrics) = hints_in(dir.path(), peer, DEFAULT_BOUNDS);
        // A new key's hint of 1,000 bytes, written, not yet settled; then
        // a newer, smaller one for the same key. Settled after the key's
        // lock, the large one was replaced first: the replacement took its
        // bytes from totals that did not hold them yet (saturating at 0),
        // and the late settle added them for good — totals of 1 key and
        // both hints' bytes, for a disk holding the small one.
        let (keeper, go) = keep_held_before_settling(&hints, b"k", value(1, 1000));
        let replacer = {
            let hints = hints.clone();
            std::thread::spawn(move || hints.keep(1, b"k", &value(2, 10)))
        };
        let_it_come_between(|| replacer.is_finished()).await;
        drop(go);
        keeper.join().unwrap();
        replacer.join().unwrap();

        let on_disk = totals_match_the_disk(&hints, &metrics, peer);
        assert_eq!(
            on_disk,
            HintTotals {
                keys: 1,
                bytes: size("k", 10)
            }
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hint_is_settled_before_its_delivery_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let (hints, metrics) = hints_in(dir.path(), peer, DEFAULT_BOUNDS);
        hints.keep(1, b"other", &value(1, 50));
        // A new key's hint of 1,000 bytes, written, not yet settled; then
        // delivered and removed. Settled after the key's lock, the removal
        // came first: it took 1,000 bytes from totals of 1 key and 50
        // bytes (saturating at 0 keys and 0 bytes), and the late settle
        // added the removed hint — totals of 1 key and 1,000 bytes, for a
        // disk holding the other key's 50.
        let (keeper, go) = keep_held_before_settling(&hints, b"k", value(2, 1000));
        let remover = {
            let hints = hints.clone();
            tokio::spawn(async move {
                hints
                    .remove(1, Bytes::from_static(b"k"), value(2, 1000))
                    .await
            })
        };
        let_it_come_between(|| remover.is_finished()).await;
        drop(go);
        keeper.join().unwrap();
        assert!(remover.await.unwrap(), "delivered, removed");

        let on_disk = totals_match_the_disk(&hints, &metrics, peer);
        assert_eq!(
            on_disk,
            HintTotals {
                keys: 1,
                bytes: size("other", 50)
            }
        );
    }

    #[test]
    fn concurrent_hints_for_one_node_never_take_it_past_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        // Tight enough that many hints are dropped at each bound.
        let bounds = HintBounds {
            keys: 12,
            bytes: 12 * size("k00", 150),
        };
        let (hints, metrics) = hints_in(dir.path(), peer, bounds);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Reads the disk as it is at one instant, again and again, while
        // the writers race: no instant may hold more than the bounds.
        let watcher = {
            let (hints, done) = (hints.clone(), done.clone());
            std::thread::spawn(move || {
                let mut looks = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || looks == 0 {
                    let on_disk = hints.engine.hint_totals(peer).unwrap();
                    assert!(on_disk.keys <= bounds.keys, "{on_disk:?}");
                    assert!(on_disk.bytes <= bounds.bytes, "{on_disk:?}");
                    looks += 1;
                }
            })
        };
        // Writers sharing 30 keys: new keys, and newer hints for the same
        // keys growing and shrinking them, on different threads at once.
        let writers: Vec<_> = (0..8u64)
            .map(|t| {
                let hints = hints.clone();
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        let key = format!("k{:02}", (t * 7 + i * 3) % 30);
                        let len = ((t * 131 + i * 37) % 300) as usize;
                        hints.keep(1, key.as_bytes(), &value(i * 8 + t + 1, len));
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        watcher.join().unwrap();

        assert!(metrics.hints_dropped.get() > 0, "the bounds were reached");
        let on_disk = totals_match_the_disk(&hints, &metrics, peer);
        // Nothing left reserved: the bounds admit exactly what the disk
        // leaves room for.
        let room = bounds.bytes - on_disk.bytes;
        let change = ledger_change(on_disk.keys < bounds.keys, room);
        let guard = hints.ledgers[1].change();
        assert!(guard.reserve(&bounds, change).is_ok());
    }

    /// A change of `bytes`, of a new key when `new`, else of a key whose
    /// hint is empty.
    fn ledger_change(new: bool, bytes: u64) -> crate::engine::HintChange {
        crate::engine::HintChange {
            bytes,
            replaced: (!new).then_some(0),
        }
    }

    #[tokio::test]
    async fn a_newer_hint_for_the_same_key_replaces_its_bytes_and_takes_no_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = HintBounds {
            keys: 1,
            bytes: size("k", 100),
        };
        let (hints, metrics) = hints_in(dir.path(), "http://127.0.0.1:2", bounds);
        let totals = || hints.ledgers[1].totals();

        hints.keep(1, b"k", &value(10, 100));
        assert_eq!((totals().keys, totals().bytes), (1, size("k", 100)));
        // A newer, smaller hint for the same key replaces the first: its
        // bytes, not both, and it needs no new key under a 1-key bound.
        hints.keep(1, b"k", &value(20, 10));
        assert_eq!((totals().keys, totals().bytes), (1, size("k", 10)));
        // An older one changes nothing (the newer is kept).
        hints.keep(1, b"k", &value(15, 50));
        assert_eq!((totals().keys, totals().bytes), (1, size("k", 10)));
        // A newer one that grows past the byte bound is dropped; the one
        // kept stays, counted as before.
        hints.keep(1, b"k", &value(30, 101));
        assert_eq!((totals().keys, totals().bytes), (1, size("k", 10)));
        // Another key is past the key bound.
        hints.keep(1, b"j", &value(40, 1));
        assert_eq!(metrics.hints_dropped.get(), 2);
        assert_eq!(metrics.hints_stored.get(), 3);
        assert_eq!(metrics.hints_pending.get(), 1);
        assert_eq!(metrics.hints_pending_bytes.get(), size("k", 10) as i64);
        let on_disk = hints.engine.hint_totals("http://127.0.0.1:2").unwrap();
        assert_eq!(on_disk, totals(), "the totals are the disk's");
        assert_eq!(
            hints
                .engine
                .hints_for("http://127.0.0.1:2", 10)
                .unwrap()
                .hints,
            [(Bytes::from_static(b"k"), value(20, 10))]
        );
    }

    #[tokio::test]
    async fn the_byte_bound_stops_large_hints_keeps_small_ones_and_delivery_frees_it() {
        let (peer, offered, served) = fake_peer(|_| Answer::Reply(1)).await;
        let dir = tempfile::tempdir().unwrap();
        let bounds = HintBounds {
            keys: MAX_HINTS_PER_NODE,
            bytes: 10_000,
        };
        let (hints, metrics) = hints_in(dir.path(), &peer, bounds);
        // Three values of 4,000 bytes: the third would pass 10,000.
        for (i, k) in ["big1", "big2", "big3"].iter().enumerate() {
            hints.keep(1, k.as_bytes(), &value(i as u64 + 1, 4000));
        }
        assert_eq!(metrics.hints_dropped.get(), 1);
        let big = 2 * size("big1", 4000);
        assert_eq!(metrics.hints_pending_bytes.get(), big as i64);
        // Small ones still fit under it, up to the bound exactly.
        let fit = (10_000 - big) / size("s00", 10);
        for i in 0..fit + 1 {
            hints.keep(1, format!("s{i:02}").as_bytes(), &value(10 + i, 10));
        }
        assert_eq!(
            metrics.hints_dropped.get(),
            2,
            "only the one past the bound"
        );
        assert_eq!(metrics.hints_pending.get(), 2 + fit as i64);
        let full = big + fit * size("s00", 10);
        assert_eq!(metrics.hints_pending_bytes.get(), full as i64);

        // Delivered, they free the bound: the large value fits again.
        hints.replay(1, &client(), TIMEOUT).await;
        assert_eq!(offered.lock().len(), 2 + fit as usize);
        assert_eq!(metrics.hints_pending.get(), 0);
        assert_eq!(metrics.hints_pending_bytes.get(), 0);
        hints.keep(1, b"big3", &value(100, 4000));
        assert_eq!(metrics.hints_dropped.get(), 2);
        assert_eq!(metrics.hints_pending_bytes.get(), size("big3", 4000) as i64);
        served.abort();
    }

    #[tokio::test]
    async fn a_hint_damaged_on_disk_is_deleted_and_the_ones_after_it_are_still_delivered() {
        let (peer, offered, served) = fake_peer(|_| Answer::Reply(1)).await;
        let (hints, metrics, _dir) = hints_for(&peer, &KEYS);
        // a0 comes first in key order; kept and counted, then damaged (same
        // length, so the totals still match the disk).
        hints.keep(1, b"a0", &value(100, 20));
        let len = value(100, 20).encoded_len();
        let damaged = vec![9u8; len]; // an unknown record version
        hints.engine.put_raw_hint(&peer, b"a0", &damaged).unwrap();
        assert_eq!(
            hints.engine.hint_totals(&peer).unwrap(),
            hints.ledgers[1].totals()
        );

        hints.replay(1, &client(), TIMEOUT).await;

        assert_eq!(*offered.lock(), KEYS, "the damaged one held nothing back");
        assert_eq!(metrics.hints_delivered.get(), KEYS.len() as u64);
        assert_eq!(metrics.hints_refused.get(), 1, "a0 deleted, counted");
        assert_eq!(metrics.hints_pending.get(), 0);
        assert_eq!(metrics.hints_pending_bytes.get(), 0);
        assert_eq!(hints.engine.hint_totals(&peer).unwrap().keys, 0);
        served.abort();
    }

    #[tokio::test]
    async fn hints_on_disk_are_counted_by_the_replay_when_the_count_at_start_up_failed() {
        let (peer, offered, served) = fake_peer(|_| Answer::Reply(1)).await;
        let dir = tempfile::tempdir().unwrap();
        let (hints, metrics) = hints_in(dir.path(), &peer, DEFAULT_BOUNDS);
        // What a failed count at start-up leaves: hints on disk the totals
        // miss (written here past the ledger), and a count due.
        for (i, k) in KEYS.iter().enumerate() {
            let put =
                hints
                    .engine
                    .put_hint(&peer, k.as_bytes(), &value(i as u64 + 1, 10), Some, drop);
            assert!(matches!(put, Ok(HintPut::Stored(_))));
        }
        *hints.count_due[1].lock() = Some(Instant::now());
        assert_eq!(metrics.hints_pending.get(), 0);

        hints.replay(1, &client(), TIMEOUT).await;

        assert_eq!(*offered.lock(), KEYS, "counted, then offered");
        assert_eq!(metrics.hints_delivered.get(), KEYS.len() as u64);
        assert_eq!(metrics.hints_pending.get(), 0);
        assert_eq!(metrics.hints_pending_bytes.get(), 0);
        assert!(hints.count_due[1].lock().is_none(), "counted once");
        assert_eq!(hints.engine.hint_totals(&peer).unwrap().keys, 0);
        served.abort();
    }

    #[tokio::test]
    async fn a_hint_past_the_hints_in_flight_is_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let (hints, metrics) = hints_in(dir.path(), peer, DEFAULT_BOUNDS);
        // Every place taken, as by hints waiting behind a stalled disk.
        let taken: Vec<_> = (0..MAX_KEEPS_IN_FLIGHT)
            .map(|_| hints.gates[1].try_enter(1).unwrap())
            .collect();
        hints
            .keep_soon(1, Bytes::from_static(b"k"), value(1, 10))
            .await;
        assert_eq!(metrics.hints_dropped.get(), 1);
        assert_eq!(metrics.hints_stored.get(), 0);
        assert!(hints.engine.hints_for(peer, 10).unwrap().is_empty());

        drop(taken);
        hints
            .keep_soon(1, Bytes::from_static(b"k"), value(1, 10))
            .await;
        assert_eq!(metrics.hints_stored.get(), 1);
        assert_eq!(metrics.hints_pending.get(), 1);
        assert_eq!(hints.gates[1].in_flight(), 0);
    }

    #[tokio::test]
    async fn a_hint_past_the_bytes_in_flight_is_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let bounds = HintBounds {
            keys: MAX_HINTS_PER_NODE,
            bytes: 10_000,
        };
        let (hints, metrics) = hints_in(dir.path(), peer, bounds);
        let gate = &hints.gates[1];
        assert_eq!(gate.max_bytes(), MAX_KEEP_BYTES_IN_FLIGHT);
        // Bytes waiting, as behind a stalled disk: a hint that fits the
        // node's bound but not beside them is dropped.
        let waiting = gate.try_enter(MAX_KEEP_BYTES_IN_FLIGHT - 1000).unwrap();
        hints
            .keep_soon(1, Bytes::from_static(b"k"), value(1, 4000))
            .await;
        assert_eq!(metrics.hints_dropped.get(), 1);
        assert_eq!(metrics.hints_stored.get(), 0);
        assert_eq!(
            gate.in_flight_bytes(),
            MAX_KEEP_BYTES_IN_FLIGHT - 1000,
            "it left nothing reserved"
        );

        drop(waiting);
        hints
            .keep_soon(1, Bytes::from_static(b"k"), value(1, 4000))
            .await;
        assert_eq!(metrics.hints_stored.get(), 1);
        assert_eq!((gate.in_flight(), gate.in_flight_bytes()), (0, 0));
    }

    #[tokio::test]
    async fn a_hint_past_the_byte_bound_is_dropped_without_waiting_for_a_turn() {
        use futures::FutureExt;
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let bounds = HintBounds {
            keys: MAX_HINTS_PER_NODE,
            bytes: 10_000,
        };
        let (hints, metrics) = hints_in(dir.path(), peer, bounds);
        // The node's turn held, as by a hint being written to a stalled
        // disk: any hint let in would wait (holding its record).
        let writing = hints.gates[1].try_enter(1).unwrap().turn().await;

        let large = hints.keep_soon(1, Bytes::from_static(b"k"), value(1, 10_000));
        assert!(
            large.now_or_never().is_some(),
            "dropped at once, not queued behind the turn"
        );
        assert_eq!(metrics.hints_dropped.get(), 1);
        assert_eq!(hints.gates[1].in_flight(), 1, "only the one writing");
        assert_eq!(hints.gates[1].in_flight_bytes(), 1);

        // One within the bound waits for the turn as before.
        let mut small = Box::pin(hints.keep_soon(1, Bytes::from_static(b"s"), value(2, 10)));
        assert!(small.as_mut().now_or_never().is_none(), "it waits its turn");
        drop(writing);
        small.await;
        assert_eq!(metrics.hints_stored.get(), 1);
        assert_eq!(metrics.hints_dropped.get(), 1);
        assert_eq!(hints.engine.hints_for(peer, 10).unwrap().hints.len(), 1);
    }

    #[tokio::test]
    async fn the_hints_of_a_node_no_longer_in_the_cluster_are_dropped_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let open = |nodes: &[&str]| {
            let engine = Arc::new(Engine::open(dir.path(), SyncPolicy::None).unwrap());
            let metrics = KvMetrics::default();
            let nodes = nodes.iter().map(|n| n.to_string()).collect();
            let hints = Hints::new(engine, nodes, DEFAULT_BOUNDS, metrics.clone());
            (hints, metrics)
        };
        let (me, stays, goes) = (
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            "http://127.0.0.1:3",
        );
        {
            let (hints, _) = open(&[me, stays, goes]);
            hints.keep(1, b"k1", &value(1, 10));
            hints.keep(2, b"k2", &value(2, 10));
            hints.keep(2, b"k3", &value(3, 10));
            hints.engine.persist().unwrap();
        } // closed, as at a restart
          // The cluster no longer lists `goes`.
        let (hints, metrics) = open(&[me, stays]);
        assert_eq!(metrics.hints_pending.get(), 1);
        assert!(hints.engine.hints_for(goes, 10).unwrap().is_empty());
        assert_eq!(hints.engine.hints_for(stays, 10).unwrap().hints.len(), 1);
    }

    #[tokio::test]
    async fn hints_on_disk_are_counted_when_the_node_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let peer = "http://127.0.0.1:2";
        let bounds = HintBounds {
            keys: MAX_HINTS_PER_NODE,
            bytes: 10_000,
        };
        {
            let (hints, _) = hints_in(dir.path(), peer, bounds);
            hints.keep(1, b"big1", &value(1, 4000));
            hints.keep(1, b"big2", &value(2, 4000));
            hints.engine.persist().unwrap();
        } // the engine is closed here, as at a restart

        let (hints, metrics) = hints_in(dir.path(), peer, bounds);
        assert_eq!(metrics.hints_pending.get(), 2);
        let big = 2 * size("big1", 4000);
        assert_eq!(metrics.hints_pending_bytes.get(), big as i64);
        // The count holds: what the first run kept leaves no room for a
        // third large hint, and room for a small one.
        hints.keep(1, b"big3", &value(3, 4000));
        assert_eq!(metrics.hints_dropped.get(), 1);
        hints.keep(1, b"s", &value(4, 10));
        assert_eq!(metrics.hints_dropped.get(), 1);
        assert_eq!(
            metrics.hints_pending_bytes.get(),
            (big + size("s", 10)) as i64
        );
    }
}
