//! The coordinator: a client request to any node is served by fanning out
//! to the key's `from` replicas (rendezvous order) concurrently and
//! answering once `ack` of them succeeded, or 504 when that cannot happen
//! within `[kv] replica_timeout_ms`. This node takes part only when it is
//! one of the replicas: a non-owner never answers from its own data.
//!
//! Writes are stamped here (a per-process strictly increasing clock in
//! ns), so every replica stores the same record and resolves
//! last-write-wins the same way. Replica writes that are still running when
//! the quorum is reached keep running to completion in the background.
//!
//! Hinted handoff ([`crate::hints`]): a replica write that fails or times
//! out is kept on this node's disk and delivered when the replica is back.
//!
//! Read repair: after a read, every replica seen with an older version (or
//! none, when it is one of the replicas the newest version was written to)
//! is sent the newest one in the background — also those that answer after
//! the client got its response, within the replica timeout.
//!
//! Anti-entropy ([`crate::anti_entropy`]) runs beside, started here when
//! the cluster has more than one node and `[kv] anti_entropy_interval_ms`
//! is not 0.
//!
//! A write carries its `from` (so anti-entropy knows where the key
//! belongs) and, with a TTL, its expiry; a value past its expiry reads as
//! absent.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tidegate_hub::Hub;
use tokio_util::task::TaskTracker;

use crate::anti_entropy::AntiEntropy;
use crate::batch::{BatchOp, BatchReply};
use crate::client::ReplicaClient;
use crate::config::KvConfig;
use crate::engine::{now_ns, Engine, EngineSizes, BASE_MEMTABLE_BYTES};
use crate::error::KvError;
use crate::hint_bounds::HintBounds;
use crate::hints::{Hints, MAX_HINTS_PER_NODE};
use crate::metrics::KvMetrics;
use crate::record::Record;
use crate::ring::Ring;
use crate::watch;

/// The KV store of this process: the local engine and the way to its peers.
#[derive(Clone)]
pub struct KvStore {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Engine>,
    ring: Ring,
    client: ReplicaClient,
    secret: Option<Bytes>,
    replica_timeout: Duration,
    /// `[kv] tombstone_grace_ms`: a record dead for longer may be purged
    /// on any replica, so a replica without it is not stale.
    tombstone_grace: Duration,
    last_stamp: AtomicU64,
    hub: Option<Hub>,
    hints: Arc<Hints>,
    anti_entropy: Arc<AntiEntropy>,
    metrics: KvMetrics,
    /// Replica writes and read repairs that outlive their client request;
    /// awaited at shutdown ([`KvStore::shutdown`]).
    background: TaskTracker,
}

impl KvStore {
    /// Validates `config` and opens the engine; `hub` (when given) receives
    /// every accepted write. Must run inside a tokio runtime.
    pub fn open(config: &KvConfig, hub: Option<Hub>) -> Result<Self, KvError> {
        config.validate()?;
        let ring = match &config.self_url {
            Some(me) if !config.nodes.is_empty() => {
                let i = config.nodes.iter().position(|n| n == me).unwrap_or(0);
                Ring::new(config.nodes.clone(), i)
            }
            _ => Ring::new(vec![config.self_url.clone().unwrap_or_default()], 0),
        };
        let sizes = EngineSizes {
            cache_bytes: config.cache_mb * 1024 * 1024,
            memtable_bytes: memtable_bytes(sorted_place(config), ring.len()),
        };
        let engine = Arc::new(
            Engine::open_with(&config.data_dir, config.sync, sizes)?
                .with_inline_writes(config.inline_writes)
                .with_inline_reads(config.inline_reads),
        );
        engine.start_maintenance(Duration::from_millis(config.tombstone_grace_ms));
        let secret = config
            .cluster_secret
            .as_ref()
            .filter(|s| !s.is_empty())
            .map(|s| Bytes::copy_from_slice(s.as_bytes()));
        let replica_timeout = Duration::from_millis(config.replica_timeout_ms);
        let client = ReplicaClient::new(secret.clone().unwrap_or_default())
            .with_batching(config.replica_batching)
            .with_batch_timeout(replica_timeout);
        let nodes = (0..ring.len()).map(|i| ring.url(i).to_owned()).collect();
        let metrics = KvMetrics::default();
        if let Some(hub) = &hub {
            metrics.register(hub.metrics());
            engine.write_groups().register(hub.metrics());
            engine.storage_slot().register(hub.metrics());
            engine.dead_records().register(hub.metrics());
        }
        let hint_bounds = HintBounds {
            keys: MAX_HINTS_PER_NODE,
            bytes: config.max_hint_bytes_per_node,
        };
        let hints = Arc::new(Hints::new(
            engine.clone(),
            nodes,
            hint_bounds,
            metrics.clone(),
        ));
        if ring.len() > 1 {
            Hints::spawn_replay(&hints, client.clone(), ring.self_index(), replica_timeout);
        }
        let ae_interval = Duration::from_millis(config.anti_entropy_interval_ms);
        let anti_entropy = Arc::new(AntiEntropy::new(
            engine.clone(),
            ring.clone(),
            client.clone(),
            metrics.clone(),
            Duration::from_millis(config.tombstone_grace_ms),
            replica_timeout,
            ae_interval,
        ));
        if ring.len() > 1 && !ae_interval.is_zero() {
            AntiEntropy::spawn(&anti_entropy, ae_interval);
        }
        Ok(KvStore {
            inner: Arc::new(Inner {
                engine,
                ring,
                client,
                secret,
                replica_timeout,
                tombstone_grace: Duration::from_millis(config.tombstone_grace_ms),
                last_stamp: AtomicU64::new(0),
                hub,
                hints,
                anti_entropy,
                metrics,
                background: TaskTracker::new(),
            }),
        })
    }

