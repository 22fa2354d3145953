//! The bounds on one replica's pending hints — keys and bytes — and the
//! totals they are checked against.
//!
//! Two bounds, because either alone bounds nothing useful: a key count
//! says nothing about disk when a value may be as large as `[http]
//! max_body_bytes` (100,000 hints of 4 MiB are 400 GB), and a byte bound
//! alone would let tiny writes pile up keys the replay must walk one
//! request at a time.
//!
//! A node's totals ([`HintLedger`]) are kept equal to its hints on disk
//! without scanning it: they are counted once at start-up, and every
//! change after that is made under the ledger's lock and reported to it
//! with the bytes the engine says it added or removed
//! ([`crate::engine::HintChange`]).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};
use prometheus_client::metrics::gauge::Gauge;

use crate::engine::{HintChange, HintTotals};

/// The most one replica's pending hints may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintBounds {
    /// Keys with a hint.
    pub keys: usize,
    /// Their bytes together ([`crate::engine::hint_bytes`]).
    pub bytes: u64,
}

/// The bound a hint would cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// [`HintBounds::keys`].
    Keys,
    /// [`HintBounds::bytes`].
    Bytes,
}

impl Exceeded {
    /// `"keys"` or `"bytes"`, as logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Exceeded::Keys => "keys",
            Exceeded::Bytes => "bytes",
        }
    }
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl HintBounds {
    /// Whether `change` may be made to a node's hints totalling `totals`:
    /// each total it makes grow must stay within its bound. A change that
    /// grows neither — a newer hint, no larger, replacing the one kept for
    /// its key — always may, even past a bound lowered since: refusing it
    /// would leave the older hint to be delivered instead.
    pub fn admits(&self, totals: HintTotals, change: HintChange) -> Result<(), Exceeded> {
        if change.replaced.is_none() && totals.keys >= self.keys {
            return Err(Exceeded::Keys);
        }
        let replaced = change.replaced.unwrap_or(0);
        if change.bytes > replaced
            && totals
                .bytes
                .saturating_sub(replaced)
                .saturating_add(change.bytes)
                > self.bytes
        {
            return Err(Exceeded::Bytes);
        }
        Ok(())
    }
}

/// One node's hint totals, kept equal to its hints on disk: every change
/// to them on disk is made holding [`HintLedger::lock`] and reported to
/// it, so a hint is always checked against totals that count every other
/// one.
pub struct HintLedger {
    totals: Mutex<HintTotals>,
    /// `totals.keys`, read without the lock: the replay task polls it on
    /// the async runtime, where waiting for a disk write made under the
    /// lock would hold up a worker.
    keys: AtomicUsize,
    /// Every node's keys with a hint, together (`/metrics`).
    keys_gauge: Gauge,
    /// Every node's hint bytes, together (`/metrics`).
    bytes_gauge: Gauge,
}

impl HintLedger {
    /// A ledger for a node with `on_disk` hints, adding them to the
    /// gauges every node's ledger shares.
    pub fn new(on_disk: HintTotals, keys_gauge: Gauge, bytes_gauge: Gauge) -> Self {
        keys_gauge.inc_by(on_disk.keys as i64);
        bytes_gauge.inc_by(on_disk.bytes as i64);
        HintLedger {
            totals: Mutex::new(on_disk),
            keys: AtomicUsize::new(on_disk.keys),
            keys_gauge,
            bytes_gauge,
        }
    }

    /// Keys with a hint (without waiting for the lock).
    pub fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// The totals, locked: hold this across a change to the node's hints
    /// on disk and report it (blocking: call off the runtime).
    pub fn lock(&self) -> LedgerGuard<'_> {
        LedgerGuard {
            ledger: self,
            totals: self.totals.lock(),
        }
    }
}

/// A [`HintLedger`] locked.
pub struct LedgerGuard<'a> {
    ledger: &'a HintLedger,
    totals: MutexGuard<'a, HintTotals>,
}

