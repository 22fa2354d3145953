//! The local storage engine: one fjall keyspace mapping key bytes to
//! [`Record`] bytes, with last-write-wins applied on every write, the
//! `[kv] sync` durability policy, and background threads that fsync
//! (`interval_ms:N`) and purge tombstones and expired values dead for
//! longer than the grace period (fjall's compactions purge them too, see
//! `engine/dead_filter.rs`).
//!
//! Calls block on disk I/O (briefly, for data the page cache holds); async
//! callers make them inline on their worker rather than on the blocking
//! pool (docs/kv.md, "Storage calls run on the calling worker"), unless
//! another worker is in a storage call ([`crate::storage_slot`]). Not for:
//! replication or timestamps (the coordinator stamps records before they
//! get here).
//!
//! Hinted-handoff records live in a keyspace of their own, written and
//! read by the calls in `engine/hint_store.rs` ([`Engine::put_hint`] …).

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjall::compaction::filter::Factory as CompactionFilterFactory;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use parking_lot::Mutex;

use crate::commit::GroupCommit;
use crate::config::{SyncPolicy, DEFAULT_CACHE_MB};
use crate::error::KvError;
use crate::record::Record;
use crate::stamp_bound::StampBounds;
use crate::storage_slot::StorageSlot;
use crate::write_group::WriteGroups;
use crate::writeback::{self, WRITEBACK_EVERY};

mod dead_filter;
use dead_filter::DeadRecordPurge;
pub use dead_filter::DeadRecords;
mod hint_store;

pub use hint_store::{hint_bytes, HintBatch, HintCensus, HintChange, HintPut, HintTotals};

/// Name of the keyspace holding the records.
const KEYSPACE: &str = "entities";
/// Name of the keyspace holding hinted-handoff records ([`crate::hints`]).
const HINTS_KEYSPACE: &str = "hints";
/// Name of the keyspace holding the engine's own bookkeeping
/// ([`crate::stamp_bound`]).
const META_KEYSPACE: &str = "meta";
/// Locks that make a read-compare-write of one key atomic; a key takes the
/// stripe of its hash, so unrelated keys rarely wait on each other.
const LOCK_STRIPES: usize = 256;
/// Longest sleep of the maintenance threads, so they notice a stop quickly.
const MAINTENANCE_TICK: Duration = Duration::from_millis(50);
/// Longest time between two purge passes over the whole store. The
/// data keyspace's compactions purge dead records as they rewrite tables
/// ([`dead_filter`]), so a pass only gives back the space of records no
/// compaction reached (a store no longer written to); reading everything
/// for that once a day is enough. (It was hourly before the filter.)
const MAX_PURGE_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// Longest time from the engine's start to its first purge pass.
const FIRST_PURGE_AFTER: Duration = Duration::from_secs(3600);

/// Bytes a memtable of the data keyspace holds before it is flushed, on a
/// node alone (fjall's own default).
pub const BASE_MEMTABLE_BYTES: u64 = 64 * 1024 * 1024;

/// Sizes of the engine's memory, fixed when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSizes {
    /// Bytes of the block cache.
    pub cache_bytes: u64,
    /// Bytes a memtable of the data keyspace holds before it is flushed.
    /// Applies when the data directory is created: fjall keeps a
    /// keyspace's options from its creation.
    pub memtable_bytes: u64,
}

impl Default for EngineSizes {
    fn default() -> Self {
        EngineSizes {
            cache_bytes: DEFAULT_CACHE_MB * 1024 * 1024,
            memtable_bytes: BASE_MEMTABLE_BYTES,
        }
    }
}

/// Fewest flush and compaction threads the engine runs with.
///
/// fjall keeps its worker 0 for flushes: when it is handed a compaction
/// while other workers exist, it puts the request back on the queue and
/// takes the next message. With fjall's default of one worker per core
/// (two here), a compaction request left over while worker 1 compacts
/// bounces between the queue and worker 0 for the whole compaction: one
/// thread spinning at 100 % of a core. From three workers up, a spare
/// worker takes the leftover request (and usually finds nothing to do), so
/// worker 0 sleeps again. On a 3-node PUT load this took p99 from
/// 9.9–13.3 ms to 7.1–9.2 ms (BENCHMARKS.md, "fjall's worker 0 spins").
const MIN_STORAGE_WORKERS: usize = 3;
/// Most flush and compaction threads (fjall's own default cap).
const MAX_STORAGE_WORKERS: usize = 4;

/// The number of fjall worker threads for a machine with `cores` cores:
/// one per core as fjall would choose, but never fewer than
/// [`MIN_STORAGE_WORKERS`].
fn storage_workers(cores: usize) -> usize {
    cores.clamp(MIN_STORAGE_WORKERS, MAX_STORAGE_WORKERS)
}

