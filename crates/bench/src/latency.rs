//! Latency recording with HdrHistogram (3 significant digits, nanosecond
//! resolution up to one hour) and the percentile summary every report carries.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest latency recorded; anything above is clamped (and still counted).
const MAX_NS: u64 = 3_600_000_000_000;

/// Records latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        LatencyRecorder {
            hist: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds"),
        }
    }
}

impl LatencyRecorder {
    /// Records one latency.
    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, MAX_NS));
    }

    /// Records one latency given as a `Duration`.
    pub fn record(&mut self, d: std::time::Duration) {
        self.record_ns(d.as_nanos().min(u64::MAX as u128) as u64);
    }

    /// Adds every value of `other` (per-connection recorders merged at the end).
    pub fn merge(&mut self, other: &LatencyRecorder) {
        self.hist.add(&other.hist).expect("same bounds");
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The percentile summary in microseconds, or `None` when nothing was
    /// recorded (a report never shows a latency of 0 for "not measured").
    pub fn summary_us(&self) -> Option<LatencySummary> {
        let h = &self.hist;
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return None;
        }
        Some(LatencySummary {
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            p99999: us(h.value_at_quantile(0.99999)),
            max: us(h.max()),
        })
    }
}

/// Latency percentiles in microseconds (the `latency_us` object of the JSON report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// 99.999th percentile.
    pub p99999: f64,
    /// Worst.
    pub max: f64,
}

impl LatencySummary {
    /// Every value divided by two: the "~one way" column of seed 002.
    pub fn halved(&self) -> LatencySummary {
        LatencySummary {
            mean: self.mean / 2.0,
            p50: self.p50 / 2.0,
            p90: self.p90 / 2.0,
            p99: self.p99 / 2.0,
            p999: self.p999 / 2.0,
            p9999: self.p9999 / 2.0,
            p99999: self.p99999 / 2.0,
            max: self.max / 2.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_recorded_values() {
        let mut r = LatencyRecorder::default();
        for i in 1..=1000u64 {
            r.record_ns(i * 1000);
        }
        let s = r.summary_us().unwrap();
        assert!((s.p50 - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99 - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.max - 1000.0).abs() < 1.0, "{s:?}");
        assert_eq!(r.count(), 1000);
    }

    #[test]
    fn an_empty_recorder_has_no_summary_rather_than_zeros() {
        assert_eq!(LatencyRecorder::default().summary_us(), None);
    }
}
