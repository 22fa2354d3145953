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
//! change after that is reported to the ledger with the bytes the engine
//! says it added or removed ([`crate::engine::HintChange`]) — a write
//! reserved before it is made and settled after, so that no lock on the
//! totals is held while the disk is written.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
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

/// One node's hint totals, kept equal to its hints on disk without
/// holding a lock across the disk: a change reserves what it may add
/// before it is written ([`ChangeGuard::reserve`]) and settles it after
/// ([`Reservation::settle`]), or gives it back when the write fails; a
/// removal is subtracted once made. The lock on the totals is held only
/// for that arithmetic, so a write held up in storage (a write stall)
/// does not hold it: the node's deliveries and removals, and the writes
/// of its other keys, do not wait for the totals meanwhile. (Through
/// [`crate::hints::Hints::keep_soon`] a node's hints are still written one
/// at a time, so its later hints wait for that write's turn all the same:
/// [`crate::hint_gate`].)
///
/// A write is settled while its key's lock is still held
/// ([`crate::engine::Engine::put_hint`]'s `written`), so that a later
/// change of the key, which sees the hint on disk, finds it added to the
/// totals: settled after the lock is released, a removal or replacement
/// of it could subtract its bytes from `settled` before they were added —
/// saturating at zero — and the late settle would then add them for good.
/// A removal is subtracted after the key's lock is released; a write of
/// the key meanwhile is then added before the removal is subtracted, which
/// saturates nothing.
///
/// Two totals, because a change in flight may or may not be on disk yet:
/// `counted` holds every reservation not yet settled as the larger of the
/// node's totals before and after it — so the disk never holds more than
/// `counted`, which the bounds are checked against — and `settled` only
/// the changes known written, which the gauges and [`HintLedger::keys`]
/// show. They are equal whenever no change is in flight.
///
/// A recount ([`HintLedger::recount`]) replaces both with a scan of the
/// disk, which would count a change in flight or not depending on when
/// the scan passes it; so every change holds [`HintLedger::change`]
/// (shared: changes do not wait for each other) from before it touches
/// the disk until it is accounted for, and a recount holds it exclusively
/// (waiting for the changes in flight, and holding back new ones while it
/// scans; a recount is rare: a count at start-up that failed, or totals
/// found wrong).
pub struct HintLedger {
    totals: Mutex<LedgerTotals>,
    /// Shared by a change to the node's hints on disk until it is
    /// accounted for; exclusive for a recount.
    changes: RwLock<()>,
    /// `settled.keys`, read without the lock: the replay task polls it on
    /// the async runtime, and asks the disk only when it says there are
    /// hints (a reserved one may not be written yet).
    keys: AtomicUsize,
    /// Every node's keys with a hint, together (`/metrics`).
    keys_gauge: Gauge,
    /// Every node's hint bytes, together (`/metrics`).
    bytes_gauge: Gauge,
    /// [`HintLedger::pause_next_settle`].
    #[cfg(test)]
    settle_pause: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// A node's totals: see [`HintLedger`].
struct LedgerTotals {
    /// The settled totals plus, for each change in flight, what it may
    /// add: the bounds are checked against these.
    counted: HintTotals,
    /// The changes known written.
    settled: HintTotals,
}

/// Why [`ChangeGuard::reserve`] turned a change down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBound {
    /// The bound it would cross.
    pub bound: Exceeded,
    /// The node's totals it was checked against (changes in flight
    /// included).
    pub totals: HintTotals,
}

impl HintLedger {
    /// A ledger for a node with `on_disk` hints, adding them to the
    /// gauges every node's ledger shares.
    pub fn new(on_disk: HintTotals, keys_gauge: Gauge, bytes_gauge: Gauge) -> Self {
        keys_gauge.inc_by(on_disk.keys as i64);
        bytes_gauge.inc_by(on_disk.bytes as i64);
        HintLedger {
            totals: Mutex::new(LedgerTotals {
                counted: on_disk,
                settled: on_disk,
            }),
            changes: RwLock::new(()),
            keys: AtomicUsize::new(on_disk.keys),
            keys_gauge,
            bytes_gauge,
            #[cfg(test)]
            settle_pause: Mutex::new(None),
        }
    }

