//! Open-model pacing, as wrk2 does: message `n` is *due* at
//! `start + n / rate`, and latency is measured from that due time, not from
//! when the sender got round to it, so a stalled server cannot hide its stall
//! (coordinated omission).

use std::time::{Duration, Instant};

/// The schedule of a fixed-rate sender.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    start: Instant,
    interval_ns: f64,
}

impl Schedule {
    /// A schedule of `rate` messages per second starting at `start`.
    pub fn new(start: Instant, rate: f64) -> Self {
        Schedule {
            start,
            interval_ns: 1e9 / rate.max(1e-9),
        }
    }

    /// When message `n` (from 0) is due.
    pub fn due(&self, n: u64) -> Instant {
        self.start + Duration::from_nanos((n as f64 * self.interval_ns) as u64)
    }

    /// How many messages are due by `now` (the index of the first not yet due).
    pub fn due_by(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start).as_nanos() as f64;
        (elapsed / self.interval_ns) as u64 + 1
    }

    /// The start instant.
    pub fn start(&self) -> Instant {
        self.start
    }
}

/// Sleeps until `t`: tokio's timer for the bulk, then a short spin for the
/// last stretch, because the timer's granularity is a millisecond.
pub async fn sleep_until(t: Instant) {
    const SPIN: Duration = Duration::from_micros(1500);
    let now = Instant::now();
    if t > now + SPIN {
        tokio::time::sleep_until((t - SPIN).into()).await;
    }
    while Instant::now() < t {
        std::hint::spin_loop();
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_follow_the_rate() {
        let s0 = Instant::now();
        let s = Schedule::new(s0, 1000.0);
        assert_eq!(s.due(0), s0);
        assert_eq!(s.due(1000), s0 + Duration::from_secs(1));
        assert_eq!(s.due_by(s0 + Duration::from_millis(10)), 11);
    }
}