    /// A graceful stop: waits, at most `within`, for the replica writes
    /// and read repairs still running after their client was answered,
    /// then syncs the journal. Each background write ends within the
    /// replica timeout (its copy stored, or a hint kept), so a node stopped
    /// right after answering `201` with `ack` < `from` still delivers its
    /// other copies or leaves hints for them, instead of dropping them with
    /// the runtime; and what this node acknowledged (or hinted) within the
    /// last `interval_ms` is on disk before the process exits. Returns
    /// whether every background write finished.
    pub async fn shutdown(&self, within: Duration) -> bool {
        let tasks = &self.inner.background;
        tasks.close();
        let done = tokio::time::timeout(within, tasks.wait()).await.is_ok();
        if !done {
            tracing::warn!(
                left = tasks.len(),
                "kv: replica writes still running at shutdown were abandoned; anti-entropy repairs their replicas"
            );
        }
        let engine = self.inner.engine.clone();
        match tokio::task::spawn_blocking(move || engine.persist()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "kv: the journal sync at shutdown failed"),
            Err(e) => tracing::error!(error = %e, "kv: the journal sync at shutdown panicked"),
        }
        done
    }

    /// Number of nodes in the cluster.
    pub fn cluster_size(&self) -> usize {
        self.inner.ring.len()
    }

    /// This node's URL as written in `[kv] nodes` (what internal requests
    /// for it are signed for).
    pub fn self_url(&self) -> &str {
        self.inner.ring.url(self.inner.ring.self_index())
    }

    /// The secret internal requests are signed with, if configured.
    pub fn secret(&self) -> Option<&[u8]> {
        self.inner.secret.as_deref()
    }

    /// The store's counters.
    pub fn metrics(&self) -> &KvMetrics {
        &self.inner.metrics
    }

    /// The local engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// This node's side of anti-entropy (the internal tree and entries
    /// requests are served by it).
    pub fn anti_entropy(&self) -> &Arc<AntiEntropy> {
        &self.inner.anti_entropy
    }

    /// A timestamp later than every one this process gave before: the
    /// wall clock in ns, or one more than the last stamp when the clock has
    /// not moved (or went back).
    fn stamp(&self) -> u64 {
        let now = now_ns();
        let last = &self.inner.last_stamp;
        let mut cur = last.load(Ordering::Acquire);
        loop {
            let next = now.max(cur + 1);
            match last.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Reads this node's own version of `key` (internal requests), on the
    /// calling worker: a memtable or block-cache hit, or a read of a file
    /// the page cache holds, costs less than a hand-off to another thread
    /// (docs/kv.md, "Storage calls"). On the blocking pool instead when
    /// another async worker is in a storage call ([`Engine::try_read_here`]).
    pub async fn local_get(&self, key: Bytes) -> Result<Option<Record>, KvError> {
        let engine = self.inner.engine.clone();
        here_or_blocking(self.inner.engine.try_read_here(move || engine.get(&key)))
            .await
            .map_err(|e| KvError::Task(e.to_string()))?
    }

    /// Applies a stamped record locally (internal requests): the journal
    /// write on the calling worker, the fsync of `sync = "always"` shared
    /// with concurrent writes (group commit) and awaited, not blocked on.
    pub async fn local_apply(&self, key: Bytes, record: Record) -> Result<bool, KvError> {
        self.inner.engine.apply_committed(key, record).await
    }

    /// A coordinator's batch ([`crate::batch`]) on this node's own data:
    /// reads and last-write-wins writes in order — each run of writes as
    /// one journal write ([`Engine::apply_many_unsynced`]) — then one commit
    /// for all the writes (one fsync under `sync = "always"`). The batch
    /// runs on the calling worker unless another async worker is in a
    /// storage call ([`Engine::try_write_here`], [`Engine::try_read_here`]
    /// for a batch of reads only); then on the blocking pool.
    pub async fn local_batch(&self, ops: Vec<BatchOp>) -> Vec<BatchReply> {
        let engine = self.inner.engine.clone();
        let writes = ops.iter().any(|op| matches!(op, BatchOp::Put(..)));
        let count = ops.len();
        let e = engine.clone();
        let job = move || apply_batch(&e, ops);
        let here = if writes {
            engine.try_write_here(job)
        } else {
            engine.try_read_here(job)
        };
        let mut replies = match here_or_blocking(here).await {
            Ok(replies) => replies,
            Err(e) => {
                tracing::error!(error = %e, "kv: batch task failed");
                return (0..count).map(|_| BatchReply::Failed).collect();
            }
        };
        if replies.contains(&BatchReply::Applied) {
            if let Err(e) = engine.commit().await {
                tracing::error!(error = %e, "kv: batch commit failed");
                for r in &mut replies {
                    if *r == BatchReply::Applied {
                        *r = BatchReply::Failed;
                    }
                }
            }
        }
        replies
    }

    /// A client GET: the newest version among the first `ack` replicas of
    /// `from` that answer; `None` for absent, deleted or expired. Replicas seen
    /// holding an older version (or none), and those answering after the
    /// quorum, are then brought up to date in the background (read repair).
    pub async fn get(&self, key: Bytes, ack: usize, from: usize) -> Result<Option<Bytes>, KvError> {
        let mut pending: FuturesUnordered<_> = self
            .inner
            .ring
            .replicas(&key, from)
            .into_iter()
            .map(|node| {
                let (store, key) = (self.clone(), key.clone());
                async move { (node, store.read_replica(node, key).await) }
            })
            .collect();
        let mut seen: Vec<(usize, Option<Record>)> = Vec::with_capacity(from);
        let gather = async {
            while let Some((node, answer)) = pending.next().await {
                match answer {
                    Ok(r) => {
                        seen.push((node, r));
                        if seen.len() >= ack {
                            return;
                        }
                    }
                    Err(e) => {
                        self.inner.metrics.replica_errors.inc();
                        tracing::debug!(error = %e, "kv: replica read failed");
                    }
                }
            }
        };
        let _ = tokio::time::timeout(self.inner.replica_timeout, gather).await;
        if seen.len() < ack {
            self.inner.metrics.not_enough_replicas.inc();
            return Err(KvError::NotEnoughReplicas {
                got: seen.len(),
                needed: ack,
            });
        }
        let newest = newest_of(seen.iter().filter_map(|(_, r)| r.as_ref())).cloned();
        if let Some(newest) = &newest {
            self.spawn_read_repair(key, newest.clone(), seen, pending);
        }
        Ok(newest.filter(|r| !r.is_dead(now_ns())).map(|r| r.value))
    }

    /// This node's or a peer's own version of `key`.
    async fn read_replica(&self, node: usize, key: Bytes) -> Result<Option<Record>, String> {
        if node == self.inner.ring.self_index() {
            self.local_get(key).await.map_err(|e| e.to_string())
        } else {
            let url = self.inner.ring.url(node);
            self.inner
                .client
                .get(url, &key)
                .await
                .map_err(|e| e.to_string())
        }
    }

    /// Writes `newest` back to every replica that showed an older version,
    /// including those whose answers arrive after the client was answered
    /// (bounded by the replica timeout). The record keeps its stamp, so a
    /// repair racing a newer write loses to it.
    fn spawn_read_repair<F>(
        &self,
        key: Bytes,
        newest: Record,
        seen: Vec<(usize, Option<Record>)>,
        mut late: FuturesUnordered<F>,
    ) where
        F: std::future::Future<Output = (usize, Result<Option<Record>, String>)> + Send + 'static,
    {
        let store = self.clone();
        self.inner.background.spawn(async move {
            // A replica is stale when it holds an older version, or none
            // while it is one of the key's replicas under the newest
            // record's own `from` — a read with a larger `from` than the
            // write must not copy the key to more nodes than it was
            // written to.
            let owners = store.inner.ring.owners(&key, newest.replicas);
            let grace = u64::try_from(store.inner.tombstone_grace.as_nanos()).unwrap_or(u64::MAX);
            let purge_cutoff = now_ns().saturating_sub(grace);
            let stale = |node: usize, r: &Option<Record>| {
                stale_replica(&newest, r.as_ref(), owners.contains(&node), purge_cutoff)
            };
            let mut targets: Vec<usize> = seen
                .iter()
                .filter(|(n, r)| stale(*n, r))
                .map(|(n, _)| *n)
                .collect();
            let drain = async {
                while let Some((node, answer)) = late.next().await {
                    if answer.is_ok_and(|r| stale(node, &r)) {
                        targets.push(node);
                    }
                }
            };
            let _ = tokio::time::timeout(store.inner.replica_timeout, drain).await;
            for node in targets {
                tracing::debug!(node = store.inner.ring.url(node), "kv: read repair");
                store.inner.metrics.read_repairs.inc();
                store
                    .write_replica(node, key.clone(), newest.clone())
                    .await
                    .ok();
            }
        });
    }

    /// Writes a stamped record to this node or a peer, within the timeout.
    async fn write_replica(&self, node: usize, key: Bytes, record: Record) -> Result<(), String> {
        if node == self.inner.ring.self_index() {
            return self
                .local_apply(key, record)
                .await
                .map(drop)
                .map_err(|e| e.to_string());
        }
        let url = self.inner.ring.url(node);
        let sent = self.inner.client.put(url, &key, &record);
        if self.inner.client.batching() {
            // Its batch fails after the replica timeout: no timer of its own.
            return sent.await.map_err(|e| e.to_string());
        }
        match tokio::time::timeout(self.inner.replica_timeout, sent).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("{url}: no answer in time")),
        }
    }

    /// [`KvStore::write_replica`], keeping a hint for a peer that did not
    /// take the write (hinted handoff).
    async fn write_replica_or_hint(
        &self,
        node: usize,
        key: Bytes,
        record: Record,
    ) -> Result<(), String> {
        let r = self.write_replica(node, key.clone(), record.clone()).await;
        if r.is_err() && node != self.inner.ring.self_index() {
            self.inner.hints.keep_soon(node, key, record).await;
        }
        r
    }

    /// A client PUT (`Some(value)`, expiring `ttl` after its stamp when
    /// given) or DELETE (`None`): stamps the write, sends it to the `from`
    /// replicas and returns once `ack` stored it.
    pub async fn write(
        &self,
        key: Bytes,
        value: Option<Bytes>,
        ttl: Option<Duration>,
        ack: usize,
        from: usize,
    ) -> Result<(), KvError> {
        let ts = self.stamp();
        let record = match value {
            Some(v) => Record::value(ts, v),
            None => Record::tombstone(ts),
        };
        let expires_at = ttl.map_or(0, |t| {
            ts.saturating_add(t.as_nanos().min(u64::MAX as u128) as u64)
        });
        let record = record.with_replicas(from).with_expiry(expires_at);
        // Every replica's write is polled here, on the request's own task:
        // the local one writes the journal on first poll, a peer's joins
        // that peer's next batch. Whatever is still running once the quorum
        // is reached (or when the client goes away) finishes in one task of
        // its own (`Unfinished`), so every replica is written, or hinted.
        let mut pending = Unfinished {
            background: self.inner.background.clone(),
            writes: self
                .inner
                .ring
                .replicas(&key, from)
                .into_iter()
                .map(|node| {
                    let (store, key, record) = (self.clone(), key.clone(), record.clone());
                    Box::pin(async move { store.write_replica_or_hint(node, key, record).await })
                        as ReplicaWrite
                })
                .collect(),
        };
        let mut got = 0;
        let gather = async {
            while let Some(answer) = pending.writes.next().await {
                match answer {
                    Ok(()) => {
                        got += 1;
                        if got >= ack {
                            return;
                        }
                    }
                    Err(e) => {
                        self.inner.metrics.replica_errors.inc();
                        tracing::debug!(error = %e, "kv: replica write failed");
                    }
                }
            }
        };
        let _ = tokio::time::timeout(self.inner.replica_timeout, gather).await;
        drop(pending);
        if got < ack {
            self.inner.metrics.not_enough_replicas.inc();
            return Err(KvError::NotEnoughReplicas { got, needed: ack });
        }
        if let Some(hub) = &self.inner.hub {
            watch::publish(hub, &key, &record).await;
        }
        Ok(())
    }
}

