//! A warning that may repeat thousands of times a second (a hint dropped
//! for each write while a replica is away and its bound is full) is logged
//! at most once per period, with how many were not logged meanwhile: the
//! log says what happens without drowning everything else in it.

use std::time::{Duration, Instant};

/// Counts occurrences and says when one should be logged.
#[derive(Debug)]
pub struct LogEvery {
    period: Duration,
    last: Option<Instant>,
    unlogged: u64,
}

impl LogEvery {
    /// At most one log line per `period`.
    pub fn new(period: Duration) -> Self {
        LogEvery {
            period,
            last: None,
            unlogged: 0,
        }
    }

    /// One more occurrence at `now`: `Some(n)` when it should be logged,
    /// `n` being the occurrences since the last one logged that were not
    /// (0 for the first); `None` when it is only counted.
    pub fn occurred(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.unlogged += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.unlogged))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_logged_then_one_per_period_with_the_count_in_between() {
        let t0 = Instant::now();
        let mut every = LogEvery::new(Duration::from_secs(10));
        assert_eq!(every.occurred(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(every.occurred(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(every.occurred(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(every.occurred(t0 + Duration::from_secs(11)), None);
        assert_eq!(every.occurred(t0 + Duration::from_secs(30)), Some(1));
    }
}
