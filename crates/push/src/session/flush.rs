//! When a session writes what it has pending. Two settings hold a write
//! back so that one flush (or one long-poll answer) carries what arrives
//! meanwhile: fewer writes, requests and wake-ups when each session gets
//! many messages a second.
//!
//! - `[push] busy_write_delay_ms` (default 10): the first pending packet
//!   waits that long, but only while the server is loaded
//!   ([`crate::session::load`]) and only in a *busy* session — one whose
//!   previous packet came less than [`BUSY_WINDOW_FACTOR`] times the delay
//!   before it. Otherwise a packet goes at once, so a server with CPU to
//!   spare adds no latency; a loaded one sends each busy session's
//!   messages a few at a time, and so makes fewer writes (over polling,
//!   fewer HTTP requests) just when it has too many.
//!   Busy is judged by when packets arrive, not by when they were written,
//!   and the window is wide, because on a loaded server each session task
//!   runs late and takes its messages in bursts tens of milliseconds apart
//!   (measured: with a window of twice the delay, sessions stopped
//!   batching under load and the long-poll p99.9 tripled), and a session
//!   answering one message per write falls further behind.
//! - `[push] write_delay_ms` (default 0): the first pending packet always
//!   waits that long.
//!
//! Long-polling holds the answer of a GET that had to wait the same way
//! ([`crate::transport::polling`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::load::LoadProbe;
use super::task::DELIVERY_BATCH;

/// A session is busy when its previous packet came less than this many
/// `busy_write_delay_ms` before the current one.
pub const BUSY_WINDOW_FACTOR: u32 = 10;

/// How long a write whose first packet came `since_previous` after the
/// packet before it is held: `delay`, or `busy_delay` when the server is
/// `loaded` and that gap is less than [`BUSY_WINDOW_FACTOR`] times
/// `busy_delay`.
pub fn hold_for(
    delay: Duration,
    busy_delay: Duration,
    since_previous: Option<Duration>,
    loaded: bool,
) -> Duration {
    if loaded && since_previous.is_some_and(|gap| gap < busy_delay * BUSY_WINDOW_FACTOR) {
        delay.max(busy_delay)
    } else {
        delay
    }
}

/// When packets arrive: how long the newest came after the ones before
/// (what [`hold_for`] calls `since_previous`).
#[derive(Debug, Default, Clone, Copy)]
pub struct ArrivalGap {
    last: Option<Instant>,
    gap: Option<Duration>,
}

impl ArrivalGap {
    /// Packets arrived at `now`.
    pub fn note(&mut self, now: Instant) {
        self.gap = self.last.map(|l| now.saturating_duration_since(l));
        self.last = Some(now);
    }

    /// How long the newest packets came after the previous ones (None
    /// before the second arrival).
    pub fn gap(&self) -> Option<Duration> {
        self.gap
    }
}

/// Decides when pending packets are written: at once when a whole delivery
/// batch is pending, else once the first has been held ([`hold_for`]).
pub struct FlushTimer {
    delay: Duration,
    busy_delay: Duration,
    due_at: Option<Instant>,
    /// When packets were seen pending.
    arrivals: ArrivalGap,
    load: Arc<LoadProbe>,
}

impl FlushTimer {
    /// A timer holding the first pending packet `delay`, or `busy_delay`
    /// in a busy session while `load` says the server is loaded (zero for
    /// both: never holds).
    pub fn new(delay: Duration, busy_delay: Duration, load: Arc<LoadProbe>) -> Self {
        FlushTimer {
            delay,
            busy_delay,
            due_at: None,
            arrivals: ArrivalGap::default(),
            load,
        }
    }

    /// Whether `pending` packets are to be written now; arms the timer at
    /// the first one otherwise. Called after every wake-up that may have
    /// queued packets: it also notes when packets arrive.
    pub fn due(&mut self, pending: usize) -> bool {
        if pending == 0 {
            self.due_at = None;
            return false;
        }
        if (self.delay.is_zero() && self.busy_delay.is_zero()) || pending >= DELIVERY_BATCH {
            return true;
        }
        let now = Instant::now();
        self.arrivals.note(now);
        let at = match self.due_at {
            Some(at) => at,
            None => {
                let hold = hold_for(
                    self.delay,
                    self.busy_delay,
                    self.arrivals.gap(),
                    self.load.is_loaded(),
                );
                *self.due_at.insert(now + hold)
            }
        };
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
        let mut t = FlushTimer::new(Duration::ZERO, Duration::ZERO, LoadProbe::new());
        assert!(!t.due(0));
        assert!(t.due(1));
        assert!(!t.is_armed());
    }

    #[tokio::test]
    async fn the_first_pending_packet_waits_the_delay_unless_a_batch_is_full() {
        let mut t = FlushTimer::new(Duration::from_millis(200), Duration::ZERO, LoadProbe::new());
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

    #[tokio::test]
    async fn the_busy_delay_holds_only_packets_that_follow_others_closely_when_loaded() {
        let busy = Duration::from_millis(50);
        let load = LoadProbe::new();
        let mut t = FlushTimer::new(Duration::ZERO, busy, load.clone());
        assert!(t.due(1), "not loaded: at once");
        t.done();
        assert!(t.due(1), "not loaded: at once even right after another");
        t.done();
        load.force(Some(true));
        tokio::time::sleep(busy * BUSY_WINDOW_FACTOR + Duration::from_millis(20)).await;
        assert!(
            t.due(1),
            "the first packet after a quiet spell goes at once"
        );
        t.done();
        assert!(!t.due(1), "a packet right after another is held");
        assert!(t.due(DELIVERY_BATCH), "unless a whole batch is pending");
        let started = Instant::now();
        t.wait().await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(45), "{waited:?}");
        assert!(t.due(1));
        t.done();
        tokio::time::sleep(busy * BUSY_WINDOW_FACTOR + Duration::from_millis(20)).await;
        assert!(t.due(1), "quiet for longer than the window: at once again");
    }

    #[test]
    fn a_packet_is_held_when_loaded_and_within_the_busy_window_of_the_last() {
        let ms = Duration::from_millis;
        let window = ms(10) * BUSY_WINDOW_FACTOR;
        assert_eq!(hold_for(ms(0), ms(10), None, true), ms(0));
        assert_eq!(hold_for(ms(0), ms(10), Some(ms(5)), true), ms(10));
        assert_eq!(hold_for(ms(0), ms(10), Some(ms(5)), false), ms(0));
        assert_eq!(hold_for(ms(0), ms(10), Some(window - ms(1)), true), ms(10));
        assert_eq!(hold_for(ms(0), ms(10), Some(window), true), ms(0));
        assert_eq!(hold_for(ms(3), ms(0), Some(ms(0)), true), ms(3));
        assert_eq!(hold_for(ms(3), ms(10), Some(ms(0)), false), ms(3));
        assert_eq!(hold_for(ms(30), ms(10), Some(ms(1)), true), ms(30));
        assert_eq!(hold_for(ms(3), ms(10), Some(window * 2), true), ms(3));
    }
}