/// A batch's reads and writes in order, each run of writes as one journal
/// write; one reply per operation.
fn apply_batch(engine: &Engine, ops: Vec<BatchOp>) -> Vec<BatchReply> {
    let mut replies = Vec::with_capacity(ops.len());
    let mut run: Vec<(Bytes, Record)> = Vec::new();
    for op in ops {
        match op {
            BatchOp::Put(key, record) => run.push((key, record)),
            BatchOp::Get(key) => {
                apply_run(engine, &mut run, &mut replies);
                replies.push(match engine.get(&key) {
                    Ok(Some(r)) => BatchReply::Found(r),
                    Ok(None) => BatchReply::Absent,
                    Err(e) => {
                        tracing::error!(error = %e, "kv: batch read failed");
                        BatchReply::Failed
                    }
                });
            }
        }
    }
    apply_run(engine, &mut run, &mut replies);
    replies
}

/// Writes a run of a batch's puts as one journal write and adds their
/// replies; the run is left empty.
fn apply_run(engine: &Engine, run: &mut Vec<(Bytes, Record)>, replies: &mut Vec<BatchReply>) {
    if run.is_empty() {
        return;
    }
    match engine.apply_many_unsynced(run) {
        Ok(stored) => replies.extend(stored.into_iter().map(|n| {
            if n {
                BatchReply::Applied
            } else {
                BatchReply::NotNewer
            }
        })),
        Err(e) => {
            tracing::error!(error = %e, "kv: batch write failed");
            replies.extend(run.iter().map(|_| BatchReply::Failed));
        }
    }
    run.clear();
}

