//! Latency recording with HdrHistogram (3 significant digits, nanosecond
//! resolution up to one hour) and the percentile summary every report carries.
//!
//! A histogram of that range is ~350 KiB of counters. The push bench keeps
//! a recorder per simulated user (thousands), so a recorder first keeps
//! its values in a small buffer and only builds its histogram when the
//! buffer fills: a thousand users each holding a histogram cost the client
//! 700 MiB and a cache miss per recorded value (16 % of its CPU in
//! `record` and `add`), CPU it took from the server under test.

use std::borrow::Cow;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest latency recorded; anything above is clamped (and still counted).
const MAX_NS: u64 = 3_600_000_000_000;
/// Values buffered before they go into the histogram.
const BUFFERED: usize = 4096;

/// Records latencies in nanoseconds.
#[derive(Debug, Clone, Default)]
pub struct LatencyRecorder {
    /// Built when `buffer` first fills.
    hist: Option<Histogram<u64>>,
    /// Values not in `hist` yet (each already clamped to the bounds).
    buffer: Vec<u64>,
}

fn empty_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds")
}

impl LatencyRecorder {
    /// Records one latency.
    pub fn record_ns(&mut self, ns: u64) {
        if self.buffer.len() == BUFFERED {
            self.flush();
        }
        self.buffer.push(ns.clamp(1, MAX_NS));
    }

    /// Moves the buffered values into the histogram.
    fn flush(&mut self) {
        let hist = self.hist.get_or_insert_with(empty_histogram);
        for &v in &self.buffer {
            hist.saturating_record(v);
        }
        self.buffer.clear();
    }

    /// Records one latency given as a `Duration`.
    pub fn record(&mut self, d: std::time::Duration) {
        self.record_ns(d.as_nanos().min(u64::MAX as u128) as u64);
    }

    /// Records the latency `d` `n` times at once (many requests known to
    /// be at least that late).
    pub fn record_n(&mut self, d: std::time::Duration, n: u64) {
        if n == 0 {
            return;
        }
        let ns = (d.as_nanos().min(MAX_NS as u128) as u64).max(1);
        self.hist
            .get_or_insert_with(empty_histogram)
            .saturating_record_n(ns, n);
    }

    /// Adds every value of `other` (per-connection recorders merged at the end).
    pub fn merge(&mut self, other: &LatencyRecorder) {
        if let Some(h) = &other.hist {
            self.hist
                .get_or_insert_with(empty_histogram)
                .add(h)
                .expect("same bounds");
        }
        for &v in &other.buffer {
            self.record_ns(v);
        }
    }

    /// Adds every value of `other` plus `shift`: latencies recorded up to
    /// one instant (a window's end), carried to a later one (the end of the
    /// run, not known yet when they were recorded).
    pub fn merge_shifted(&mut self, other: &LatencyRecorder, shift: std::time::Duration) {
        let shift = shift.as_nanos().min(MAX_NS as u128) as u64;
        if let Some(h) = &other.hist {
            let mine = self.hist.get_or_insert_with(empty_histogram);
            for v in h.iter_recorded() {
                let ns = v.value_iterated_to().saturating_add(shift).clamp(1, MAX_NS);
                mine.saturating_record_n(ns, v.count_at_value());
            }
        }
        for &v in &other.buffer {
            self.record_ns(v.saturating_add(shift));
        }
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.hist.as_ref().map_or(0, |h| h.len()) + self.buffer.len() as u64
    }

    /// Every value recorded, as one histogram.
    fn histogram(&self) -> Cow<'_, Histogram<u64>> {
        match (&self.hist, self.buffer.is_empty()) {
            (Some(h), true) => Cow::Borrowed(h),
            _ => {
                let mut all = self.clone();
                all.flush();
                Cow::Owned(all.hist.expect("flush builds the histogram"))
            }
        }
    }

    /// The percentile summary in microseconds, or `None` when nothing was
    /// recorded (a report never shows a latency of 0 for "not measured").
    pub fn summary_us(&self) -> Option<LatencySummary> {
        if self.count() == 0 {
            return None;
        }
        let h = self.histogram();
        let us = |ns: u64| ns as f64 / 1000.0;
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
    fn buffered_and_histogram_values_count_alike_and_merge() {
        // More values than the buffer holds, in two recorders merged in
        // both states (one with a histogram, one still buffering).
        let mut big = LatencyRecorder::default();
        for i in 1..=(BUFFERED as u64 * 2 + 10) {
            big.record_ns(i * 1000);
        }
        let mut small = LatencyRecorder::default();
        small.record_ns(5_000_000_000);
        let n = big.count() + 1;
        let mut all = LatencyRecorder::default();
        all.merge(&small);
        all.merge(&big);
        assert_eq!(all.count(), n);
        let s = all.summary_us().unwrap();
        assert!((s.max - 5_000_000.0).abs() < 5_000.0, "{s:?}");
        let half = (BUFFERED as f64 * 2.0 + 10.0) / 2.0;
        assert!((s.p50 - half).abs() < half * 0.01, "{s:?}");
        // Values above the bound are clamped, still counted.
        all.record_ns(u64::MAX);
        assert_eq!(all.count(), n + 1);
    }

    #[test]
    fn shifted_values_keep_their_count_and_move_by_the_shift() {
        let mut late = LatencyRecorder::default();
        for i in 1..=(BUFFERED as u64 + 100) {
            late.record_ns(i * 1000);
        }
        let mut all = LatencyRecorder::default();
        all.merge_shifted(&late, std::time::Duration::from_millis(500));
        assert_eq!(all.count(), late.count());
        let (a, l) = (all.summary_us().unwrap(), late.summary_us().unwrap());
        for (x, y) in [(a.p50, l.p50), (a.max, l.max), (a.mean, l.mean)] {
            assert!((x - y - 500_000.0).abs() < 0.002 * x, "{a:?} {l:?}");
        }
    }

    #[test]
    fn a_value_recorded_n_times_counts_n_times_beside_buffered_ones() {
        let mut r = LatencyRecorder::default();
        r.record_ns(1_000);
        r.record_n(std::time::Duration::from_secs(2), 3);
        r.record_n(std::time::Duration::from_secs(9), 0);
        assert_eq!(r.count(), 4);
        let s = r.summary_us().unwrap();
        assert!((s.max - 2_000_000.0).abs() < 2_000.0, "{s:?}");
        assert!((s.p50 - 2_000_000.0).abs() < 2_000.0, "{s:?}");
    }

    #[test]
    fn an_empty_recorder_has_no_summary_rather_than_zeros() {
        assert_eq!(LatencyRecorder::default().summary_us(), None);
    }
}
