//! Anti-entropy: every `[kv] anti_entropy_interval_ms`, this node compares
//! a hash tree of the data it shares with each peer ([`crate::merkle`])
//! against the peer's tree of the same data, and pulls only the key ranges
//! (tree leaves) that differ, applying each received record with
//! last-write-wins. A node whose data directory was wiped thus gets back
//! every key it replicates without any client reading them.
//!
//! What a pair of nodes shares: a key both are replicas of under the
//! record's own `from` ([`Record::replicas`]); a write with `from=1` is
//! never copied anywhere by anti-entropy. Records dead for longer than the
//! tombstone grace period (about to be purged) are left out on both sides,
//! so a purge on one node and not yet on the other is not a difference.
//!
//! Both trees of an exchange cover the same records: those stamped before
//! a horizon the pulling node picks (its clock minus a settle time, at
//! most [`SETTLE_MAX`]) and sends along. Without it, two trees built a
//! moment apart under a steady write load differ in nearly every range,
//! and nearly everything would be streamed; writes younger than the
//! horizon are still in flight (or in hints) anyway.
//!
//! One exchange, started by the node that pulls:
//! 1. `GET /v0/internal/tree?peer=<me>&root=<hex>&before=<ns>` — the peer
//!    answers 204 when its root equals ours (nothing differs: 8 bytes were
//!    compared), or 200 with its tree's leaves
//!    ([`crate::merkle::TREE_BYTES`]).
//! 2. `POST /v0/internal/entries?peer=<me>` with the differing leaves —
//!    the peer streams its records in those ranges
//!    ([`crate::entry_stream`]), read and applied in bounded batches.
//! 3. A received record older than ours means the peer is stale: ours is
//!    written back to it (like read repair), at most
//!    [`MAX_PUSH_BACKS`] per exchange.
//!
//! Pulls go both ways because every node runs its own passes. Memory is
//! bounded: a tree is [`crate::merkle::LEAVES`] hashes per peer whatever
//! the data size, a stream holds one partial frame and one apply batch.
//! Cost: a tree build is one scan of the local data (one for all peers at
//! the start of a pass; one per peer request, reused for requests with the
//! same horizon within `TREE_MAX_AGE`), and serving the entries of some
//! ranges is one more scan (keys are stored in key order, ranges are hash
//! slices).
//! Requests are signed like every internal request ([`crate::auth`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Limited};
use hyper::{Method, StatusCode};

use crate::background;
use crate::client::{percent_encode, ReplicaClient, MAX_RECORD_RESPONSE_BYTES};
use crate::engine::{now_ns, Engine};
use crate::entry_stream::{encode_entry, EntryDecoder};
use crate::error::KvError;
use crate::merkle::{decode_leaves, encode_leaves, leaf_of, MerkleTree, LEAVES, TREE_BYTES};
use crate::metrics::KvMetrics;
use crate::record::Record;
use crate::ring::Ring;

/// Path of the tree request.
pub const TREE_PATH: &str = "/v0/internal/tree";
/// Path of the entries request.
pub const ENTRIES_PATH: &str = "/v0/internal/entries";
/// Most stale peer keys overwritten with ours in one exchange; the rest
/// wait for the next pass.
pub const MAX_PUSH_BACKS: usize = 10_000;
/// Longest wait for a tree, or for the next piece of an entries stream
/// (the peer may be scanning a large store between two matching keys).
const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of entries gathered into one chunk of the response stream.
const STREAM_CHUNK_BYTES: usize = 64 * 1024;
/// Chunks buffered between the scanning thread and the socket.
const STREAM_CHANNEL_CHUNKS: usize = 16;
/// Received entries applied together (one blocking call, one fsync).
const APPLY_BATCH_ENTRIES: usize = 256;
/// Received bytes that also close a batch.
const APPLY_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Longest wait before the first pass after start: a node that comes back
/// with an empty data directory starts refilling within seconds, not one
/// whole interval later.
const FIRST_PASS_DELAY: Duration = Duration::from_secs(5);
/// Age past which our trees are built again. Short: a tree served to a
/// peer must show what we hold now — a tree from before a burst of writes
/// hides the ranges those writes filled, and a wiped peer comparing with it
/// would skip them until the next pass (seen: 4 % of the keys waited one
/// whole interval). Long enough that peers asking at about the same time,
/// and our own pass, share one scan.
const TREE_MAX_AGE: Duration = Duration::from_secs(5);
/// Longest settle time: records stamped less than this before a pass are
/// left out of its trees (the interval, when shorter).
pub const SETTLE_MAX: Duration = Duration::from_secs(5);

