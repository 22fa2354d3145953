//! At most one async worker at a time calls into the storage engine.
//!
//! Storage calls are made on the async workers because handing each one
//! to another thread costs more than the call. But fjall and lsm-tree hold
//! locks across fsyncs: the journal lock when a memtable is flushed (fjall
//! issue 329), and the tree's version lock, which every read and write
//! takes, while a flush or compaction persists the new version file. On
//! some disks those fsyncs take 30–100 ms, and every worker that waits on
//! such a lock meanwhile stops serving everything queued on it — push,
//! wire, Forward, `/healthz` — so a KV load used to stall the whole process
//! at every flush: writes did until the slot covered them, reads under a
//! mixed load did until it covered them too.
//!
//! With this slot, a storage call finding another one in progress on a
//! worker goes to the blocking pool instead ([`crate::write_group`],
//! replica batches, local reads): a stalled lock catches at most one
//! worker, and the others keep serving. Under a one-node PUT load about
//! one group write in five is handed off; each hand-off is counted on
//! `/metrics`, writes and reads apart (BENCHMARKS.md has the costs).

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::counter::Counter;
use tidegate_hub::HubMetrics;

/// Whether an async worker is inside a storage call.
#[derive(Default)]
pub struct StorageSlot {
    busy: AtomicBool,
    /// Journal writes given back because the slot was held.
    write_handoffs: Counter,
    /// Reads given back because the slot was held.
    read_handoffs: Counter,
}

impl StorageSlot {
    /// Runs the journal write `write` holding the slot, or gives it back
    /// unrun when another call holds it (the caller hands it to the
    /// blocking pool).
    pub fn try_write<T, F: FnOnce() -> T>(&self, write: F) -> Result<T, F> {
        self.try_run(&self.write_handoffs, write)
    }

    /// Runs the read `read` holding the slot, or gives it back unrun when
    /// another call holds it (the caller hands it to the blocking pool).
    pub fn try_read<T, F: FnOnce() -> T>(&self, read: F) -> Result<T, F> {
        self.try_run(&self.read_handoffs, read)
    }

    fn try_run<T, F: FnOnce() -> T>(&self, handoffs: &Counter, call: F) -> Result<T, F> {
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            handoffs.inc();
            return Err(call);
        }
        let _release = Release(&self.busy);
        Ok(call())
    }

    /// Journal writes given back so far (handed to the blocking pool).
    pub fn write_handoffs(&self) -> u64 {
        self.write_handoffs.get()
    }

    /// Reads given back so far (handed to the blocking pool).
    pub fn read_handoffs(&self) -> u64 {
        self.read_handoffs.get()
    }

    /// Registers the hand-off counters with the hub's registry (`/metrics`).
    pub fn register(&self, hub: &HubMetrics) {
        hub.register(
            "kv_journal_handoffs",
            "KV journal writes handed to the blocking pool because another async worker was in a storage call",
            self.write_handoffs.clone(),
        );
        hub.register(
            "kv_read_handoffs",
            "KV local reads handed to the blocking pool because another async worker was in a storage call",
            self.read_handoffs.clone(),
        );
    }
}

/// Frees the slot, also when the call panics.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_write_meanwhile_is_given_back_and_the_slot_frees_after() {
        let slot = StorageSlot::default();
        let nested = slot.try_write(|| slot.try_write(|| 1).is_err());
        assert_eq!(nested.ok(), Some(true), "the inner write was refused");
        assert_eq!(slot.try_write(|| 2).ok(), Some(2), "free again");
        assert_eq!((slot.write_handoffs(), slot.read_handoffs()), (1, 0));
    }

    #[test]
    fn reads_and_writes_share_the_slot_and_are_counted_apart() {
        let slot = StorageSlot::default();
        let read_during_write = slot.try_write(|| slot.try_read(|| 1).is_err());
        assert_eq!(read_during_write.ok(), Some(true));
        let write_during_read = slot.try_read(|| slot.try_write(|| 1).is_err());
        assert_eq!(write_during_read.ok(), Some(true));
        let read_during_read = slot.try_read(|| slot.try_read(|| 1).is_err());
        assert_eq!(read_during_read.ok(), Some(true));
        assert_eq!((slot.write_handoffs(), slot.read_handoffs()), (1, 2));
        assert_eq!(slot.try_read(|| 3).ok(), Some(3), "free again");
    }

    #[test]
    fn a_panicking_write_frees_the_slot() {
        let slot = StorageSlot::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = slot.try_write(|| panic!("journal write failed"));
        }));
        assert!(r.is_err());
        assert_eq!(slot.try_write(|| 3).ok(), Some(3));
    }
}
