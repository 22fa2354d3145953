//! How many hints, and how many bytes of them, may be on their way to one
//! replica's store at once.
//!
//! A node's hints are written one at a time. When a replica goes away
//! every write to it fails — a whole batch of up to 4,096 at once — and
//! each used to become a blocking-pool task of its own that waited on the
//! node's ledger lock (then held across each hint's write): behind a slow
//! disk (a storage write stall) they held hundreds of the pool's threads,
//! which the engine's storage hand-offs need too.
//!
//! Now a hint waits for its node's turn on the async runtime, before its
//! blocking task is spawned: a node's hints hold at most one blocking
//! thread. And at most a fixed number may be waiting or writing: one more
//! is dropped and counted like a hint past its bound, because the write
//! it belongs to waits for it (its client may be waiting too), and should
//! not wait behind a disk that has stopped. The ledger no longer holds
//! its lock across the disk (a hint reserves its room, then writes:
//! [`crate::hint_bounds::HintLedger`]), but the turn stays: without it
//! the threads would pile up inside the storage's own write stall
//! instead of on the lock.
//!
//! The count alone bounds no memory: a waiting hint holds its record,
//! whose value may be as large as `[http] max_body_bytes` (256 MiB by
//! default), and it is held by a task that goes on after the client was
//! answered — outside the hub's in-flight byte budget. So the hints'
//! bytes in flight are bounded too ([`KeepGate::new`]'s `max_bytes`):
//! each hint reserves its size when it enters and gives it back when its
//! [`Ticket`] drops; one that would take the total past the bound is
//! dropped like one past the count. A hint larger than the bound alone is
//! still let in when no other is in flight — else a value that large
//! could never be hinted — so a node's hints hold at most the bound or
//! one hint's bytes, whichever is more; while such a hint is in flight
//! every other one of its node is dropped.
//!
//! A hint that would take the total past either bound may briefly hold a
//! place another hint is refused for (the count is reserved, then the
//! bytes, and the count given back when the bytes do not fit): only at a
//! bound, where hints are being dropped anyway.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bound a hint turned away by [`KeepGate::try_enter`] would cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The count of hints in flight.
    Hints,
    /// Their bytes.
    Bytes,
}

impl Full {
    /// `"hints"` or `"bytes"`, as logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Full::Hints => "hints",
            Full::Bytes => "bytes",
        }
    }
}

/// The turn, the count and the bytes of one node's hints on their way to
/// its store.
pub struct KeepGate {
    /// One permit: the hint being written.
    turn: Arc<Semaphore>,
    /// Hints that entered and are not yet written (or dropped).
    in_flight: Arc<AtomicUsize>,
    /// Their sizes together, as each reserved it.
    in_flight_bytes: Arc<AtomicU64>,
    /// Most hints in flight at once.
    limit: usize,
    /// Most bytes in flight at once, unless one hint alone is larger.
    max_bytes: u64,
}

impl KeepGate {
    /// A gate letting at most `limit` hints, of at most `max_bytes`
    /// together, wait or be written at once (one hint larger than
    /// `max_bytes` only when it is alone).
    pub fn new(limit: usize, max_bytes: u64) -> Self {
        KeepGate {
            turn: Arc::new(Semaphore::new(1)),
            in_flight: Arc::new(AtomicUsize::new(0)),
            in_flight_bytes: Arc::new(AtomicU64::new(0)),
            limit,
            max_bytes,
        }
    }

    /// A place among the node's hints in flight for a hint of `bytes`
    /// (its [`crate::engine::hint_bytes`]), or the bound it would cross
    /// (the hint is then to be dropped).
    pub fn try_enter(&self, bytes: u64) -> Result<Ticket, Full> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .map_err(|_| Full::Hints)?;
        let reserved =
            self.in_flight_bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |total| {
                    // None in flight: let it in whatever its size. A hint has
                    // at least its record's header, so a total of zero means
                    // no hint holds bytes.
                    let fits = total == 0 || total.saturating_add(bytes) <= self.max_bytes;
                    fits.then_some(total.saturating_add(bytes))
                });
        if reserved.is_err() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::Bytes);
        }
        Ok(Ticket {
            turn: self.turn.clone(),
            in_flight: self.in_flight.clone(),
            in_flight_bytes: self.in_flight_bytes.clone(),
            bytes,
        })
    }

    /// Hints in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Their bytes together now.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes.load(Ordering::Acquire)
    }

    /// The bound on [`KeepGate::in_flight_bytes`].
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
}