    /// Keys with a hint known written (without waiting for any lock).
    pub fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// The totals of the hints known written.
    pub fn totals(&self) -> HintTotals {
        self.totals.lock().settled
    }

    /// Whether a change or a recount of the node's hints holds
    /// [`HintLedger::change`] (for tests: to wait until one is in flight).
    #[cfg(test)]
    pub(crate) fn change_in_flight(&self) -> bool {
        self.changes.is_locked()
    }

    /// Whether a recount has claimed [`HintLedger::recount`]: it holds it,
    /// or waits for the changes in flight (for tests: a recount sets its
    /// claim, then waits for the shared holders to leave).
    #[cfg(test)]
    pub(crate) fn recount_claimed(&self) -> bool {
        self.changes.is_locked_exclusive()
    }

    /// Runs `pause` at the start of the next [`Reservation::settle`] of
    /// this node, before it touches the totals (for tests: to hold a
    /// written hint unsettled).
    #[cfg(test)]
    pub(crate) fn pause_next_settle(&self, pause: impl FnOnce() + Send + 'static) {
        *self.settle_pause.lock() = Some(Box::new(pause));
    }

    /// Leave to change the node's hints on disk: hold it from before the
    /// change reads or writes the disk until it is accounted for. Waits
    /// only for a recount (blocking: call off the runtime).
    pub fn change(&self) -> ChangeGuard<'_> {
        ChangeGuard {
            ledger: self,
            _shared: self.changes.read(),
        }
    }

    /// Leave to count the node's hints on disk again: waits for every
    /// change in flight, and holds back new ones until dropped (blocking:
    /// call off the runtime).
    pub fn recount(&self) -> RecountGuard<'_> {
        RecountGuard {
            ledger: self,
            _exclusive: self.changes.write(),
        }
    }

    /// Sets the settled totals, moving the shared gauges by the
    /// difference.
    fn settle_to(&self, totals: &mut LedgerTotals, new: HintTotals) {
        let old = totals.settled;
        self.keys_gauge.inc_by(new.keys as i64 - old.keys as i64);
        self.bytes_gauge.inc_by(new.bytes as i64 - old.bytes as i64);
        self.keys.store(new.keys, Ordering::Relaxed);
        totals.settled = new;
    }
}

/// A change to a node's hints in progress ([`HintLedger::change`]).
pub struct ChangeGuard<'a> {
    ledger: &'a HintLedger,
    _shared: RwLockReadGuard<'a, ()>,
}

impl ChangeGuard<'_> {
    /// Reserves what `change` may add to the node's totals, if `bounds`
    /// admit it beside every change in flight: a new key, and the bytes
    /// it grows by. What it shrinks by is given back only when it is
    /// settled: until then the disk may still hold the hint it replaces.
    /// Call holding the key's lock, between reading the hint it replaces
    /// and writing it, so that `change.replaced` is what the write
    /// replaces.
    pub fn reserve(
        &self,
        bounds: &HintBounds,
        change: HintChange,
    ) -> Result<Reservation<'_>, OverBound> {
        let mut totals = self.ledger.totals.lock();
        let counted = totals.counted;
        bounds.admits(counted, change).map_err(|bound| OverBound {
            bound,
            totals: counted,
        })?;
        totals.counted = HintTotals {
            keys: counted.keys + usize::from(change.replaced.is_none()),
            bytes: counted.bytes.saturating_add(growth(change)),
        };
        Ok(Reservation {
            ledger: self.ledger,
            change,
            settled: false,
        })
    }

    /// A hint of `bytes` was removed from disk.
    pub fn removed(&self, bytes: u64) {
        let mut totals = self.ledger.totals.lock();
        // Saturating: a count that failed at start-up may have counted
        // less than the disk holds.
        let less = |t: HintTotals| HintTotals {
            keys: t.keys.saturating_sub(1),
            bytes: t.bytes.saturating_sub(bytes),
        };
        totals.counted = less(totals.counted);
        let settled = less(totals.settled);
        self.ledger.settle_to(&mut totals, settled);
    }
}

