//! [`Heartbeat`]: what a clustered node says about itself every few seconds
//! on the nodes topic (`<backbone topic>-nodes`), as bytes, with no Kafka
//! client in it. The Kafka crate writes it and `tidegate cluster status`
//! reads it back.
//!
//! Pure and hostile-input safe: anyone who can write to the nodes topic can
//! write anything there, so a record is read only up to
//! [`MAX_HEARTBEAT_BYTES`] and anything that is not a heartbeat is skipped,
//! never a panic (fuzzed: `backbone_heartbeat`).

use serde::{Deserialize, Serialize};

/// Largest heartbeat record that is read (a larger record on the nodes
/// topic is skipped unread).
pub const MAX_HEARTBEAT_BYTES: usize = 4096;

/// What a node says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The node's name.
    pub node: String,
    /// When it was written, ms since the Unix epoch.
    pub ts_ms: u64,
    /// Backbone records the node has not read yet, all partitions.
    pub lag: i64,
    /// Backbone partitions the node reads.
    pub partitions: i64,
    /// Messages read from the backbone and fanned out since the node
    /// started.
    pub received: u64,
    /// Messages of cluster-wide topics this node produced since it started.
    pub produced: u64,
    /// The node's Tidegate version.
    pub version: String,
}

impl Heartbeat {
    /// Parses a heartbeat record's value; `None` for anything else
    /// (including a record over [`MAX_HEARTBEAT_BYTES`]).
    pub fn parse(value: &[u8]) -> Option<Heartbeat> {
        if value.len() > MAX_HEARTBEAT_BYTES {
            return None;
        }
        serde_json::from_slice(value).ok()
    }

    /// The record value written for this heartbeat (JSON).
    pub fn encode(&self) -> Vec<u8> {
        // Strings and integers only: serialising cannot fail.
        serde_json::to_vec(self).expect("a heartbeat serialises")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// What the writer puts on the nodes topic reads back as written.
        #[test]
        fn heartbeats_round_trip(
            node in "\\PC{0,64}",
            ts_ms in any::<u64>(),
            lag in any::<i64>(),
            partitions in any::<i64>(),
            received in any::<u64>(),
            produced in any::<u64>(),
            version in "\\PC{0,32}",
        ) {
            let beat = Heartbeat { node, ts_ms, lag, partitions, received, produced, version };
            prop_assert_eq!(Heartbeat::parse(&beat.encode()), Some(beat));
        }

        /// Whatever else is on the topic is skipped, never a panic.
        #[test]
        fn any_bytes_parse_or_are_skipped(value in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Heartbeat::parse(&value);
        }
    }

    #[test]
    fn an_oversized_record_is_skipped_unread() {
        let beat = Heartbeat {
            node: "n".repeat(MAX_HEARTBEAT_BYTES),
            ts_ms: 1,
            lag: 0,
            partitions: 1,
            received: 0,
            produced: 0,
            version: "0".into(),
        };
        let value = beat.encode();
        assert!(value.len() > MAX_HEARTBEAT_BYTES);
        assert_eq!(Heartbeat::parse(&value), None);
        assert_eq!(Heartbeat::parse(b"{}"), None);
    }

    #[test]
    fn only_heartbeats_parse_as_heartbeats() {
        let beat = Heartbeat {
            node: "n".into(),
            ts_ms: 5,
            lag: 0,
            partitions: 1,
            received: 0,
            produced: 0,
            version: "v".into(),
        };
        let bytes = serde_json::to_vec(&beat).unwrap();
        assert_eq!(Heartbeat::parse(&bytes), Some(beat));
        assert_eq!(Heartbeat::parse(b"{\"node\":1}"), None);
        assert_eq!(
            Heartbeat::parse(&vec![b' '; 5000]),
            None,
            "over the size bound"
        );
    }
}
