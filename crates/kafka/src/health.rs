//! [`BrokerLink`]: whether the producer has a broker connection, for
//! `/readyz`.
//!
//! librdkafka tells in three ways, all on its polling thread: the error
//! callback's `AllBrokersDown` (at once, when the last connection drops), a
//! successful delivery report (a broker answered), and the statistics it
//! emits every [`STATS_INTERVAL_MS`] (each broker's state; `UP` is
//! connected). Each only stores one flag, so reading it — once per `/readyz`
//! request — is one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;

/// `statistics.interval.ms` the sink sets unless `[sinks.kafka.properties]`
/// does: how soon a returning broker makes the sink ready again.
pub const STATS_INTERVAL_MS: u32 = 1000;

/// Whether any broker connection is up.
#[derive(Debug, Default)]
pub struct BrokerLink {
    up: AtomicBool,
}

impl BrokerLink {
    /// True when the last word from librdkafka was that a broker is up.
    /// False until the first connection.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// librdkafka reported every broker down.
    pub fn all_down(&self) {
        self.up.store(false, Ordering::Release);
    }

    /// A broker acknowledged a record.
    pub fn delivered(&self) {
        if !self.up.load(Ordering::Relaxed) {
            self.up.store(true, Ordering::Release);
        }
    }

    /// Reads the broker states from librdkafka's statistics JSON; statistics
    /// that do not parse change nothing.
    pub fn statistics(&self, json: &[u8]) {
        if let Some(up) = any_broker_up(json) {
            self.up.store(up, Ordering::Release);
        }
    }
}

/// The part of librdkafka's statistics this reads.
#[derive(Deserialize)]
struct Statistics {
    #[serde(default)]
    brokers: HashMap<String, BrokerStatistics>,
}

#[derive(Deserialize)]
struct BrokerStatistics {
    /// `UP`, `DOWN`, `CONNECT`, `INIT`, …
    state: String,
    /// `configured` (bootstrap), `learned`, `internal` or `logical`.
    source: String,
}

/// Whether the statistics show a real broker (not librdkafka's internal
/// ones) connected; `None` if they do not parse.
fn any_broker_up(json: &[u8]) -> Option<bool> {
    let stats: Statistics = serde_json::from_slice(json).ok()?;
    Some(
        stats
            .brokers
            .values()
            .any(|b| b.state == "UP" && matches!(b.source.as_str(), "configured" | "learned")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = r#"{"name":"rdkafka#producer-1","type":"producer","ts":1,
        "brokers":{
          ":0/internal":{"name":":0/internal","nodeid":-1,"state":"UP","source":"internal","rtt":{"avg":0}},
          "127.0.0.1:9092/bootstrap":{"name":"127.0.0.1:9092/bootstrap","nodeid":-1,"state":"STATE","source":"configured"},
          "127.0.0.1:9092/1":{"name":"127.0.0.1:9092/1","nodeid":1,"state":"DOWN","source":"learned"}
        },
        "topics":{}}"#;

    #[test]
    fn a_real_broker_up_in_the_statistics_is_a_connection() {
        let link = BrokerLink::default();
        assert!(!link.is_up(), "not up before any word");
        link.statistics(STATS.replace("STATE", "UP").as_bytes());
        assert!(link.is_up());
        link.statistics(STATS.replace("STATE", "CONNECT").as_bytes());
        assert!(!link.is_up(), "librdkafka's internal broker does not count");
    }

    #[test]
    fn all_brokers_down_and_deliveries_move_the_flag() {
        let link = BrokerLink::default();
        link.delivered();
        assert!(link.is_up());
        link.all_down();
        assert!(!link.is_up());
        link.statistics(b"not json");
        assert!(!link.is_up(), "unparsable statistics change nothing");
    }
}