/// What [`ChangeGuard::reserve`] set aside for one change: settle it once
/// the change is written, before the key's lock is released (see
/// [`HintLedger`]); dropped unsettled (the write failed), it gives back
/// what it reserved.
#[must_use = "dropped unsettled, a reservation is given back"]
pub struct Reservation<'a> {
    ledger: &'a HintLedger,
    change: HintChange,
    settled: bool,
}

impl Reservation<'_> {
    /// The change was written: the node's totals become what it made them,
    /// giving back what it shrank them by.
    pub fn settle(mut self) {
        #[cfg(test)]
        {
            // Taken before it runs: the lock is not held while it pauses.
            let pause = self.ledger.settle_pause.lock().take();
            if let Some(pause) = pause {
                pause();
            }
        }
        self.settled = true;
        let change = self.change;
        let mut totals = self.ledger.totals.lock();
        totals.counted.bytes = totals.counted.bytes.saturating_sub(shrink(change));
        let mut settled = totals.settled;
        match change.replaced {
            Some(old) => settled.bytes = settled.bytes.saturating_sub(old),
            None => settled.keys += 1,
        }
        settled.bytes = settled.bytes.saturating_add(change.bytes);
        self.ledger.settle_to(&mut totals, settled);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut totals = self.ledger.totals.lock();
        let counted = totals.counted;
        totals.counted = HintTotals {
            // Saturating: a removal may have met the key's count first
            // when a failed count at start-up left it short.
            keys: counted
                .keys
                .saturating_sub(usize::from(self.change.replaced.is_none())),
            bytes: counted.bytes.saturating_sub(growth(self.change)),
        };
    }
}

/// Bytes `change` adds to its node's total.
fn growth(change: HintChange) -> u64 {
    change.bytes.saturating_sub(change.replaced.unwrap_or(0))
}

/// Bytes `change` takes from its node's total.
fn shrink(change: HintChange) -> u64 {
    change.replaced.unwrap_or(0).saturating_sub(change.bytes)
}

/// A recount of a node's hints in progress ([`HintLedger::recount`]).
pub struct RecountGuard<'a> {
    ledger: &'a HintLedger,
    _exclusive: RwLockWriteGuard<'a, ()>,
}

