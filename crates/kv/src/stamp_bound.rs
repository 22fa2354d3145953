//! Upper bounds on the timestamps the engine holds, so that a write can
//! skip reading the stored version of its key when it is certainly newer.
//!
//! Last-write-wins needs the stored version's timestamp before every write,
//! and that read (a memtable and table lookup, often a block load) was
//! ~12 % of a node's CPU per PUT. Writes are stamped with the wall clock,
//! so nearly every write is newer than anything stored under its key; a
//! bound proves it without the read:
//!
//! - one bucket per hash slot holds the highest timestamp written to any key
//!   of that slot since the engine opened, starting at the bound on disk;
//!   a write stamped above its key's bucket cannot lose to what is stored;
//! - the bound on disk (a key in the `meta` keyspace) is above every stored
//!   timestamp. It is raised, with some headroom, before a write that would
//!   pass it, in the journal ahead of that write, so after a crash whatever
//!   survived of the data is still under the surviving bound.
//!
//! A data directory from before the bound existed is scanned once on open.

use std::sync::atomic::{AtomicU64, Ordering};

use fjall::Keyspace;
use parking_lot::Mutex;

use crate::error::KvError;
use crate::record::Record;

/// Hash slots with a bound of their own (8 bytes each: 512 KiB). Two keys
/// sharing a slot only cost the later-stamped-first one a read.
const BUCKETS: usize = 1 << 16;
/// How far above a write's stamp the bound on disk is raised, so that it
/// is written about once per this much wall-clock time under steady load.
const DISK_HEADROOM_NS: u64 = 1_000_000_000;
/// The bound's key in the `meta` keyspace.
pub(crate) const BOUND_KEY: &[u8] = b"stamp_bound";

/// The bounds of one engine.
pub struct StampBounds {
    buckets: Box<[AtomicU64]>,
    /// The bound on disk; writes to it are serialised so it only grows.
    on_disk: Mutex<u64>,
    /// A copy of `on_disk` for the lock-free check on every write.
    on_disk_seen: AtomicU64,
}

impl StampBounds {
    /// Reads the bound from `meta`, or, when it was never written, derives
    /// it from the highest timestamp in `data` (a one-time scan).
    pub fn load(meta: &Keyspace, data: &Keyspace) -> Result<Self, KvError> {
        let on_disk = match meta.get(BOUND_KEY)? {
            Some(v) => decode(&v)?,
            None => scan(data)?,
        };
        Ok(StampBounds {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(on_disk)).collect(),
            on_disk: Mutex::new(on_disk),
            on_disk_seen: AtomicU64::new(on_disk),
        })
    }

    /// True when nothing stored under a key of hash `hash` can be stamped
    /// at or after `timestamp`, so a record with that stamp wins without
    /// reading. Callers hold the key's stripe.
    pub fn newer_than_stored(&self, hash: u64, timestamp: u64) -> bool {
        timestamp > self.bucket(hash).load(Ordering::Acquire)
    }

    /// Makes sure the bound on disk is above `timestamp`, writing it to
    /// `meta` (ahead of the record in the journal) when it is not. Call
    /// before writing a record with that stamp.
    pub fn cover(&self, meta: &Keyspace, timestamp: u64) -> Result<(), KvError> {
        if timestamp <= self.on_disk_seen.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut on_disk = self.on_disk.lock();
        if timestamp <= *on_disk {
            return Ok(());
        }
        let raised = timestamp.saturating_add(DISK_HEADROOM_NS);
        meta.insert(BOUND_KEY, raised.to_be_bytes())?;
        *on_disk = raised;
        self.on_disk_seen.store(raised, Ordering::Release);
        Ok(())
    }

    /// Notes that a record stamped `timestamp` was written under a key of
    /// hash `hash`. Call before letting go of the key's stripe.
    pub fn note(&self, hash: u64, timestamp: u64) {
        self.bucket(hash).fetch_max(timestamp, Ordering::AcqRel);
    }

    fn bucket(&self, hash: u64) -> &AtomicU64 {
        // The high bits: the stripe takes the low ones.
        &self.buckets[(hash >> 48) as usize % BUCKETS]
    }
}

fn decode(v: &[u8]) -> Result<u64, KvError> {
    let bytes: [u8; 8] = v
        .try_into()
        .map_err(|_| KvError::Metadata(format!("stamp bound of {} bytes, not 8", v.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

/// The highest timestamp stored in `data` (0 when empty).
fn scan(data: &Keyspace) -> Result<u64, KvError> {
    let started = std::time::Instant::now();
    let mut highest = 0;
    let mut records = 0u64;
    for guard in data.iter() {
        let (_, v) = guard.into_inner()?;
        highest = highest.max(Record::decode(bytes::Bytes::copy_from_slice(&v))?.timestamp);
        records += 1;
    }
    if records > 0 {
        tracing::info!(
            records,
            took_ms = started.elapsed().as_millis() as u64,
            "kv: highest stored timestamp found by a one-time scan (data directory from an older version)"
        );
    }
    Ok(highest)
}
