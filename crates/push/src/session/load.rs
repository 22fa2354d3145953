//! Whether the server is loaded, as its sessions see it: how late the
//! runtime wakes a task whose timer is due. Idle or lightly used, a
//! timer fires within about a millisecond; when every worker thread is
//! busy, a woken task waits in the run queue behind the others, and that
//! wait is what each delivery pays too.
//!
//! `[push] busy_write_delay_ms` holds writes only while the server is
//! loaded ([`crate::session::flush`]): batching there lowers the number of
//! writes (and, over polling, of HTTP requests) just when they are what
//! the server has too many of, and costs nothing when it is not.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;
use tokio::time::Instant;

/// How often the probe's timer is set.
pub const PROBE_PERIOD: Duration = Duration::from_millis(10);

/// The server counts as loaded while the smoothed lateness of the probe's
/// timer is at least this. An idle runtime reads about 1 ms (timers fire
/// on millisecond ticks); a saturated one 3–8 ms and more.
pub const LOADED_LAG: Duration = Duration::from_millis(2);

const AUTO: u8 = 0;
const LOADED: u8 = 1;
const IDLE: u8 = 2;

/// The smoothed lateness of a periodic timer, in microseconds (the gauge
/// exported as `tidegate_push_scheduling_lag_us`).
#[derive(Debug, Default)]
pub struct LoadProbe {
    lag_us: Gauge,
    forced: AtomicU8,
}

impl LoadProbe {
    /// A probe reading "not loaded" until [`LoadProbe::spawn`] runs it.
    pub fn new() -> Arc<Self> {
        Arc::new(LoadProbe::default())
    }

    /// Reports the lag in `/metrics`.
    pub fn register_metrics(&self, m: &HubMetrics) {
        m.register(
            "push_scheduling_lag_us",
            "How late, smoothed, the runtime wakes a task whose timer is due (push holds busy sessions' writes while it is high)",
            self.lag_us.clone(),
        );
    }

    /// Runs the probe on the current runtime (if any) for as long as the
    /// probe lives.
    pub fn spawn(self: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak: Weak<LoadProbe> = Arc::downgrade(self);
        rt.spawn(async move {
            loop {
                let started = Instant::now();
                tokio::time::sleep(PROBE_PERIOD).await;
                let late = started.elapsed().saturating_sub(PROBE_PERIOD);
                let Some(probe) = weak.upgrade() else { return };
                probe.note(late);
            }
        });
    }

    /// Takes one lateness sample into the average (1/32 new: about a third
    /// of a second of samples, so one stall does not count as load but a
    /// sustained one is seen within a second). The same weight both ways:
    /// a quicker way down (tried: 1/4) let a saturated server's average
    /// flicker below the bound between late samples, and its sessions
    /// stopped batching (long-poll p99.9 at 250,000/s: 325–566 ms instead
    /// of 113–129).
    pub fn note(&self, late: Duration) {
        let sample = late.as_micros().min(i64::MAX as u128) as i64;
        let old = self.lag_us.get();
        self.lag_us.set(old + (sample - old) / 32);
    }

    /// The smoothed lateness.
    pub fn lag(&self) -> Duration {
        Duration::from_micros(self.lag_us.get().max(0) as u64)
    }

    /// Whether the server is loaded now.
    pub fn is_loaded(&self) -> bool {
        match self.forced.load(Ordering::Relaxed) {
            LOADED => true,
            IDLE => false,
            _ => self.lag() >= LOADED_LAG,
        }
    }

    /// Overrides the measurement (`Some(loaded)`) or returns to it
    /// (`None`): for tests and benchmarks that need either behaviour on
    /// demand.
    pub fn force(&self, loaded: Option<bool>) {
        let v = match loaded {
            Some(true) => LOADED,
            Some(false) => IDLE,
            None => AUTO,
        };
        self.forced.store(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_follows_sustained_lateness_and_forgets_it() {
        let p = LoadProbe::default();
        assert!(!p.is_loaded());
        p.note(Duration::from_millis(30));
        assert!(!p.is_loaded(), "one stall is not load: lag {:?}", p.lag());
        for _ in 0..200 {
            p.note(Duration::from_millis(5));
        }
        assert!(p.is_loaded(), "lag {:?}", p.lag());
        for _ in 0..200 {
            p.note(Duration::ZERO);
        }
        assert!(!p.is_loaded(), "lag {:?}", p.lag());
        p.force(Some(true));
        assert!(p.is_loaded());
        p.force(None);
        assert!(!p.is_loaded());
    }

    /// (That an idle runtime reads as not loaded is the smoothing's job,
    /// tested above with set lags: timed on a machine that runs other
    /// tests, an idle runtime's timers can be late too.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_runtime_kept_busy_reads_as_loaded() {
        let p = LoadProbe::new();
        p.spawn();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Tasks that each hold the only worker thread for 8 ms.
        let busy = tokio::spawn(async {
            for _ in 0..150 {
                std::thread::sleep(Duration::from_millis(8));
                tokio::task::yield_now().await;
            }
        });
        busy.await.unwrap();
        assert!(p.is_loaded(), "busy, lag {:?}", p.lag());
    }
}
