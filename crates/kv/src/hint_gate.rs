//! How many hints may be on their way to one replica's store at once.
//!
//! A node's hints are written one at a time, under its ledger's lock
//! ([`crate::hint_bounds::HintLedger`]). When a replica goes away every
//! write to it fails — a whole batch of up to 4,096 at once — and each
//! used to become a blocking-pool task of its own that waited on that
//! lock: behind a slow disk (a storage write stall) they held hundreds
//! of the pool's threads, which the engine's storage hand-offs need too.
//!
//! Now a hint waits for its node's turn on the async runtime, before its
//! blocking task is spawned: a node's hints hold at most one blocking
//! thread (one is all the lock lets work anyway). And at most a fixed
//! number may be waiting or writing: one more is dropped and counted like
//! a hint past its bound, because the write it belongs to waits for it
//! (its client may be waiting too), and should not wait behind a disk
//! that has stopped. Not chosen: reserving room under the lock and
//! writing outside it. That frees the lock, but the threads would then
//! pile up inside the storage's own write stall instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The turn and the count of one node's hints on their way to its store.
pub struct KeepGate {
    /// One permit: the hint being written.
    turn: Arc<Semaphore>,
    /// Hints that entered and are not yet written (or dropped).
    in_flight: Arc<AtomicUsize>,
    /// Most hints in flight at once.
    limit: usize,
}

impl KeepGate {
    /// A gate letting at most `limit` hints wait or be written at once.
    pub fn new(limit: usize) -> Self {
        KeepGate {
            turn: Arc::new(Semaphore::new(1)),
            in_flight: Arc::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// A place among the node's hints in flight, or `None` when `limit`
    /// of them are in flight already (the hint is then to be dropped).
    pub fn try_enter(&self) -> Option<Ticket> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()?;
        Some(Ticket {
            turn: self.turn.clone(),
            in_flight: self.in_flight.clone(),
        })
    }

    /// Hints in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// A hint in flight: counted until dropped.
pub struct Ticket {
    turn: Arc<Semaphore>,
    in_flight: Arc<AtomicUsize>,
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
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The node's turn: hold it while the hint is written (on the blocking
/// pool); dropping it lets the next one go and leaves the count.
pub struct Turn {
    _permit: Option<OwnedSemaphorePermit>,
    _ticket: Ticket,
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn one_writes_at_a_time_and_at_most_the_limit_are_in_flight() {
        let gate = KeepGate::new(3);
        let (a, b, c) = (
            gate.try_enter().unwrap(),
            gate.try_enter().unwrap(),
            gate.try_enter().unwrap(),
        );
        assert!(gate.try_enter().is_none(), "a fourth is turned away");
        assert_eq!(gate.in_flight(), 3);

        let a = a.turn().await;
        let mut b = Box::pin(b.turn());
        assert!(b.as_mut().now_or_never().is_none(), "b waits for a");
        drop(a);
        assert_eq!(gate.in_flight(), 2, "a written: one place free");
        let b = b.now_or_never().expect("b's turn once a is done");
        let d = gate.try_enter().expect("a place again");
        assert!(gate.try_enter().is_none());

        // A ticket given up before its turn frees its place too.
        drop(c);
        assert_eq!(gate.in_flight(), 2);
        drop((b, d));
        assert_eq!(gate.in_flight(), 0);
        assert!(gate.try_enter().unwrap().turn().now_or_never().is_some());
    }
}