/// The cores this process may use (1 when the OS does not say).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The local store. Cheap to share behind an `Arc`.
pub struct Engine {
    db: Database,
    /// The data directory (its journal files: [`crate::writeback`]).
    dir: std::path::PathBuf,
    data: Keyspace,
    hints: Keyspace,
    meta: Keyspace,
    /// Proves most writes newer than their key's stored version unread.
    bounds: StampBounds,
    sync: SyncPolicy,
    /// Locks of the data keyspace's keys.
    stripes: Box<[Mutex<()>]>,
    /// Locks of the hints keyspace's keys: a set of their own, so a hint
    /// being written never holds up a client write of a key that merely
    /// hashes alike (and the reverse).
    hint_stripes: Box<[Mutex<()>]>,
    stop: Arc<AtomicBool>,
    /// `sync = "always"`: one fsync for many concurrent writes.
    group_commit: Option<GroupCommit>,
    /// Client writes gathered into one journal write each.
    groups: WriteGroups,
    /// Journal writes always made on the calling (async) thread, even
    /// while another one is in progress (`[kv] inline_writes`).
    inline_writes: bool,
    /// Local reads always made on the calling (async) thread, even while
    /// another storage call is in progress (`[kv] inline_reads`).
    inline_reads: bool,
    /// Held by the async worker inside a storage call.
    storage_slot: StorageSlot,
    /// Set once a write failed with `Poisoned`: fjall accepts no write
    /// after a failed journal write (a full disk, an I/O error) until the
    /// process opens the database again, so the node must be restarted.
    poisoned: AtomicBool,
    /// What the data keyspace's compactions purge ([`dead_filter`]).
    dead: Arc<DeadRecords>,
}

impl Engine {
    /// Opens (creating when missing) the engine in `dir`, with the default
    /// sizes.
    pub fn open(dir: &Path, sync: SyncPolicy) -> Result<Self, KvError> {
        Self::open_with(dir, sync, EngineSizes::default())
    }