/// A hint in flight: counted, with its bytes, until dropped.
pub struct Ticket {
    turn: Arc<Semaphore>,
    in_flight: Arc<AtomicUsize>,
    in_flight_bytes: Arc<AtomicU64>,
    /// What it reserved of `in_flight_bytes`.
    bytes: u64,
}

impl Ticket {
    /// Waits for the node's turn (first come, first served).
    pub async fn turn(self) -> Turn {
        // The semaphore is never closed, so this is never `None`; were it
        // closed, writing without the turn is still correct (the ledger's
        // lock orders the writes), only less bounded.
        let permit = self.turn.clone().acquire_owned().await.ok();
        Turn {
            _permit: permit,
            _ticket: self,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.in_flight_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The node's turn: hold it while the hint is written (on the blocking
/// pool); dropping it lets the next one go and leaves the count and the
/// bytes in flight.
pub struct Turn {
    _permit: Option<OwnedSemaphorePermit>,
    _ticket: Ticket,
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A byte bound the count tests never reach.
    const ROOMY: u64 = 1 << 40;

    #[tokio::test]
    async fn one_writes_at_a_time_and_at_most_the_limit_are_in_flight() {
        let gate = KeepGate::new(3, ROOMY);
        let (a, b, c) = (
            gate.try_enter(1).unwrap(),
            gate.try_enter(1).unwrap(),
            gate.try_enter(1).unwrap(),
        );
        assert_eq!(
            gate.try_enter(1).err(),
            Some(Full::Hints),
            "a fourth is turned away"
        );
        assert_eq!(gate.in_flight(), 3);

        let a = a.turn().await;
        let mut b = Box::pin(b.turn());
        assert!(b.as_mut().now_or_never().is_none(), "b waits for a");
        drop(a);
        assert_eq!(gate.in_flight(), 2, "a written: one place free");
        let b = b.now_or_never().expect("b's turn once a is done");
        let d = gate.try_enter(1).expect("a place again");
        assert!(gate.try_enter(1).is_err());

        // A ticket given up before its turn frees its place too.
        drop(c);
        assert_eq!(gate.in_flight(), 2);
        drop((b, d));
        assert_eq!(gate.in_flight(), 0);
        assert!(gate.try_enter(1).unwrap().turn().now_or_never().is_some());
    }

    #[tokio::test]
    async fn the_bytes_in_flight_are_reserved_on_entry_and_given_back_on_drop() {
        let gate = KeepGate::new(100, 1000);
        let a = gate.try_enter(600).unwrap();
        let b = gate.try_enter(400).unwrap();
        assert_eq!(gate.in_flight_bytes(), 1000, "up to the bound exactly");
        assert_eq!(gate.try_enter(1).err(), Some(Full::Bytes));
        assert_eq!(
            gate.in_flight(),
            2,
            "one turned away for bytes takes no place"
        );
        assert_eq!(gate.in_flight_bytes(), 1000);

        // Given back when written (the turn dropped) ...
        drop(a.turn().await);
        assert_eq!(gate.in_flight_bytes(), 400);
        assert_eq!(gate.try_enter(601).err(), Some(Full::Bytes));
        let c = gate.try_enter(600).unwrap();
        // ... and when given up before its turn.
        drop(b);
        assert_eq!(gate.in_flight_bytes(), 600);
        drop(c);
        assert_eq!((gate.in_flight(), gate.in_flight_bytes()), (0, 0));
    }

    #[tokio::test]
    async fn a_hint_larger_than_the_byte_bound_enters_only_alone() {
        let gate = KeepGate::new(100, 1000);
        let small = gate.try_enter(10).unwrap();
        assert_eq!(
            gate.try_enter(5000).err(),
            Some(Full::Bytes),
            "not with another in flight"
        );
        drop(small);

        // Alone, it enters: else a value that large could never be hinted.
        let large = gate.try_enter(5000).unwrap();
        assert_eq!(gate.in_flight_bytes(), 5000);
        // Nothing else meanwhile, however small: the bound is this hint.
        assert_eq!(gate.try_enter(1).err(), Some(Full::Bytes));
        assert_eq!(gate.try_enter(5000).err(), Some(Full::Bytes));
        drop(large.turn().await);
        assert_eq!(gate.in_flight_bytes(), 0);
        assert!(gate.try_enter(1000).is_ok());
    }
}