/// One replica's write of a client PUT or DELETE.
type ReplicaWrite = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// The replica writes of one client write not finished yet. Dropped with
/// some left (the quorum was reached first, the timeout struck, or the
/// client went away), it hands them to a task of their own, so each still
/// reaches its replica or leaves a hint.
struct Unfinished {
    /// Where the task goes: shutdown waits for it.
    background: TaskTracker,
    writes: FuturesUnordered<ReplicaWrite>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.writes.is_empty() {
            return;
        }
        let mut rest = std::mem::take(&mut self.writes);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.background.spawn_on(
                async move { while rest.next().await.is_some() {} },
                &runtime,
            );
        }
    }
}

/// What a storage call made on this worker returned (`Ok`), or the call it
/// gave back ([`Engine::try_read_here`], [`Engine::try_write_here`]) run
/// on the blocking pool and awaited.
async fn here_or_blocking<T, F>(here: Result<T, F>) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match here {
        Ok(done) => Ok(done),
        Err(call) => tokio::task::spawn_blocking(call).await,
    }
}

/// The memtable size of the node at `index` of `nodes` (its place among
/// the node URLs sorted, so each node's own order of the list does not
/// matter): fjall's 64 MiB on the first node (and on a node alone), less
/// than half as much again on the last, evenly spread.
///
/// Replicas of the same keys take the same writes, so with equal memtables
/// they fill and flush at the same moments, and each flush stalls its
/// node's writes for an fsync (fjall's journal, lsm-tree's version file):
/// `ack = 2` of 3 could not route around a stall that every replica has at
/// once. With different sizes the flushes drift apart. Measured at 20,000
/// PUT/s on three nodes: p90 lower in 6 of 6 alternated pairs
/// (BENCHMARKS.md, "Replicas flush at different moments").
fn memtable_bytes(index: usize, nodes: usize) -> u64 {
    if nodes <= 1 {
        return BASE_MEMTABLE_BYTES;
    }
    let extra = BASE_MEMTABLE_BYTES / 2 * index.min(nodes - 1) as u64 / nodes as u64;
    BASE_MEMTABLE_BYTES + extra
}

