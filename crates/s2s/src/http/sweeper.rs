//! The periodic sweep of the HTTP transaction table. Requests roll back the
//! expired transactions they come across, but a client that posts its
//! FlowFiles and disappears sends no more requests: without a timer its
//! transaction, and the in-flight budget its FlowFiles hold, would stay
//! until some other client opened a transaction. Likewise the messages of
//! an abandoned output transaction would wait that long to go back to
//! their port.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::transactions::HttpTransactions;

/// Shortest time between two sweeps.
const MIN_PERIOD: Duration = Duration::from_millis(100);
/// Longest time between two sweeps: how late past its expiry a transaction
/// may be rolled back, at most.
const MAX_PERIOD: Duration = Duration::from_secs(5);

/// A running sweep task; it ends when this is dropped (with the router
/// whose state holds it, so with the `[http]` server).
#[derive(Debug)]
pub(crate) struct Sweeper {
    _stop: DropGuard,
}

/// How often to sweep: half the shorter of the TTL and the lifetime, so a
/// transaction is rolled back within half a TTL of its expiry, bounded to
/// [`MIN_PERIOD`, `MAX_PERIOD`].
pub(crate) fn period(transactions: &HttpTransactions) -> Duration {
    (transactions.ttl().min(transactions.lifetime()) / 2).clamp(MIN_PERIOD, MAX_PERIOD)
}

/// Sweeps `transactions` every [`period`] until the returned [`Sweeper`]
/// is dropped. Must be called inside a tokio runtime.
pub(crate) fn spawn(transactions: Arc<HttpTransactions>) -> Sweeper {
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let mut every = tokio::time::interval(period(&transactions));
    // After a stall (a busy runtime), one sweep catches up on everything.
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stopped.cancelled() => return,
                _ = every.tick() => {
                    transactions.sweep();
                }
            }
        }
    });
    Sweeper {
        _stop: stop.drop_guard(),
    }
}

#[cfg(test)]
mod tests {
    use tidegate_hub::HubMetrics;

    use super::*;
    use crate::S2sConfig;

    fn table(ttl_secs: u64, lifetime_ms: u64) -> HttpTransactions {
        let config = S2sConfig {
            http_transaction_ttl_secs: ttl_secs,
            max_transaction_ms: lifetime_ms,
            ..S2sConfig::default()
        };
        HttpTransactions::new(&config, HubMetrics::default().listener("s2s"))
    }

    #[test]
    fn the_period_is_half_the_shorter_expiry_within_bounds() {
        assert_eq!(period(&table(1, 0)), Duration::from_millis(500));
        assert_eq!(period(&table(30, 0)), MAX_PERIOD);
        assert_eq!(period(&table(30, 2_000)), Duration::from_secs(1));
        assert_eq!(period(&table(30, 50)), MIN_PERIOD);
    }

    #[tokio::test]
    async fn the_task_ends_when_the_sweeper_is_dropped() {
        let t = Arc::new(table(1, 0));
        let sweeper = spawn(t.clone());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(Arc::strong_count(&t), 2, "the task holds the table");
        drop(sweeper);
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&t) > 1 {
            assert!(tokio::time::Instant::now() < until, "the task still runs");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