/// This node's side of anti-entropy: its trees, what it serves to peers,
/// and the passes it runs.
pub struct AntiEntropy {
    engine: Arc<Engine>,
    ring: Ring,
    client: ReplicaClient,
    metrics: KvMetrics,
    grace_ns: u64,
    replica_timeout: Duration,
    tree_max_age: Duration,
    settle: Duration,
    /// The trees last built to answer a peer, one per node index (our own
    /// slot stays empty), with their horizon and when they were built. An
    /// async lock: one build at a time; requests with the same horizon
    /// share it.
    trees: tokio::sync::Mutex<Option<BuiltTrees>>,
}

/// Trees built for a horizon (ns), when, one per node index.
type BuiltTrees = (u64, Instant, Arc<Vec<MerkleTree>>);

impl AntiEntropy {
    /// Anti-entropy for this node. `interval` 0 means no passes of our
    /// own (peers are still answered).
    pub fn new(
        engine: Arc<Engine>,
        ring: Ring,
        client: ReplicaClient,
        metrics: KvMetrics,
        tombstone_grace: Duration,
        replica_timeout: Duration,
        interval: Duration,
    ) -> Self {
        let (tree_max_age, settle) = if interval.is_zero() {
            (TREE_MAX_AGE, SETTLE_MAX)
        } else {
            (TREE_MAX_AGE.min(interval / 2), SETTLE_MAX.min(interval))
        };
        AntiEntropy {
            engine,
            ring,
            client,
            metrics,
            grace_ns: tombstone_grace.as_nanos().min(u64::MAX as u128) as u64,
            replica_timeout,
            tree_max_age,
            settle,
            trees: tokio::sync::Mutex::new(None),
        }
    }

    /// The node index of peer URL `url`, when it is another node of the
    /// cluster.
    pub fn peer_index(&self, url: &str) -> Option<usize> {
        (0..self.ring.len()).find(|&i| i != self.ring.self_index() && self.ring.url(i) == url)
    }

    /// Runs a pass with every peer every `interval` (the first one
    /// sooner, `FIRST_PASS_DELAY`), for as long as `ae` lives (the task
    /// holds only a weak reference between passes).
    pub fn spawn(ae: &Arc<AntiEntropy>, interval: Duration) {
        let weak = Arc::downgrade(ae);
        tokio::spawn(async move {
            let mut wait = interval.min(FIRST_PASS_DELAY);
            loop {
                tokio::time::sleep(wait).await;
                wait = interval;
                let Some(ae) = weak.upgrade() else { return };
                ae.pass().await;
            }
        });
    }

    /// One exchange with every peer, one after the other, against trees
    /// built once at the start of the pass.
    pub async fn pass(&self) {
        let horizon = now_ns().saturating_sub(self.settle.as_nanos() as u64);
        let trees = match self.build(horizon).await {
            Ok(t) => t,
            Err(e) => {
                self.metrics.ae_failures.inc();
                tracing::warn!(error = %e, "kv: anti-entropy could not build its trees");
                return;
            }
        };
        for peer in 0..self.ring.len() {
            if peer == self.ring.self_index() {
                continue;
            }
            let (started, repaired) = (Instant::now(), self.metrics.ae_keys_repaired.get());
            let outcome = self.exchange(peer, horizon, &trees[peer]).await;
            let repaired = self.metrics.ae_keys_repaired.get() - repaired;
            if repaired > 0 {
                tracing::info!(
                    peer = self.ring.url(peer),
                    repaired,
                    ms = started.elapsed().as_millis() as u64,
                    "kv: anti-entropy repaired keys"
                );
            }
            match outcome {
                Ok(()) => {
                    self.metrics.ae_exchanges.inc();
                }
                Err(e) => {
                    self.metrics.ae_failures.inc();
                    tracing::debug!(peer = self.ring.url(peer), error = %e, "kv: anti-entropy exchange failed");
                }
            }
        }
    }