/// This node's place among the `nodes` URLs sorted (0 for a node alone).
fn sorted_place(config: &KvConfig) -> usize {
    let Some(me) = &config.self_url else { return 0 };
    let mut nodes: Vec<&String> = config.nodes.iter().collect();
    nodes.sort();
    nodes.iter().position(|n| *n == me).unwrap_or(0)
}

/// Whether a replica holding `held` (`None`: nothing) is stale against the
/// `newest` version a read saw: it holds an older version, or none while
/// it is one of the key's replicas under the newest record's own `from`
/// (`is_owner`; a read with a larger `from` than the write must not copy
/// the key to more nodes than it was written to). A replica holding
/// nothing is not stale when `newest` died before `purge_cutoff_ns` (now
/// minus the grace period): any replica may have purged it by now (its
/// compactions do), and writing it back would only undo that purge, on
/// every read, until the last replica purged it too. An older version is
/// still overwritten with it, dead or not: that keeps a deleted value
/// from coming back.
fn stale_replica(
    newest: &Record,
    held: Option<&Record>,
    is_owner: bool,
    purge_cutoff_ns: u64,
) -> bool {
    match held {
        Some(r) => newest.supersedes(r),
        None => is_owner && newest.dead_since().is_none_or(|t| t >= purge_cutoff_ns),
    }
}

