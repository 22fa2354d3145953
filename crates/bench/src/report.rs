//! The report every scenario ends with: the common JSON object (`--json`) and
//! helpers for the human tables in each seed's own columns.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::latency::LatencySummary;
use crate::sampler::ProcessStats;

/// The common result object; `--json` prints exactly one on stdout.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name (`echo`, `forward`, `s2s`).
    pub scenario: String,
    /// The parameters the run used, by their command-line names.
    pub params: serde_json::Value,
    /// Messages (or records, transactions) sent.
    pub sent: u64,
    /// Messages (or acknowledgements, responses) received.
    pub received: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Length of the measured part of the run, seconds.
    pub duration_s: f64,
    /// Achieved rate per second over the measured part.
    pub rate: f64,
    /// Latency percentiles, microseconds.
    pub latency_us: LatencySummary,
    /// The server's CPU and memory (zero when driving an external `--target`).
    pub server: ProcessStats,
    /// The load generator's own CPU and memory.
    pub client: ProcessStats,
    /// Scenario-specific figures (per-phase timings, per-rate rows, …).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub extra: serde_json::Value,
}

impl Report {
    /// An empty report for `scenario` with its parameters.
    pub fn new(scenario: &str, params: serde_json::Value) -> Self {
        Report {
            scenario: scenario.to_owned(),
            params,
            sent: 0,
            received: 0,
            errors: BTreeMap::new(),
            duration_s: 0.0,
            rate: 0.0,
            latency_us: LatencySummary::default(),
            server: ProcessStats::default(),
            client: ProcessStats::default(),
            extra: serde_json::Value::Null,
        }
    }

    /// Adds `n` errors of `kind`.
    pub fn error(&mut self, kind: &str, n: u64) {
        if n > 0 {
            *self.errors.entry(kind.to_owned()).or_default() += n;
        }
    }

    /// Total errors of every kind.
    pub fn total_errors(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The JSON object on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("report serialises")
    }

    /// The lines common to every human report: rate, errors, server and
    /// client resources.
    pub fn summary_lines(&self) -> String {
        let mut s = format!(
            "sent {}  received {}  duration {:.2} s  rate {:.0}/s\n",
            self.sent, self.received, self.duration_s, self.rate
        );
        if self.errors.is_empty() {
            s.push_str("errors: none\n");
        } else {
            let e: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            s.push_str(&format!("errors: {}\n", e.join(" ")));
        }
        s.push_str(&format!(
            "server: cpu avg {:.0}% max {:.0}%  rss max {} KiB   client: cpu avg {:.0}%  rss max {} KiB\n",
            self.server.cpu_pct_avg,
            self.server.cpu_pct_max,
            self.server.rss_kb_max,
            self.client.cpu_pct_avg,
            self.client.rss_kb_max
        ));
        s
    }

    /// Prints the JSON object when `json` is set, else `human` followed by the
    /// summary lines.
    pub fn emit(&self, json: bool, human: &str) {
        if json {
            println!("{}", self.to_json());
        } else {
            print!("{human}");
            print!("{}", self.summary_lines());
        }
    }
}

/// Seed 002's latency table: "~one way" (RTT/2) and round trip, microseconds.
pub fn one_way_round_trip_table(rtt: &LatencySummary) -> String {
    let ow = rtt.halved();
    let rows = [
        ("mean", ow.mean, rtt.mean),
        ("99th percentile", ow.p99, rtt.p99),
        ("99.9th percentile", ow.p999, rtt.p999),
        ("99.99th percentile", ow.p9999, rtt.p9999),
        ("99.999th percentile", ow.p99999, rtt.p99999),
        ("worst", ow.max, rtt.max),
    ];
    let mut s = String::from(
        "Results:\n---------------------------------------------------------\nlatency (microseconds) |     ~ one way |     round trip |\n",
    );
    for (name, a, b) in rows {
        s.push_str(&format!("{name:<23}|{a:>14.0} |{b:>15.0} |\n"));
    }
    s
}

/// A generic percentile table (p50 … max) for scenarios without a seed table.
pub fn percentile_table(title: &str, l: &LatencySummary) -> String {
    format!(
        "{title} (µs): mean {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  p99.99 {:.1}  max {:.1}\n",
        l.mean, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_common_keys() {
        let mut r = Report::new("echo", serde_json::json!({"rate": 1}));
        r.error("timeout", 2);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        for k in [
            "scenario",
            "params",
            "sent",
            "received",
            "errors",
            "duration_s",
            "rate",
            "latency_us",
            "server",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        for k in [
            "mean", "p50", "p90", "p99", "p999", "p9999", "p99999", "max",
        ] {
            assert!(v["latency_us"].get(k).is_some(), "missing latency_us.{k}");
        }
        assert!(v["server"].get("cpu_pct_avg").is_some());
        assert!(v["server"].get("rss_kb_max").is_some());
        assert_eq!(v["errors"]["timeout"], 2);
    }

    #[test]
    fn the_seed_002_table_halves_round_trip() {
        let l = LatencySummary {
            mean: 80.0,
            p99: 148.0,
            max: 255.0,
            ..Default::default()
        };
        let t = one_way_round_trip_table(&l);
        assert!(
            t.contains("mean                   |            40 |             80 |"),
            "{t}"
        );
    }
}