    /// Builds our trees of the records stamped before `horizon` (a scan at
    /// the lowest priority, [`crate::background`]).
    async fn build(&self, horizon: u64) -> Result<Arc<Vec<MerkleTree>>, KvError> {
        let (engine, ring, grace_ns) = (self.engine.clone(), self.ring.clone(), self.grace_ns);
        let trees = background::spawn_scan("kv-ae-tree", move || {
            build_trees(&engine, &ring, grace_ns, horizon)
        })
        .await??;
        Ok(Arc::new(trees))
    }

    /// Serves a tree request for the records stamped before `horizon`:
    /// `None` when our root for `peer` is `root`.
    pub async fn tree_for(
        &self,
        peer: usize,
        root: Option<u64>,
        horizon: u64,
    ) -> Result<Option<MerkleTree>, KvError> {
        let mut cache = self.trees.lock().await;
        let trees = match cache.as_ref() {
            Some((h, built, trees)) if *h == horizon && built.elapsed() < self.tree_max_age => {
                trees.clone()
            }
            _ => {
                let trees = self.build(horizon).await?;
                *cache = Some((horizon, Instant::now(), trees.clone()));
                trees
            }
        };
        drop(cache);
        let tree = &trees[peer];
        Ok((root != Some(tree.root())).then(|| tree.clone()))
    }