/// The last-write-wins winner of `records`.
fn newest_of<'a>(records: impl Iterator<Item = &'a Record>) -> Option<&'a Record> {
    records.fold(None, |best, r| match best {
        Some(b) if !r.supersedes(b) => Some(b),
        _ => Some(r),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_without_a_record_dead_past_the_grace_is_not_repaired() {
        let value = Record::value(10, Bytes::from_static(b"v"));
        let tombstone = Record::tombstone(20);
        let cutoff = 100;
        // Live newest: an owner holding nothing or an older version is stale.
        assert!(stale_replica(&value, None, true, cutoff));
        assert!(!stale_replica(&value, None, false, cutoff));
        assert!(!stale_replica(&value, Some(&value), true, cutoff));
        // A tombstone still within the grace: holding nothing is stale.
        assert!(stale_replica(&tombstone, None, true, 15));
        // Dead past the grace: holding nothing is fine (purged), holding
        // the older value is not (the value must not come back).
        assert!(!stale_replica(&tombstone, None, true, cutoff));
        assert!(stale_replica(&tombstone, Some(&value), true, cutoff));
        let expired = Record::value(30, Bytes::from_static(b"x")).with_expiry(40);
        assert!(!stale_replica(&expired, None, true, cutoff));
        assert!(stale_replica(&expired, None, true, 40));
    }

    #[test]
    fn replicas_get_distinct_memtable_sizes_within_half_again() {
        assert_eq!(memtable_bytes(0, 1), BASE_MEMTABLE_BYTES);
        for n in 2..=12 {
            let sizes: Vec<u64> = (0..n).map(|i| memtable_bytes(i, n)).collect();
            assert_eq!(sizes[0], BASE_MEMTABLE_BYTES);
            assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
            assert!(sizes[n - 1] < BASE_MEMTABLE_BYTES * 3 / 2, "{sizes:?}");
        }
        // An index past the list (a node not in `nodes`) stays in range.
        assert!(memtable_bytes(99, 3) < BASE_MEMTABLE_BYTES * 3 / 2);
    }

    #[test]
    fn a_node_s_place_does_not_depend_on_the_order_it_lists_the_nodes_in() {
        let urls = ["http://b:1", "http://a:1", "http://c:1"];
        let place = |me: &str, order: [usize; 3]| {
            sorted_place(&KvConfig {
                self_url: Some(me.to_owned()),
                nodes: order.iter().map(|&i| urls[i].to_owned()).collect(),
                ..KvConfig::default()
            })
        };
        for me in urls {
            assert_eq!(place(me, [0, 1, 2]), place(me, [2, 0, 1]), "{me}");
        }
        assert_eq!(place("http://a:1", [0, 1, 2]), 0);
        assert_eq!(place("http://c:1", [1, 2, 0]), 2);
        assert_eq!(sorted_place(&KvConfig::default()), 0);
    }
}