    /// Opens (creating when missing) the engine in `dir` with `sizes`.
    pub fn open_with(dir: &Path, sync: SyncPolicy, sizes: EngineSizes) -> Result<Self, KvError> {
        std::fs::create_dir_all(dir).map_err(|source| KvError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        // "none": writes stay in the journal's buffer (kill -9 loses them);
        // otherwise every write reaches the OS before returning.
        let manual = sync == SyncPolicy::None;
        let dead = Arc::new(DeadRecords::default());
        let purge: Arc<dyn CompactionFilterFactory> = Arc::new(DeadRecordPurge(dead.clone()));
        let db = Database::builder(dir)
            .with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                (keyspace == KEYSPACE).then(|| purge.clone())
            }))
            .worker_threads(storage_workers(available_cores()))
            .cache_size(sizes.cache_bytes)
            .manual_journal_persist(manual)
            .open()
            .map_err(|e| match e {
                fjall::Error::Locked => KvError::DataDirInUse {
                    path: dir.display().to_string(),
                },
                e => KvError::Storage(e),
            })?;
        let data = db.keyspace(KEYSPACE, || {
            KeyspaceCreateOptions::default()
                .manual_journal_persist(manual)
                .max_memtable_size(sizes.memtable_bytes)
        })?;
        let hints = db.keyspace(HINTS_KEYSPACE, || {
            KeyspaceCreateOptions::default().manual_journal_persist(manual)
        })?;
        let meta = db.keyspace(META_KEYSPACE, || {
            KeyspaceCreateOptions::default().manual_journal_persist(manual)
        })?;
        let bounds = StampBounds::load(&meta, &data)?;
        let group_commit = (sync == SyncPolicy::Always).then(|| GroupCommit::start(db.clone()));
        Ok(Engine {
            db,
            dir: dir.to_path_buf(),
            data,
            hints,
            meta,
            bounds,
            sync,
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            hint_stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            stop: Arc::new(AtomicBool::new(false)),
            group_commit,
            groups: WriteGroups::default(),
            inline_writes: false,
            inline_reads: false,
            storage_slot: StorageSlot::default(),
            poisoned: AtomicBool::new(false),
            dead,
        })
    }

    /// Starts the engine's two maintenance threads, which end when the
    /// engine is dropped: one fsyncs on `interval_ms:N` (and writes the
    /// journal back in between, [`crate::writeback`]); the other purges
    /// tombstones older than `tombstone_grace`. Apart, because a purge
    /// scans the whole store: on the syncing thread it held back the
    /// periodic fsync for as long as the scan took, and with it the bound
    /// on what a crash may lose.
    pub fn start_maintenance(self: &Arc<Self>, tombstone_grace: Duration) {
        if let SyncPolicy::IntervalMs(n) = self.sync {
            let every = Duration::from_millis(n);
            let (mut since_sync, mut since_writeback) = (Duration::ZERO, Duration::ZERO);
            self.every_tick("kv-sync", move |engine| {
                since_sync += MAINTENANCE_TICK;
                since_writeback += MAINTENANCE_TICK;
                if every > WRITEBACK_EVERY && since_writeback >= WRITEBACK_EVERY {
                    since_writeback = Duration::ZERO;
                    if let Err(e) = writeback::sync_journal_files(&engine.dir) {
                        tracing::debug!(error = %e, "kv: journal writeback failed");
                    }
                }
                if since_sync >= every {
                    since_sync = Duration::ZERO;
                    if let Err(e) = engine.db.persist(PersistMode::SyncData) {
                        tracing::error!(error = %e, "kv: periodic fsync failed");
                    }
                }
            });
        }
        let purge_every = (tombstone_grace / 2).clamp(MAINTENANCE_TICK, MAX_PURGE_INTERVAL);
        // The first pass comes within FIRST_PURGE_AFTER of the start, not a
        // whole interval later: a node restarted more often than once a
        // day would otherwise never run one.
        let mut since_purge = purge_every.saturating_sub(FIRST_PURGE_AFTER);
        let cutoff = move || {
            let grace = u64::try_from(tombstone_grace.as_nanos()).unwrap_or(u64::MAX);
            now_ns().saturating_sub(grace)
        };
        self.dead.set_cutoff(cutoff());
        self.every_tick("kv-purge", move |engine| {
            // Compactions starting from now purge what died before this.
            engine.dead.set_cutoff(cutoff());
            since_purge += MAINTENANCE_TICK;
            if since_purge < purge_every {
                return;
            }
            since_purge = Duration::ZERO;
            match engine.purge(cutoff()) {
                Ok(0) => {}
                Ok(n) => tracing::debug!(purged = n, "kv: dead records purged"),
                Err(e) => tracing::error!(error = %e, "kv: tombstone purge failed"),
            }
        });
    }

    /// Runs `tick` on a thread named `name` every [`MAINTENANCE_TICK`]
    /// until the engine is dropped.
    fn every_tick(self: &Arc<Self>, name: &str, mut tick: impl FnMut(&Engine) + Send + 'static) {
        let weak = Arc::downgrade(self);
        let stop = self.stop.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(MAINTENANCE_TICK);
                    let Some(engine) = weak.upgrade() else { return };
                    tick(&engine);
                }
            })
            .expect("spawning a kv maintenance thread");
    }

    fn stripe(&self, key: &[u8]) -> &Mutex<()> {
        self.stripe_of_hash(key_hash(key))
    }

    fn stripe_of_hash(&self, hash: u64) -> &Mutex<()> {
        &self.stripes[stripe_of(hash)]
    }

    /// The lock of the hint stored under `hint_key`.
    fn hint_stripe(&self, hint_key: &[u8]) -> &Mutex<()> {
        &self.hint_stripes[stripe_of(key_hash(hint_key))]
    }

    /// The stored version of `key` (value or tombstone), if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Record>, KvError> {
        match self.data.get(key)? {
            // The engine's buffer is shared, not copied: a write's
            // last-write-wins check reads only the header.
            Some(v) => Ok(Some(Record::decode(Bytes::from_owner(v))?)),
            None => Ok(None),
        }
    }

    /// Stores `record` unless the stored version wins over it
    /// (last-write-wins); returns whether it was stored. Answers after the
    /// write is in the journal as far as `[kv] sync` promises.
    pub fn apply(&self, key: &[u8], record: &Record) -> Result<bool, KvError> {
        let stored = self.apply_unsynced(key, record)?;
        if stored && self.sync == SyncPolicy::Always {
            self.db.persist(PersistMode::SyncData)?;
        }
        Ok(stored)
    }

    /// [`Engine::apply`] for async callers, without a thread hand-off: the
    /// record joins a write group ([`crate::write_group`]) and goes into the
    /// journal on a worker thread with the writes gathered meanwhile (one
    /// buffered journal write for all), and under `sync = "always"` the call
    /// then awaits the group commit ([`crate::commit`]) — one fsync shared
    /// with every write made meanwhile — instead of fsyncing alone.
    pub async fn apply_committed(
        self: &Arc<Self>,
        key: Bytes,
        record: Record,
    ) -> Result<bool, KvError> {
        let stored = WriteGroups::apply(self, key, record).await?;
        if let (true, Some(gc)) = (stored, &self.group_commit) {
            gc.commit().await?;
        }
        Ok(stored)
    }

    /// Waits until every write made so far is as durable as `[kv] sync`
    /// promises: the group commit under `always`, nothing otherwise.
    pub async fn commit(&self) -> Result<(), KvError> {
        let r = match &self.group_commit {
            Some(gc) => gc.commit().await,
            None => Ok(()),
        };
        self.noted(r)
    }

    /// Makes every journal write on the calling async thread, even while
    /// another one is in progress (`[kv] inline_writes`; off by default).
    pub fn with_inline_writes(mut self, on: bool) -> Self {
        self.inline_writes = on;
        self
    }

    /// Makes every local read on the calling async thread, even while
    /// another storage call is in progress (`[kv] inline_reads`; off by
    /// default).
    pub fn with_inline_reads(mut self, on: bool) -> Self {
        self.inline_reads = on;
        self
    }

    /// Runs the journal write `write` on this (async) thread (`Ok`), or
    /// gives it back (`Err`) for the caller to hand to the blocking pool
    /// when another async worker is in a storage call: fjall may hold the
    /// journal lock across a flush's fsync, and at most one worker should
    /// wait there ([`crate::storage_slot`]).
    pub fn try_write_here<T, F: FnOnce() -> T>(&self, write: F) -> Result<T, F> {
        if self.inline_writes {
            return Ok(write());
        }
        self.storage_slot.try_write(write)
    }

    /// Like [`Engine::try_write_here`], for a read: lsm-tree holds the
    /// version lock every read takes across the fsync of a new version
    /// file (after each flush and compaction).
    pub fn try_read_here<T, F: FnOnce() -> T>(&self, read: F) -> Result<T, F> {
        if self.inline_reads {
            return Ok(read());
        }
        self.storage_slot.try_read(read)
    }

    /// The slot of the async worker inside a storage call
    /// ([`crate::storage_slot`]).
    pub fn storage_slot(&self) -> &StorageSlot {
        &self.storage_slot
    }

    /// The groups client writes are gathered into ([`crate::write_group`]).
    pub fn write_groups(&self) -> &WriteGroups {
        &self.groups
    }

    /// What was purged of the records dead past the grace period.
    pub fn dead_records(&self) -> &DeadRecords {
        &self.dead
    }

    /// Whether a write failed because the database is poisoned: no write
    /// succeeds any more until the process is restarted (`/readyz` says so).
    pub fn storage_failed(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }

    /// Passes `r` through, remembering a `Poisoned` failure.
    fn noted<T>(&self, r: Result<T, KvError>) -> Result<T, KvError> {
        if let Err(KvError::Storage(fjall::Error::Poisoned)) = &r {
            if !self.poisoned.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "kv: the storage engine refuses every write after a failed one \
                     (full disk or I/O error); restart the node once the disk is fixed"
                );
            }
        }
        r
    }

    /// Last-write-wins insert into the journal and memtable, no fsync
    /// (callers then [`Engine::commit`]).
    pub fn apply_unsynced(&self, key: &[u8], record: &Record) -> Result<bool, KvError> {
        self.noted(self.apply_unsynced_inner(key, record))
    }

    fn apply_unsynced_inner(&self, key: &[u8], record: &Record) -> Result<bool, KvError> {
        let hash = key_hash(key);
        let _guard = self.stripe_of_hash(hash).lock();
        let newer = self.supersedes_stored(hash, key, record)?;
        if newer {
            self.bounds.cover(&self.meta, record.timestamp)?;
            self.data.insert(key, record.encode().as_ref())?;
            self.bounds.note(hash, record.timestamp);
        }
        Ok(newer)
    }

    /// Whether `record` wins over the stored version of `key` (or there is
    /// none): read only when the stamp bounds cannot tell. Callers hold the
    /// key's stripe.
    fn supersedes_stored(&self, hash: u64, key: &[u8], record: &Record) -> Result<bool, KvError> {
        if self.bounds.newer_than_stored(hash, record.timestamp) {
            return Ok(true);
        }
        Ok(match self.get(key)? {
            Some(current) => record.supersedes(&current),
            None => true,
        })
    }

    /// [`Engine::apply`] for many records, with one fsync at the end under
    /// `sync = "always"` (anti-entropy's batches). Returns, per record,
    /// whether it was stored.
    pub fn apply_many(&self, records: &[(Bytes, Record)]) -> Result<Vec<bool>, KvError> {
        let stored = self.apply_many_unsynced(records)?;
        if self.sync == SyncPolicy::Always && stored.contains(&true) {
            self.noted(
                self.db
                    .persist(PersistMode::SyncData)
                    .map_err(KvError::from),
            )?;
        }
        Ok(stored)
    }

    /// Last-write-wins for many records as one journal write (one write
    /// batch: one `write(2)` instead of one per record), no fsync (callers
    /// then [`Engine::commit`]). Returns, per record, whether it was stored,
    /// as if the records had been applied one after another: a key given
    /// twice is written once, with the winner.
    pub fn apply_many_unsynced(&self, records: &[(Bytes, Record)]) -> Result<Vec<bool>, KvError> {
        self.noted(self.apply_many_inner(records))
    }

    fn apply_many_inner(&self, records: &[(Bytes, Record)]) -> Result<Vec<bool>, KvError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        // Every stripe the records need, taken in ascending order: single-key
        // writers hold one stripe at a time, so no two lockers can wait on
        // each other.
        let hashes: Vec<u64> = records.iter().map(|(k, _)| key_hash(k)).collect();
        let mut stripes: Vec<usize> = hashes.iter().map(|&h| stripe_of(h)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _guards: Vec<_> = stripes.iter().map(|&i| self.stripes[i].lock()).collect();
        let mut stored = Vec::with_capacity(records.len());
        // The record each key will hold once the batch is written, so a key
        // given twice compares with its first record, not the stored one.
        let mut winners: HashMap<&[u8], (u64, &Record)> = HashMap::with_capacity(records.len());
        for ((key, record), &hash) in records.iter().zip(&hashes) {
            let newer = match winners.get(key.as_ref()) {
                Some((_, current)) => record.supersedes(current),
                None => self.supersedes_stored(hash, key, record)?,
            };
            if newer {
                winners.insert(key.as_ref(), (hash, record));
            }
            stored.push(newer);
        }
        if let Some(newest) = winners.values().map(|(_, r)| r.timestamp).max() {
            self.bounds.cover(&self.meta, newest)?;
            let mut batch = self.db.batch();
            for (key, (_, record)) in &winners {
                batch.insert(&self.data, *key, record.encode().as_ref());
            }
            batch.commit()?;
            for (hash, record) in winners.values() {
                self.bounds.note(*hash, record.timestamp);
            }
        }
        Ok(stored)
    }

    /// Live entries (tombstones and expired values skipped) with
    /// `start <= key < end`, in key order, read lazily from a snapshot.
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<(Bytes, Bytes), KvError>> + Send + 'static {
        let upper = match end {
            Some(e) => Bound::Excluded(e.to_vec()),
            None => Bound::Unbounded,
        };
        let now = now_ns();
        self.data
            .range::<Vec<u8>, _>((Bound::Included(start.to_vec()), upper))
            .filter_map(move |guard| {
                let decoded = guard
                    .into_inner()
                    .map_err(KvError::from)
                    .and_then(|(k, v)| {
                        let r = Record::decode(Bytes::copy_from_slice(&v))?;
                        Ok((Bytes::copy_from_slice(&k), r))
                    });
                match decoded {
                    Ok((_, r)) if r.is_dead(now) => None,
                    Ok((k, r)) => Some(Ok((k, r.value))),
                    Err(e) => Some(Err(e)),
                }
            })
    }

    /// Every stored record, tombstones and expired values included, in key
    /// order, read lazily from a snapshot (anti-entropy's scan).
    pub fn records(
        &self,
    ) -> impl Iterator<Item = Result<(Bytes, Record), KvError>> + Send + 'static {
        // The engine's buffers are shared, not copied: a scan hashes or
        // re-encodes each record and lets it go, so copying every value
        // (the whole store, per scan) bought nothing but memory traffic.
        self.data.iter().map(|guard| {
            let (k, v) = guard.into_inner()?;
            let r = Record::decode(Bytes::from_owner(v))?;
            Ok((Bytes::from_owner(k), r))
        })
    }

    /// Removes tombstones stamped, and values expired, before `cutoff_ns`;
    /// returns how many.
    pub fn purge(&self, cutoff_ns: u64) -> Result<usize, KvError> {
        let mut purged = 0;
        for guard in self.data.iter() {
            let (k, v) = guard.into_inner()?;
            let r = Record::decode(Bytes::copy_from_slice(&v))?;
            if r.dead_since().is_none_or(|t| t >= cutoff_ns) {
                continue;
            }
            // Re-check under the key's lock: a newer write may have landed
            // since the snapshot was read, and must not be removed.
            let _guard = self.stripe(&k).lock();
            if self.get(&k)?.is_some_and(|now| now == r) {
                self.data.remove(k)?;
                purged += 1;
            }
        }
        self.dead.purged_by_scan(purged as u64);
        Ok(purged)
    }

    /// Pushes everything written so far to disk (`fdatasync`).
    pub fn persist(&self) -> Result<(), KvError> {
        Ok(self.db.persist(PersistMode::SyncData)?)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The hash that places `key` in a lock stripe and a stamp-bound bucket.
fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The lock stripe of a key of hash `hash`.
fn stripe_of(hash: u64) -> usize {
    hash as usize % LOCK_STRIPES
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ts: u64, s: &'static str) -> Record {
        Record::value(ts, Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn a_spare_storage_worker_exists_even_on_small_machines() {
        // Worker 0 leaves compactions to the others: with fewer than three
        // workers, one compaction at a time leaves a request bouncing.
        assert_eq!(storage_workers(1), 3);
        assert_eq!(storage_workers(2), 3);
        assert_eq!(storage_workers(3), 3);
        assert_eq!(storage_workers(4), 4);
        assert_eq!(storage_workers(64), 4);
    }

    #[test]
    fn a_data_dir_another_engine_holds_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Engine::open(dir.path(), SyncPolicy::None).unwrap();
        let err = Engine::open(dir.path(), SyncPolicy::None)
            .err()
            .expect("the second open is refused")
            .to_string();
        assert!(
            err.starts_with(&format!("[kv] data_dir {} is in use", dir.path().display())),
            "{err}"
        );
    }

    #[test]
    fn a_hint_held_up_in_storage_does_not_hold_up_a_client_write() {
        let dir = tempfile::tempdir().unwrap();
        let e = Arc::new(Engine::open(dir.path(), SyncPolicy::None).unwrap());
        let (node, hinted) = ("http://peer:8080", &b"hinted"[..]);
        // A data key whose lock stripe number is the held hint's: with one
        // set of locks for both keyspaces this write would wait.
        let hint_stripe = stripe_of(key_hash(&hint_store::hint_key(node, hinted)));
        let key = (0u32..)
            .map(|i| format!("k{i}").into_bytes())
            .find(|k| stripe_of(key_hash(k)) == hint_stripe)
            .unwrap();
        let _held = e.hold_hint(node, hinted);
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = e.clone();
        std::thread::spawn(move || tx.send(writer.apply(&key, &v(1, "x")).unwrap()));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Ok(true),
            "the client write finished while the hint's lock was held"
        );
    }

    #[test]
    fn last_write_wins_whatever_the_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
        assert!(e.apply(b"k", &v(2, "new")).unwrap());
        assert!(!e.apply(b"k", &v(1, "old")).unwrap());
        assert_eq!(e.get(b"k").unwrap().unwrap().value, "new");
        assert!(
            e.apply(b"k", &Record::tombstone(2)).unwrap(),
            "a tombstone wins a tie"
        );
        assert!(!e.apply(b"k", &v(2, "zzz")).unwrap());
        assert!(e.get(b"k").unwrap().unwrap().tombstone);
    }

    /// A few keys and small timestamps, so that batches repeat keys and
    /// tie on stamps.
    fn writes() -> impl proptest::strategy::Strategy<Value = Vec<(Bytes, Record)>> {
        use proptest::prelude::*;
        let record = (0u64..4, any::<bool>(), 0u8..3).prop_map(|(ts, dead, v)| {
            if dead {
                Record::tombstone(ts)
            } else {
                Record::value(ts, Bytes::from(vec![b'a' + v]))
            }
        });
        let key = (0u8..4).prop_map(|k| Bytes::from(vec![b'k', k]));
        proptest::collection::vec((key, record), 0..24)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// One journal write for a batch answers and stores exactly what
        /// applying its records one by one would.
        #[test]
        fn a_batch_stores_what_one_write_after_another_would(
            before in writes(),
            batch in writes(),
        ) {
            let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let one_by_one = Engine::open(d1.path(), SyncPolicy::None).unwrap();
            let batched = Engine::open(d2.path(), SyncPolicy::None).unwrap();
            for (k, r) in &before {
                one_by_one.apply(k, r).unwrap();
                batched.apply(k, r).unwrap();
            }
            let expected: Vec<bool> =
                batch.iter().map(|(k, r)| one_by_one.apply(k, r).unwrap()).collect();
            proptest::prop_assert_eq!(batched.apply_many_unsynced(&batch).unwrap(), expected);
            for k in 0u8..4 {
                let key = [b'k', k];
                proptest::prop_assert_eq!(batched.get(&key).unwrap(), one_by_one.get(&key).unwrap());
            }
        }
    }

    /// A write stamped older than what a key holds loses after a restart
    /// too: the stamp bound on disk covers what was stored before.
    #[test]
    fn last_write_wins_against_what_was_stored_before_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
            assert!(e.apply(b"k", &v(5_000_000_000, "new")).unwrap());
        }
        let e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
        let on_disk = e.meta.get(crate::stamp_bound::BOUND_KEY).unwrap().unwrap();
        assert!(
            u64::from_be_bytes(on_disk.as_ref().try_into().unwrap()) >= 5_000_000_000,
            "the bound was written, not found by a scan"
        );
        assert!(!e.apply(b"k", &v(7, "old")).unwrap());
        assert_eq!(e.get(b"k").unwrap().unwrap().value, "new");
    }

    /// A data directory written before the bound existed (no bound on
    /// disk) is scanned on open for its highest stamp.
    #[test]
    fn a_directory_without_a_stamp_bound_is_scanned_for_one() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
            assert!(e.apply(b"k", &v(5_000_000_000, "new")).unwrap());
            e.meta.remove(crate::stamp_bound::BOUND_KEY).unwrap();
            e.persist().unwrap();
        }
        let e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
        assert!(e.meta.get(crate::stamp_bound::BOUND_KEY).unwrap().is_none());
        assert!(!e.apply(b"k", &v(7, "old")).unwrap());
        assert_eq!(e.get(b"k").unwrap().unwrap().value, "new");
    }

    /// One step of [`last_write_wins_across_restarts_matches_a_model`].
    #[derive(Debug, Clone)]
    enum Step {
        Write(Bytes, Record),
        Batch(Vec<(Bytes, Record)>),
        Reopen,
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
        use proptest::prelude::*;
        // Stamps around the bound's one-second headroom and across it, so
        // writes land under, at and over the bound on disk.
        let stamp = (0u64..6, 0u64..3).prop_map(|(s, n)| s * 700_000_000 + n);
        let record = (stamp, any::<bool>(), 0u8..3).prop_map(|(ts, dead, v)| {
            if dead {
                Record::tombstone(ts)
            } else {
                Record::value(ts, Bytes::from(vec![b'a' + v]))
            }
        });
        let write = ((0u8..4).prop_map(|k| Bytes::from(vec![b'k', k])), record);
        let step = prop_oneof![
            6 => write.clone().prop_map(|(k, r)| Step::Write(k, r)),
            2 => proptest::collection::vec(write, 0..6).prop_map(Step::Batch),
            1 => Just(Step::Reopen),
        ];
        proptest::collection::vec(step, 0..40)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

        /// Writes skipped past the stored-version read by the stamp bounds
        /// answer and store exactly what last-write-wins over every write
        /// ever made says, across restarts.
        #[test]
        fn last_write_wins_across_restarts_matches_a_model(steps in steps()) {
            let dir = tempfile::tempdir().unwrap();
            let mut e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
            let mut model: HashMap<Bytes, Record> = HashMap::new();
            let mut model_apply = |k: &Bytes, r: &Record| -> bool {
                let newer = model.get(k).is_none_or(|cur| r.supersedes(cur));
                if newer {
                    model.insert(k.clone(), r.clone());
                }
                newer
            };
            for step in &steps {
                match step {
                    Step::Write(k, r) => {
                        proptest::prop_assert_eq!(e.apply(k, r).unwrap(), model_apply(k, r));
                    }
                    Step::Batch(b) => {
                        let expected: Vec<bool> = b.iter().map(|(k, r)| model_apply(k, r)).collect();
                        proptest::prop_assert_eq!(e.apply_many(b).unwrap(), expected);
                    }
                    Step::Reopen => {
                        drop(e);
                        e = Engine::open(dir.path(), SyncPolicy::Always).unwrap();
                    }
                }
            }
            for k in 0u8..4 {
                let key = Bytes::from(vec![b'k', k]);
                let stored = e.get(&key).unwrap();
                proptest::prop_assert_eq!(stored.as_ref(), model.get(&key));
            }
        }
    }

    #[test]
    fn data_survives_reopening_and_a_deleted_directory_is_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        {
            let e = Engine::open(&path, SyncPolicy::IntervalMs(1000)).unwrap();
            e.apply(b"a", &v(1, "1")).unwrap();
        }
        let e = Engine::open(&path, SyncPolicy::IntervalMs(1000)).unwrap();
        assert_eq!(e.get(b"a").unwrap().unwrap().value, "1");
        drop(e);
        std::fs::remove_dir_all(&path).unwrap();
        let e = Engine::open(&path, SyncPolicy::None).unwrap();
        assert_eq!(e.get(b"a").unwrap(), None);
    }

    #[test]
    fn range_is_sorted_half_open_and_skips_tombstones_and_expired_values() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), SyncPolicy::None).unwrap();
        for k in ["b", "a", "d", "c"] {
            e.apply(k.as_bytes(), &v(1, k)).unwrap();
        }
        e.apply(b"c", &Record::tombstone(2)).unwrap();
        e.apply(b"bb", &v(2, "gone").with_expiry(3)).unwrap();
        e.apply(b"bc", &v(2, "later").with_expiry(u64::MAX))
            .unwrap();
        let got: Vec<_> = e.range(b"a", Some(b"d")).map(|r| r.unwrap().0).collect();
        assert_eq!(got, vec!["a", "b", "bc"]);
        let all: Vec<_> = e.range(b"b", None).map(|r| r.unwrap().0).collect();
        assert_eq!(all, vec!["b", "bc", "d"]);
        assert_eq!(e.records().count(), 6, "the scan sees every record");
    }

    #[test]
    fn compactions_purge_records_dead_before_the_cutoff_and_nothing_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), SyncPolicy::None).unwrap();
        e.apply(b"old", &Record::tombstone(10)).unwrap();
        e.apply(b"new", &Record::tombstone(100)).unwrap();
        e.apply(b"val", &v(5, "x")).unwrap();
        e.apply(b"ttl-old", &v(5, "x").with_expiry(40)).unwrap();
        e.apply(b"ttl-new", &v(5, "x").with_expiry(60)).unwrap();
        e.data.rotate_memtable_and_wait().unwrap();
        // No cutoff yet (the maintenance thread sets it): nothing goes.
        e.data.major_compact().unwrap();
        assert_eq!(e.dead_records().by_compaction(), 0);
        assert!(e.get(b"old").unwrap().is_some());

        e.dead.set_cutoff(50);
        e.data.major_compact().unwrap();
        assert_eq!(e.dead_records().by_compaction(), 2);
        assert_eq!(e.dead_records().by_scan(), 0);
        for gone in [&b"old"[..], b"ttl-old"] {
            assert_eq!(e.get(gone).unwrap(), None, "{gone:?}");
        }
        assert_eq!(e.get(b"new").unwrap(), Some(Record::tombstone(100)));
        assert_eq!(e.get(b"val").unwrap(), Some(v(5, "x")));
        assert!(e.get(b"ttl-new").unwrap().is_some());
        // Nothing left for the pass to find.
        assert_eq!(e.purge(50).unwrap(), 0);
    }

    #[test]
    fn an_older_version_under_a_purged_tombstone_stays_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), SyncPolicy::None).unwrap();
        // The older value in a table of its own, kept through the
        // compaction by a snapshot (without one the compaction drops it as
        // garbage first, and a filter dropping the tombstone outright,
        // `Verdict::Destroy`, would pass too: checked).
        e.apply(b"k", &v(1, "old value")).unwrap();
        e.data.rotate_memtable_and_wait().unwrap();
        let snapshot = e.db.snapshot();
        e.apply(b"k", &Record::tombstone(10)).unwrap();
        e.data.rotate_memtable_and_wait().unwrap();
        e.dead.set_cutoff(50);
        e.data.major_compact().unwrap();
        assert_eq!(e.dead_records().by_compaction(), 1);
        assert_eq!(e.get(b"k").unwrap(), None, "the older value came back");
        drop(snapshot);
    }

    #[test]
    fn only_records_dead_before_the_cutoff_are_purged() {
        let dir = tempfile::tempdir().unwrap();
        let e = Arc::new(Engine::open(dir.path(), SyncPolicy::None).unwrap());
        e.apply(b"old", &Record::tombstone(10)).unwrap();
        e.apply(b"new", &Record::tombstone(100)).unwrap();
        e.apply(b"val", &v(5, "x")).unwrap();
        e.apply(b"ttl-old", &v(5, "x").with_expiry(40)).unwrap();
        e.apply(b"ttl-new", &v(5, "x").with_expiry(60)).unwrap();
        assert_eq!(e.purge(50).unwrap(), 2);
        assert_eq!(e.get(b"old").unwrap(), None);
        assert_eq!(e.get(b"ttl-old").unwrap(), None);
        assert!(e.get(b"ttl-new").unwrap().is_some());
        assert!(e.get(b"new").unwrap().is_some());
        assert!(e.get(b"val").unwrap().is_some());

        e.apply(b"soon", &Record::tombstone(now_ns())).unwrap();
        e.start_maintenance(Duration::from_millis(100));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while e.get(b"soon").unwrap().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "maintenance never purged"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