    /// Serves an entries request: our records in `leaves` that `peer`
    /// shares, as a stream of chunks of frames. The scan runs at the lowest
    /// priority ([`crate::background`]) and waits for the socket (a bounded
    /// channel); a peer that goes away ends it.
    pub fn entries_for(
        &self,
        peer: usize,
        leaves: &[u16],
    ) -> tokio::sync::mpsc::Receiver<Result<Bytes, KvError>> {
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_CHANNEL_CHUNKS);
        let wanted = leaf_set(leaves);
        let (engine, ring, grace_ns) = (self.engine.clone(), self.ring.clone(), self.grace_ns);
        let failed_tx = tx.clone();
        let spawned = background::spawn_scan_thread("kv-ae-entries", move || {
            let cutoff = now_ns().saturating_sub(grace_ns);
            let mut chunk = BytesMut::new();
            for entry in engine.records() {
                let (key, record) = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                };
                if !wanted[leaf_of(&key)]
                    || !visible(&record, cutoff)
                    || !shared(&ring, &key, &record, peer)
                {
                    continue;
                }
                encode_entry(&key, &record, &mut chunk);
                if chunk.len() >= STREAM_CHUNK_BYTES
                    && tx.blocking_send(Ok(chunk.split().freeze())).is_err()
                {
                    return;
                }
            }
            if !chunk.is_empty() {
                let _ = tx.blocking_send(Ok(chunk.freeze()));
            }
        });
        if let Err(e) = spawned {
            // The stream must not end as if complete: the error is its
            // only item (the channel is empty, so there is room).
            let _ = failed_tx.try_send(Err(KvError::Task(format!("spawning a scan thread: {e}"))));
        }
        rx
    }

    /// One exchange with `peer`: compare trees, pull the differing ranges,
    /// write ours back where the peer is stale.
    async fn exchange(&self, peer: usize, horizon: u64, mine: &MerkleTree) -> Result<(), String> {
        let url = self.ring.url(peer).to_owned();
        let me = percent_encode(self.ring.url(self.ring.self_index()).as_bytes());
        let path = format!(
            "{TREE_PATH}?peer={me}&root={:016x}&before={horizon}",
            mine.root()
        );
        let resp = self.request(&url, Method::GET, &path, Bytes::new()).await?;
        self.metrics.ae_ranges_compared.inc_by(LEAVES as u64);
        let theirs = match resp.status() {
            StatusCode::NO_CONTENT => return Ok(()),
            StatusCode::OK => {
                let body = tokio::time::timeout(
                    STREAM_IDLE_TIMEOUT,
                    Limited::new(resp.into_body(), TREE_BYTES).collect(),
                )
                .await
                .map_err(|_| "tree body timed out".to_owned())?
                .map_err(|e| format!("tree body: {e}"))?
                .to_bytes();
                MerkleTree::decode(&body).map_err(|e| e.to_string())?
            }
            status => return Err(format!("tree request answered {status}")),
        };
        let differing = mine.differing_leaves(&theirs);
        if differing.is_empty() {
            return Ok(());
        }
        self.metrics
            .ae_ranges_differing
            .inc_by(differing.len() as u64);
        tracing::debug!(
            peer = %url,
            ranges = differing.len(),
            "kv: anti-entropy pulls differing ranges"
        );

        let path = format!("{ENTRIES_PATH}?peer={me}");
        let resp = self
            .request(&url, Method::POST, &path, encode_leaves(&differing))
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(format!("entries request answered {}", resp.status()));
        }
        let wanted = leaf_set(&differing);
        let decoder = EntryDecoder::new(MAX_RECORD_RESPONSE_BYTES);
        let (mut body, mut buf) = (resp.into_body(), BytesMut::new());
        let (mut batch, mut batch_bytes) = (Vec::new(), 0usize);
        let mut stale_peer = Vec::new();
        loop {
            let frame = tokio::time::timeout(STREAM_IDLE_TIMEOUT, body.frame())
                .await
                .map_err(|_| "entries stream stalled".to_owned())?;
            let ended = match frame {
                None => true,
                Some(Err(e)) => return Err(format!("entries stream: {e}")),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        buf.extend_from_slice(&data);
                    }
                    false
                }
            };
            while let Some((key, record)) = decoder.decode(&mut buf).map_err(|e| e.to_string())? {
                if !wanted[leaf_of(&key)] {
                    return Err("the peer sent an entry outside the asked ranges".into());
                }
                if !shared(&self.ring, &key, &record, peer) {
                    // Not ours to hold under the record's own `from` (a peer
                    // configured with another `nodes` list would send these):
                    // storing it would add a copy nobody asked for.
                    continue;
                }
                batch_bytes += key.len() + record.value.len();
                batch.push((key, record));
            }
            if ended || batch.len() >= APPLY_BATCH_ENTRIES || batch_bytes >= APPLY_BATCH_BYTES {
                let taken = std::mem::take(&mut batch);
                batch_bytes = 0;
                self.apply_batch(taken, &mut stale_peer).await?;
            }
            if ended {
                decoder.finish(&buf).map_err(|e| e.to_string())?;
                break;
            }
        }
        for (key, record) in stale_peer {
            let sent = self.client.put(&url, &key, &record);
            if let Ok(Ok(())) = tokio::time::timeout(self.replica_timeout, sent).await {
                self.metrics.ae_keys_repaired.inc();
            }
        }
        Ok(())
    }

    /// Applies received records; notes in `stale_peer` our newer versions
    /// of the keys the peer sent older ones of.
    async fn apply_batch(
        &self,
        batch: Vec<(Bytes, Record)>,
        stale_peer: &mut Vec<(Bytes, Record)>,
    ) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let engine = self.engine.clone();
        let room = MAX_PUSH_BACKS.saturating_sub(stale_peer.len());
        let (repaired, newer) = tokio::task::spawn_blocking(move || {
            let stored = engine.apply_many(&batch)?;
            let mut newer = Vec::new();
            for ((key, theirs), stored) in batch.into_iter().zip(&stored) {
                if *stored || newer.len() >= room {
                    continue;
                }
                if let Some(ours) = engine.get(&key)? {
                    if ours.supersedes(&theirs) {
                        newer.push((key, ours));
                    }
                }
            }
            let repaired = stored.iter().filter(|s| **s).count();
            Ok::<_, KvError>((repaired, newer))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        self.metrics.ae_keys_repaired.inc_by(repaired as u64);
        stale_peer.extend(newer);
        Ok(())
    }

    /// A signed request, bounded by [`STREAM_IDLE_TIMEOUT`] until the head.
    async fn request(
        &self,
        url: &str,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        let sent = self.client.signed(url, method, path, body);
        tokio::time::timeout(STREAM_IDLE_TIMEOUT, sent)
            .await
            .map_err(|_| format!("{url}: no answer in time"))?
            .map_err(|e| e.to_string())
    }
}

/// Builds our tree for every peer in one scan (blocking), over the
/// records stamped before `horizon`.
fn build_trees(
    engine: &Engine,
    ring: &Ring,
    grace_ns: u64,
    horizon: u64,
) -> Result<Vec<MerkleTree>, KvError> {
    let me = ring.self_index();
    let mut trees = vec![MerkleTree::default(); ring.len()];
    let cutoff = now_ns().saturating_sub(grace_ns);
    for entry in engine.records() {
        let (key, record) = entry?;
        if record.timestamp >= horizon || !visible(&record, cutoff) {
            continue;
        }
        let owners = owners(ring, &key, &record);
        if !owners.contains(&me) {
            continue;
        }
        for peer in owners {
            if peer != me {
                trees[peer].add(&key, &record);
            }
        }
    }
    Ok(trees)
}

