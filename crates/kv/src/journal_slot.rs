//! At most one async worker at a time writes the journal.
//!
//! Journal writes are made on the async workers because handing each one
//! to another thread costs more than the write. But fjall holds its journal
//! lock across an fsync when it flushes a memtable (fjall issue 329), and
//! on some disks that fsync takes 30–100 ms: every worker that waits on the
//! lock meanwhile stops serving everything queued on it — push, wire,
//! Forward, GETs — so a KV write load used to stall the whole process at
//! every flush. With this slot, a journal write finding another one in
//! progress on a worker goes to the blocking pool instead
//! ([`crate::write_group`], replica batches): a flush catches at most one
//! worker, and the others keep serving. Under a one-node PUT load about
//! one group write in five is handed off (counted on `/metrics`), which
//! costs that load ~9 % of its rate (BENCHMARKS.md).

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::counter::Counter;
use tidegate_hub::HubMetrics;

/// Whether an async worker is writing the journal.
#[derive(Default)]
pub struct JournalSlot {
    busy: AtomicBool,
    /// Writes given back because the slot was held.
    handed_off: Counter,
}

impl JournalSlot {
    /// Runs `write` holding the slot, or gives it back unrun when another
    /// write holds it (the caller hands it to the blocking pool).
    pub fn try_write<T, F: FnOnce() -> T>(&self, write: F) -> Result<T, F> {
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.handed_off.inc();
            return Err(write);
        }
        let _release = Release(&self.busy);
        Ok(write())
    }

    /// Journal writes given back so far (handed to the blocking pool).
    pub fn handed_off(&self) -> u64 {
        self.handed_off.get()
    }

    /// Registers the hand-off counter with the hub's registry (`/metrics`).
    pub fn register(&self, hub: &HubMetrics) {
        hub.register(
            "kv_journal_handoffs",
            "KV journal writes handed to the blocking pool because another async worker was writing the journal",
            self.handed_off.clone(),
        );
    }
}

/// Frees the slot, also when the write panics.
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
        let slot = JournalSlot::default();
        let nested = slot.try_write(|| slot.try_write(|| 1).is_err());
        assert_eq!(nested.ok(), Some(true), "the inner write was refused");
        assert_eq!(slot.try_write(|| 2).ok(), Some(2), "free again");
        assert_eq!(slot.handed_off(), 1);
    }

    #[test]
    fn a_panicking_write_frees_the_slot() {
        let slot = JournalSlot::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = slot.try_write(|| panic!("journal write failed"));
        }));
        assert!(r.is_err());
        assert_eq!(slot.try_write(|| 3).ok(), Some(3));
    }
}
