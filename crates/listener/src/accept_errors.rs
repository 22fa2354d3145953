//! How often a failing `accept` is logged. A listener out of file
//! descriptors (EMFILE) fails every accept it retries, ~50 a second with
//! the retry pause; one warning per interval, with how many failures it
//! stands for, says the same without flooding the log. Every failure is
//! still counted in the listener's metrics.

use std::time::{Duration, Instant};

/// Shortest time between two warnings about failed accepts.
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Decides which failed accepts are logged.
#[derive(Debug, Default)]
pub struct AcceptErrorLog {
    last: Option<Instant>,
    since_last: u64,
}

impl AcceptErrorLog {
    /// Notes a failure at `now`; `Some(n)` when it is to be logged, `n`
    /// being the failures it stands for (itself and those not logged
    /// since the previous warning).
    pub fn failed(&mut self, now: Instant) -> Option<u64> {
        self.since_last += 1;
        let due = self
            .last
            .is_none_or(|t| now.duration_since(t) >= ACCEPT_ERROR_LOG_INTERVAL);
        if !due {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since_last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_interval_counting_the_failures_in_between() {
        let mut log = AcceptErrorLog::default();
        let t0 = Instant::now();
        assert_eq!(log.failed(t0), Some(1), "the first failure is logged");
        for i in 1..100 {
            let t = t0 + Duration::from_millis(20 * i);
            assert_eq!(log.failed(t), None, "failure {i} within the interval");
        }
        // The 101st failure, past the interval: it and the 99 before.
        assert_eq!(log.failed(t0 + ACCEPT_ERROR_LOG_INTERVAL), Some(100));
        assert_eq!(log.failed(t0 + ACCEPT_ERROR_LOG_INTERVAL), None);
    }
}