/// The replicas of `key` under the record's own `from` (every node when
/// unknown).
fn owners(ring: &Ring, key: &[u8], record: &Record) -> Vec<usize> {
    ring.owners(key, record.replicas)
}

/// Whether this node and `peer` are both replicas of `key`.
fn shared(ring: &Ring, key: &[u8], record: &Record, peer: usize) -> bool {
    let owners = owners(ring, key, record);
    owners.contains(&ring.self_index()) && owners.contains(&peer)
}

/// False for a record dead since before `cutoff`: the purge may remove it
/// any moment, so anti-entropy treats it as gone already.
fn visible(record: &Record, cutoff: u64) -> bool {
    record.dead_since().is_none_or(|t| t >= cutoff)
}

/// A leaf list as a lookup table.
fn leaf_set(leaves: &[u16]) -> Vec<bool> {
    let mut set = vec![false; LEAVES];
    for &l in leaves {
        set[l as usize] = true;
    }
    set
}

/// Reads an entries request's body (the differing leaves).
pub fn parse_leaves(body: &[u8]) -> Result<Vec<u16>, String> {
    decode_leaves(body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SyncPolicy;

    fn ring(me: usize) -> Ring {
        Ring::new(
            (0..3)
                .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
                .collect(),
            me,
        )
    }

    /// A key whose replicas, best first, start with `first`.
    fn key_owned_first_by(r: &Ring, first: usize) -> Vec<u8> {
        (0..)
            .map(|i| format!("key{i}").into_bytes())
            .find(|k| r.replicas(k, 1)[0] == first)
            .unwrap()
    }

    #[test]
    fn trees_hold_what_both_nodes_replicate_under_the_records_own_from() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), SyncPolicy::None).unwrap();
        let r = ring(0);
        let v = |from: usize| Record::value(now_ns(), Bytes::from_static(b"v")).with_replicas(from);
        let everywhere = key_owned_first_by(&r, 1);
        let only_mine = key_owned_first_by(&r, 0);
        let unknown_from = b"legacy".to_vec();
        engine.apply(&everywhere, &v(3)).unwrap();
        engine.apply(&only_mine, &v(1)).unwrap();
        engine
            .apply(&unknown_from, &Record::value(1, Bytes::new()))
            .unwrap();
        // Dead for longer than the grace period: about to be purged, so
        // left out; a fresh tombstone is in.
        engine
            .apply(b"old-tombstone", &Record::tombstone(1).with_replicas(3))
            .unwrap();
        engine
            .apply(
                b"new-tombstone",
                &Record::tombstone(now_ns()).with_replicas(3),
            )
            .unwrap();

        let grace = Duration::from_secs(60).as_nanos() as u64;
        let trees = build_trees(&engine, &r, grace, u64::MAX).unwrap();
        assert_eq!(trees[0], MerkleTree::default(), "no tree for ourselves");
        let mut expected = MerkleTree::default();
        expected.add(&everywhere, &engine.get(&everywhere).unwrap().unwrap());
        expected.add(&unknown_from, &engine.get(&unknown_from).unwrap().unwrap());
        expected.add(
            b"new-tombstone",
            &engine.get(b"new-tombstone").unwrap().unwrap(),
        );
        assert_eq!(trees[1], expected);
        assert_eq!(trees[2], expected);
        // Records stamped at or after the horizon are left out: only the
        // legacy value (stamp 1) is older than 2.
        let early = build_trees(&engine, &r, grace, 2).unwrap();
        let mut legacy_only = MerkleTree::default();
        legacy_only.add(&unknown_from, &engine.get(&unknown_from).unwrap().unwrap());
        assert_eq!(early[1], legacy_only);

        // A from=2 key is shared with its other replica only.
        let two = key_owned_first_by(&r, 0);
        let rec = v(2);
        let other = r.replicas(&two, 2)[1];
        assert!(shared(&r, &two, &rec, other));
        assert!(!shared(&r, &two, &rec, 3 - other));
    }
}
