//! Dead records purged by the storage engine's own compactions.
//!
//! A tombstone (or a value whose TTL expired) dead for longer than
//! `tombstone_grace_ms` may go: a read answers 404 with or without it,
//! Merkle trees and anti-entropy streams leave it out, and read repair
//! does not copy it to a replica that holds nothing for the key (docs/kv.md,
//! "Tombstones and their grace period"). Until it goes, a write stamped
//! before it still loses to it. What is left is giving its disk space
//! back. The maintenance thread's purge pass does that by reading
//! the whole keyspace; this filter does it for free while fjall rewrites
//! the tables anyway, so the pass is only a backstop for data that no
//! compaction touches (see [`super::MAX_PURGE_INTERVAL`]).
//!
//! A record is replaced by an LSM tombstone ([`Verdict::Remove`]), never
//! dropped outright ([`Verdict::Destroy`]): an older version of the key in
//! a lower level must stay shadowed, or it would come back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use prometheus_client::metrics::counter::Counter;
use tidegate_hub::HubMetrics;

use crate::record::RecordView;

/// The cutoff the filters compare with, shared with the maintenance
/// thread that moves it, and what was purged.
#[derive(Debug, Default)]
pub struct DeadRecords {
    /// Records dead before this time (ns since the epoch, the stamps'
    /// clock) are purged; 0, the start, purges nothing until the
    /// maintenance thread sets it.
    cutoff_ns: AtomicU64,
    /// Records purged by compactions.
    by_compaction: Counter,
    /// Records purged by the maintenance thread's pass.
    by_scan: Counter,
}

impl DeadRecords {
    /// Purges, from the next compaction on, what died before `cutoff_ns`.
    pub(crate) fn set_cutoff(&self, cutoff_ns: u64) {
        self.cutoff_ns.store(cutoff_ns, Ordering::Relaxed);
    }

    /// Counts `n` records purged by the maintenance pass.
    pub(crate) fn purged_by_scan(&self, n: u64) {
        self.by_scan.inc_by(n);
    }

    /// Records purged by compactions so far.
    pub fn by_compaction(&self) -> u64 {
        self.by_compaction.get()
    }

    /// Records purged by the maintenance pass so far.
    pub fn by_scan(&self) -> u64 {
        self.by_scan.get()
    }

    /// Registers both counts with the hub's registry (`/metrics`).
    pub fn register(&self, hub: &HubMetrics) {
        hub.register(
            "kv_purged_by_compaction",
            "KV records dead past tombstone_grace_ms removed by the storage engine's compactions",
            self.by_compaction.clone(),
        );
        hub.register(
            "kv_purged_by_scan",
            "KV records dead past tombstone_grace_ms removed by the purge pass over the whole store",
            self.by_scan.clone(),
        );
    }
}

/// Makes one [`DeadRecordFilter`] per compaction of the data keyspace.
pub(crate) struct DeadRecordPurge(pub(crate) Arc<DeadRecords>);

impl Factory for DeadRecordPurge {
    fn name(&self) -> &str {
        "tidegate-kv-dead-records"
    }

    fn make_filter(&self, _ctx: &Context) -> Box<dyn CompactionFilter> {
        Box::new(DeadRecordFilter {
            cutoff_ns: self.0.cutoff_ns.load(Ordering::Relaxed),
            purged: 0,
            shared: self.0.clone(),
        })
    }
}

/// One compaction's filter: the cutoff is read once, when it starts.
struct DeadRecordFilter {
    cutoff_ns: u64,
    purged: u64,
    shared: Arc<DeadRecords>,
}

impl CompactionFilter for DeadRecordFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _ctx: &Context) -> CompactionFilterResult {
        if self.cutoff_ns == 0 {
            return Ok(Verdict::Keep);
        }
        let bytes = item.value()?;
        Ok(if dead_before(&bytes, self.cutoff_ns) {
            self.purged += 1;
            Verdict::Remove
        } else {
            Verdict::Keep
        })
    }

    /// Called once the compaction has merged, before its tables are
    /// installed: a compaction that fails after that still counts.
    fn finish(self: Box<Self>) {
        self.shared.by_compaction.inc_by(self.purged);
    }
}

/// Whether the stored record `bytes` died before `cutoff_ns`. A record that
/// does not parse is kept: the filter must never be the thing that loses
/// data, and the reads report such a record.
fn dead_before(bytes: &[u8], cutoff_ns: u64) -> bool {
    RecordView::parse(bytes).is_ok_and(|r| r.dead_since().is_some_and(|t| t < cutoff_ns))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::record::Record;

    #[test]
    fn only_records_dead_before_the_cutoff_are_purged() {
        let at = |r: Record| dead_before(&r.encode(), 100);
        assert!(at(Record::tombstone(99)));
        assert!(!at(Record::tombstone(100)));
        assert!(!at(Record::value(1, Bytes::from_static(b"v"))));
        assert!(at(
            Record::value(1, Bytes::from_static(b"v")).with_expiry(99)
        ));
        assert!(!at(
            Record::value(1, Bytes::from_static(b"v")).with_expiry(100)
        ));
        // Bytes that are no record are kept.
        assert!(!dead_before(b"", 100));
        assert!(!dead_before(&[0xff; 40], u64::MAX));
    }
}