impl LedgerGuard<'_> {
    /// The node's totals.
    pub fn totals(&self) -> HintTotals {
        *self.totals
    }

    /// A hint was written, making `change`.
    pub fn stored(&mut self, change: HintChange) {
        let mut t = *self.totals;
        match change.replaced {
            Some(old) => t.bytes = t.bytes.saturating_sub(old),
            None => t.keys += 1,
        }
        t.bytes = t.bytes.saturating_add(change.bytes);
        self.set(t);
    }

    /// A hint of `bytes` was removed.
    pub fn removed(&mut self, bytes: u64) {
        // Saturating: a count that failed at start-up may have counted
        // less than the disk holds.
        let t = HintTotals {
            keys: self.totals.keys.saturating_sub(1),
            bytes: self.totals.bytes.saturating_sub(bytes),
        };
        self.set(t);
    }

    /// The node's hints were counted on disk again.
    pub fn recounted(&mut self, on_disk: HintTotals) {
        self.set(on_disk);
    }

    /// Sets the totals, moving the shared gauges by the difference.
    fn set(&mut self, new: HintTotals) {
        let old = *self.totals;
        self.ledger
            .keys_gauge
            .inc_by(new.keys as i64 - old.keys as i64);
        self.ledger
            .bytes_gauge
            .inc_by(new.bytes as i64 - old.bytes as i64);
        self.ledger.keys.store(new.keys, Ordering::Relaxed);
        *self.totals = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: HintBounds = HintBounds {
        keys: 3,
        bytes: 1000,
    };

    fn totals(keys: usize, bytes: u64) -> HintTotals {
        HintTotals { keys, bytes }
    }

    fn new_hint(bytes: u64) -> HintChange {
        HintChange {
            bytes,
            replaced: None,
        }
    }

    fn replacing(bytes: u64, old: u64) -> HintChange {
        HintChange {
            bytes,
            replaced: Some(old),
        }
    }

    #[test]
    fn a_new_hint_must_fit_both_bounds() {
        assert_eq!(BOUNDS.admits(totals(0, 0), new_hint(1000)), Ok(()));
        assert_eq!(
            BOUNDS.admits(totals(0, 0), new_hint(1001)),
            Err(Exceeded::Bytes)
        );
        assert_eq!(BOUNDS.admits(totals(2, 900), new_hint(100)), Ok(()));
        assert_eq!(
            BOUNDS.admits(totals(2, 900), new_hint(101)),
            Err(Exceeded::Bytes)
        );
        assert_eq!(
            BOUNDS.admits(totals(3, 10), new_hint(1)),
            Err(Exceeded::Keys)
        );
    }

    #[test]
    fn a_replacement_counts_only_what_it_adds() {
        // At the key bound, a newer hint for a key already hinted takes
        // no new key; at the byte bound, only its growth must fit.
        assert_eq!(BOUNDS.admits(totals(3, 900), replacing(150, 100)), Ok(()));
        assert_eq!(
            BOUNDS.admits(totals(3, 900), replacing(201, 100)),
            Err(Exceeded::Bytes)
        );
        // Past a bound (lowered since the hints were kept): a replacement
        // that grows nothing is still taken, one that grows is not.
        assert_eq!(BOUNDS.admits(totals(5, 5000), replacing(80, 100)), Ok(()));
        assert_eq!(
            BOUNDS.admits(totals(5, 5000), replacing(101, 100)),
            Err(Exceeded::Bytes)
        );
    }

    #[test]
    fn a_zero_byte_bound_keeps_no_hint() {
        let none = HintBounds {
            keys: 100,
            bytes: 0,
        };
        assert_eq!(none.admits(totals(0, 0), new_hint(1)), Err(Exceeded::Bytes));
    }

    #[test]
    fn the_ledger_moves_the_shared_gauges_with_its_totals() {
        let (keys, bytes) = (Gauge::default(), Gauge::default());
        let a = HintLedger::new(totals(2, 300), keys.clone(), bytes.clone());
        let b = HintLedger::new(totals(1, 50), keys.clone(), bytes.clone());
        assert_eq!((keys.get(), bytes.get()), (3, 350));

        a.lock().stored(new_hint(100));
        assert_eq!(a.lock().totals(), totals(3, 400));
        a.lock().stored(replacing(10, 100));
        assert_eq!(a.lock().totals(), totals(3, 310));
        b.lock().removed(50);
        assert_eq!(b.lock().totals(), totals(0, 0));
        assert_eq!((keys.get(), bytes.get()), (3, 310));
        assert_eq!((a.keys(), b.keys()), (3, 0));

        // A removal the totals never counted does not wrap around.
        b.lock().removed(70);
        assert_eq!(b.lock().totals(), totals(0, 0));
        a.lock().recounted(totals(1, 20));
        assert_eq!((keys.get(), bytes.get()), (1, 20));
    }
}
