//! When a websocket session writes what it has pending: at once, or — with
//! `[push] write_delay_ms` — once the first pending packet has waited that
//! long, so that one flush carries what arrived meanwhile (fewer writes and
//! wake-ups when each session gets many messages a second, for up to that
//! much latency). Long-polling holds its answer the same way
//! ([`crate::transport::polling`]).

use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::task::DELIVERY_BATCH;

/// Decides when pending packets are written: at once when no delay is set
/// or a whole delivery batch is pending, else once the first has waited.
pub struct FlushTimer {
    delay: Duration,
    due_at: Option<Instant>,
}

impl FlushTimer {
    /// A timer holding packets `delay` (zero: never holds).
    pub fn new(delay: Duration) -> Self {
        FlushTimer {
            delay,
            due_at: None,
        }
    }

    /// Whether `pending` packets are to be written now; arms the timer at
    /// the first one otherwise.
    pub fn due(&mut self, pending: usize) -> bool {
        if pending == 0 {
            self.due_at = None;
            return false;
        }
        if self.delay.is_zero() || pending >= DELIVERY_BATCH {
            return true;
        }
        let now = Instant::now();
        let at = *self.due_at.get_or_insert(now + self.delay);
        now >= at
    }

    /// The pending packets were written.
    pub fn done(&mut self) {
        self.due_at = None;
    }

    /// Whether packets are being held.
    pub fn is_armed(&self) -> bool {
        self.due_at.is_some()
    }

    /// Resolves when the held packets are due.
    pub async fn wait(&self) {
        if let Some(at) = self.due_at {
            sleep_until(at).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_delay_anything_pending_is_due() {
        let mut t = FlushTimer::new(Duration::ZERO);
        assert!(!t.due(0));
        assert!(t.due(1));
        assert!(!t.is_armed());
    }

    #[tokio::test]
    async fn the_first_pending_packet_waits_the_delay_unless_a_batch_is_full() {
        let mut t = FlushTimer::new(Duration::from_millis(200));
        assert!(!t.due(1), "held");
        assert!(t.is_armed());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !t.due(3),
            "still held: the timer runs from the first packet"
        );
        assert!(t.due(DELIVERY_BATCH), "a full batch goes at once");
        let started = Instant::now();
        t.wait().await;
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(t.due(3), "the delay has passed");
        t.done();
        assert!(!t.is_armed());
        assert!(!t.due(0));
    }
}
