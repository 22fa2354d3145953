//! [`LatencyHistogram`]: a lock-free histogram of durations, recorded on the
//! hot path by many sessions at once and read (and reset) by one reader —
//! the once-a-second `$sys.stats` publisher.
//!
//! Buckets are log-linear: values below 16 µs each have their own bucket,
//! above that every power of two is split into 16 buckets, so a recorded
//! value is reported within 1/16 (6.25 %) of itself. Recording is one
//! relaxed `fetch_add`; there is no lock, so sessions on different cores
//! never wait for each other. `hdrhistogram` would need a lock around it for
//! concurrent writers, which the hot path cannot afford.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two (as bits).
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Powers of two covered above the linear range: up to 2^44 µs (~200 days).
const OCTAVES: usize = 41;
const BUCKETS: usize = SUB as usize * (OCTAVES + 1);

/// Durations in microseconds, counted in log-linear buckets.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn index(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros(); // ≥ SUB_BITS
    let sub = (us >> (exp - SUB_BITS)) & (SUB - 1);
    let i = (exp - SUB_BITS + 1) as usize * SUB as usize + sub as usize;
    i.min(BUCKETS - 1)
}

/// The largest value that lands in bucket `i` (what a percentile reports:
/// never below the true value).
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let exp = i / SUB - 1 + SUB_BITS as u64;
    let sub = i % SUB;
    let width = 1u64 << (exp - SUB_BITS as u64);
    ((SUB + sub) << (exp - SUB_BITS as u64)) + width - 1
}

impl LatencyHistogram {
    /// Counts one duration of `us` microseconds.
    pub fn record_us(&self, us: u64) {
        self.record_us_n(us, 1);
    }

    /// Counts `n` durations of `us` microseconds (a batch whose messages
    /// waited alike costs one atomic add).
    pub fn record_us_n(&self, us: u64, n: u64) {
        self.buckets[index(us)].fetch_add(n, Ordering::Relaxed);
    }

    /// Everything counted since the last `take`, and a fresh start: the
    /// window the snapshot describes is the time between two calls.
    pub fn take(&self) -> LatencySnapshot {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.swap(0, Ordering::Relaxed))
            .collect();
        LatencySnapshot { counts }
    }
}

/// The counts of one window, for percentiles.
#[derive(Debug, Clone)]
pub struct LatencySnapshot {
    counts: Vec<u64>,
}

impl LatencySnapshot {
    /// Values counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The value (µs) at or below which `q` (0.0–1.0) of the values lie,
    /// rounded up to its bucket's upper edge; `None` when nothing was counted.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        // The rank of the value asked for, 1-based, at least the first.
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper(i));
            }
        }
        Some(upper(BUCKETS - 1))
    }

    /// The largest value counted (its bucket's upper edge).
    pub fn max_us(&self) -> Option<u64> {
        self.counts.iter().rposition(|&c| c > 0).map(upper)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_empty_window_has_no_percentiles() {
        let h = LatencyHistogram::default();
        assert_eq!(h.take().quantile_us(0.5), None);
        h.record_us(3);
        assert_eq!(h.take().quantile_us(0.5), Some(3));
        assert_eq!(h.take().count(), 0, "take resets the window");
    }

    #[test]
    fn percentiles_split_the_values() {
        let h = LatencyHistogram::default();
        for v in 1..=1000 {
            h.record_us(v);
        }
        let s = h.take();
        let p50 = s.quantile_us(0.5).unwrap();
        let p99 = s.quantile_us(0.99).unwrap();
        assert!((500..=532).contains(&p50), "{p50}");
        assert!((990..=1054).contains(&p99), "{p99}");
        assert!(s.max_us().unwrap() >= 1000);
    }

    proptest! {
        #[test]
        fn a_value_lands_in_a_bucket_that_holds_it(v in any::<u64>()) {
            let i = index(v);
            prop_assert!(upper(i) >= v || i == BUCKETS - 1);
            if i > 0 && i < BUCKETS - 1 {
                prop_assert!(upper(i - 1) < v);
                // Within 1/16 of the value.
                prop_assert!(upper(i) - v <= v / SUB + 1);
            }
        }

        #[test]
        fn quantiles_never_report_below_the_true_value(
            mut vs in proptest::collection::vec(0u64..10_000_000, 1..200),
            q in 0.0f64..=1.0,
        ) {
            let h = LatencyHistogram::default();
            for &v in &vs {
                h.record_us(v);
            }
            vs.sort_unstable();
            let rank = ((q * vs.len() as f64).ceil() as usize).max(1);
            let exact = vs[rank - 1];
            let got = h.take().quantile_us(q).unwrap();
            prop_assert!(got >= exact && got - exact <= exact / SUB + 1, "{got} vs {exact}");
        }
    }
}