impl RecountGuard<'_> {
    /// The node's hints were counted on disk again, with no change in
    /// flight: the totals become what was counted.
    pub fn recounted(&self, on_disk: HintTotals) {
        let mut totals = self.ledger.totals.lock();
        totals.counted = on_disk;
        self.ledger.settle_to(&mut totals, on_disk);
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

    /// `change` written to `ledger` (reserved, admitted, settled).
    fn write(ledger: &HintLedger, change: HintChange) {
        let guard = ledger.change();
        guard.reserve(&BOUNDS_OFF, change).unwrap().settle();
    }

    /// Bounds that admit anything.
    const BOUNDS_OFF: HintBounds = HintBounds {
        keys: usize::MAX,
        bytes: u64::MAX,
    };

    #[test]
    fn the_ledger_moves_the_shared_gauges_with_its_totals() {
        let (keys, bytes) = (Gauge::default(), Gauge::default());
        let a = HintLedger::new(totals(2, 300), keys.clone(), bytes.clone());
        let b = HintLedger::new(totals(1, 50), keys.clone(), bytes.clone());
        assert_eq!((keys.get(), bytes.get()), (3, 350));

        write(&a, new_hint(100));
        assert_eq!(a.totals(), totals(3, 400));
        write(&a, replacing(10, 100));
        assert_eq!(a.totals(), totals(3, 310));
        b.change().removed(50);
        assert_eq!(b.totals(), totals(0, 0));
        assert_eq!((keys.get(), bytes.get()), (3, 310));
        assert_eq!((a.keys(), b.keys()), (3, 0));

        // A removal the totals never counted does not wrap around.
        b.change().removed(70);
        assert_eq!(b.totals(), totals(0, 0));
        a.recount().recounted(totals(1, 20));
        assert_eq!((keys.get(), bytes.get()), (1, 20));
    }

    #[test]
    fn a_change_in_flight_holds_its_room_until_settled_or_given_back() {
        let (keys, bytes) = (Gauge::default(), Gauge::default());
        let ledger = HintLedger::new(totals(1, 800), keys.clone(), bytes.clone());
        let guard = ledger.change();

        // In flight: not shown as kept, but counted against the bounds.
        let first = guard.reserve(&BOUNDS, new_hint(150)).unwrap();
        assert_eq!((ledger.totals(), ledger.keys()), (totals(1, 800), 1));
        assert_eq!((keys.get(), bytes.get()), (1, 800));
        assert_eq!(
            guard.reserve(&BOUNDS, new_hint(51)).map(drop),
            Err(OverBound {
                bound: Exceeded::Bytes,
                totals: totals(2, 950),
            })
        );
        let second = guard.reserve(&BOUNDS, new_hint(50)).unwrap();
        assert_eq!(
            guard.reserve(&BOUNDS, new_hint(0)).map(drop),
            Err(OverBound {
                bound: Exceeded::Keys,
                totals: totals(3, 1000),
            })
        );

        // A write that failed gives its room back; one written is shown.
        drop(second);
        first.settle();
        assert_eq!((ledger.totals(), ledger.keys()), (totals(2, 950), 2));
        assert_eq!((keys.get(), bytes.get()), (2, 950));
        guard.reserve(&BOUNDS, new_hint(50)).unwrap().settle();
        assert_eq!(ledger.totals(), totals(3, 1000));

        // A replacement that shrinks its key's hint (800 -> 100) gives the
        // difference back only once written: until then the disk may
        // still hold the larger one, and nothing may take its room.
        let shrinking = guard.reserve(&BOUNDS, replacing(100, 800)).unwrap();
        let growing = replacing(60, 50);
        assert_eq!(
            guard.reserve(&BOUNDS, growing).map(drop),
            Err(OverBound {
                bound: Exceeded::Bytes,
                totals: totals(3, 1000),
            })
        );
        shrinking.settle();
        assert_eq!(ledger.totals(), totals(3, 300));
        guard.reserve(&BOUNDS, growing).unwrap().settle();
        assert_eq!(ledger.totals(), totals(3, 310));
        assert_eq!((keys.get(), bytes.get()), (3, 310));
    }

    #[test]
    fn a_recount_waits_for_the_changes_in_flight() {
        let ledger = std::sync::Arc::new(HintLedger::new(
            totals(0, 0),
            Gauge::default(),
            Gauge::default(),
        ));
        let guard = ledger.change();
        let reserved = guard.reserve(&BOUNDS, new_hint(10)).unwrap();
        let recount = {
            let ledger = ledger.clone();
            std::thread::spawn(move || ledger.recount().recounted(totals(1, 10)))
        };
        // A recount claims its lock, then waits for the changes in flight.
        // Had it not waited, it would finish (and the settle below would
        // count the hint a second time); had it taken no lock, it would
        // finish without claiming one.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !ledger.recount_claimed() && !recount.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "no recount after 10 s"
            );
            std::thread::yield_now();
        }
        assert!(!recount.is_finished());
        // Claimed while this change holds its share: it is waiting.
        assert!(ledger.recount_claimed());
        reserved.settle();
        drop(guard);
        recount.join().unwrap();
        assert_eq!(ledger.totals(), totals(1, 10));
    }
}
