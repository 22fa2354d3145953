//! [`OffsetTracker`]: which offset of each partition may be committed, given
//! records received in order and acknowledged in any order.
//!
//! A partition's committable position is the lowest offset still pending
//! (everything below it was acknowledged), or one past the last offset
//! received when nothing is pending. Offsets a partition skips (compaction,
//! transaction markers) need no special case.
//!
//! A record received at or below an offset already seen means the consumer
//! was moved back (a rebalance gave the partition back from its committed
//! offset, or a seek): the partition starts a new epoch, and
//! acknowledgements of the old epoch's records are ignored — their records
//! come again and are acknowledged in the new one. Pure and synchronous.

use std::collections::{BTreeSet, HashMap};

/// One received record, handed back to [`OffsetTracker::done`] when the hub
/// (and its sinks) accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The Kafka topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    epoch: u64,
}

#[derive(Debug, Default)]
struct PartitionState {
    epoch: u64,
    pending: BTreeSet<i64>,
    last_received: Option<i64>,
    /// The committable position last reported by `take_committable`.
    reported: Option<i64>,
}

impl PartitionState {
    fn position(&self) -> Option<i64> {
        match self.pending.first() {
            Some(&lowest) => Some(lowest),
            None => self.last_received.map(|o| o + 1),
        }
    }
}

/// Pending offsets per partition.
#[derive(Debug, Default)]
pub struct OffsetTracker {
    topics: HashMap<String, HashMap<i32, PartitionState>>,
    pending: usize,
}

impl OffsetTracker {
    /// Records `offset` of `topic`/`partition` as received and pending.
    pub fn received(&mut self, topic: &str, partition: i32, offset: i64) -> Ticket {
        let parts = match self.topics.get_mut(topic) {
            Some(p) => p,
            None => self.topics.entry(topic.to_owned()).or_default(),
        };
        let state = parts.entry(partition).or_default();
        if state.last_received.is_some_and(|last| offset <= last) {
            // Moved back: what was pending will come again.
            self.pending -= state.pending.len();
            state.pending.clear();
            state.epoch += 1;
            state.reported = None;
        }
        state.last_received = Some(offset);
        if state.pending.insert(offset) {
            self.pending += 1;
        }
        Ticket {
            topic: topic.to_owned(),
            partition,
            offset,
            epoch: state.epoch,
        }
    }

    /// Marks a ticket's record accepted. Returns false for a ticket of an
    /// earlier epoch (ignored).
    pub fn done(&mut self, ticket: &Ticket) -> bool {
        let Some(state) = self
            .topics
            .get_mut(&ticket.topic)
            .and_then(|p| p.get_mut(&ticket.partition))
        else {
            return false;
        };
        if state.epoch != ticket.epoch || !state.pending.remove(&ticket.offset) {
            return false;
        }
        self.pending -= 1;
        true
    }

    /// Records received and not yet done.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Every partition whose committable position moved since the last
    /// call: `(topic, partition, next offset to consume)`.
    pub fn take_committable(&mut self) -> Vec<(String, i32, i64)> {
        let mut out = Vec::new();
        for (topic, parts) in &mut self.topics {
            for (&partition, state) in parts.iter_mut() {
                let Some(position) = state.position() else {
                    continue;
                };
                if state.reported != Some(position) {
                    state.reported = Some(position);
                    out.push((topic.clone(), partition, position));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_position_stops_at_the_lowest_pending_offset() {
        let mut t = OffsetTracker::default();
        let a = t.received("o", 0, 10);
        let b = t.received("o", 0, 11);
        let c = t.received("o", 0, 13); // 12 was compacted away
        assert_eq!(t.take_committable(), vec![("o".into(), 0, 10)]);
        assert!(t.done(&b));
        assert!(t.take_committable().is_empty(), "10 still pending");
        assert!(t.done(&a));
        assert_eq!(t.take_committable(), vec![("o".into(), 0, 13)]);
        assert!(t.done(&c));
        assert_eq!(t.take_committable(), vec![("o".into(), 0, 14)]);
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn a_partition_moved_back_ignores_its_old_tickets() {
        let mut t = OffsetTracker::default();
        let old = t.received("o", 1, 5);
        t.received("o", 1, 6);
        // The partition comes back from its committed offset 5.
        let again = t.received("o", 1, 5);
        assert_eq!(t.pending(), 1);
        assert!(!t.done(&old), "an old epoch's ticket is ignored");
        assert_eq!(t.take_committable(), vec![("o".into(), 1, 5)]);
        assert!(t.done(&again));
        assert_eq!(t.take_committable(), vec![("o".into(), 1, 6)]);
    }

    proptest! {
        /// Whatever order acknowledgements come in, the committed position
        /// never passes a record that is not done, and reaches the end once
        /// all are.
        #[test]
        fn never_commits_past_an_unacknowledged_record(
            n in 1usize..60,
            order in proptest::collection::vec(any::<prop::sample::Index>(), 60),
        ) {
            let mut t = OffsetTracker::default();
            let mut tickets: Vec<Ticket> = (0..n).map(|i| t.received("t", 0, i as i64 * 2)).collect();
            let mut done = vec![false; n];
            for idx in order.iter().take(n) {
                if tickets.is_empty() { break; }
                let ticket = tickets.remove(idx.index(tickets.len()));
                prop_assert!(t.done(&ticket));
                done[(ticket.offset / 2) as usize] = true;
                for (_, _, pos) in t.take_committable() {
                    let first_not_done = done.iter().position(|d| !d);
                    match first_not_done {
                        Some(i) => prop_assert!(pos <= i as i64 * 2),
                        None => prop_assert_eq!(pos, (n as i64 - 1) * 2 + 1),
                    }
                }
            }
            for ticket in tickets { prop_assert!(t.done(&ticket)); }
            let last = t.take_committable();
            prop_assert!(last.is_empty() || last == vec![("t".to_owned(), 0, (n as i64 - 1) * 2 + 1)]);
            prop_assert_eq!(t.pending(), 0);
        }
    }
}
