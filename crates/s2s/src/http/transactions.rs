//! [`HttpTransactions`]: the open HTTP transactions, each with a TTL that
//! the client extends with `PUT`, up to a total lifetime of
//! `max_transaction_ms` however often it does; expired ones are rolled back
//! (an input transaction's FlowFiles and their in-flight budget dropped, an
//! output transaction's messages put back on its port) by whichever request
//! finds them first, or by the periodic sweep (`super::sweeper`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tidegate_hub::{BudgetPermit, ListenerMetrics, SharedMessage};
use tracing::{debug, info};

use crate::codec::DataPacket;
use crate::ports::PortRef;
use crate::S2sConfig;

/// Where a transaction stands.
#[derive(Debug)]
pub(crate) enum TxData {
    /// Created; no FlowFiles moved yet.
    Open,
    /// Input port: FlowFiles received and checksummed, waiting for commit,
    /// with the in-flight budget bytes they hold until then.
    Received {
        packets: Vec<DataPacket>,
        held: BudgetPermit,
    },
    /// Output port: FlowFiles sent with this checksum, waiting for commit.
    Sent {
        msgs: Vec<SharedMessage>,
        crc: String,
    },
    /// Taken by a request in progress.
    Busy,
}

/// One open transaction.
#[derive(Debug)]
pub(crate) struct HttpTransaction {
    pub(crate) port: PortRef,
    pub(crate) data: TxData,
    expires: Instant,
    /// `max_transaction_ms` after creation; no extension goes past it.
    /// `None`: no limit.
    deadline: Option<Instant>,
}

/// Why a transaction could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyTransactions;

/// The open HTTP transactions, bounded in number.
#[derive(Debug)]
pub struct HttpTransactions {
    map: Mutex<HashMap<String, HttpTransaction>>,
    ttl: Duration,
    lifetime: Duration,
    max: usize,
    /// Counts each expired transaction rolled back (`transaction_expired`).
    metrics: ListenerMetrics,
}

impl HttpTransactions {
    /// An empty table with the configured TTL, lifetime and bound; expired
    /// transactions are counted in `metrics`.
    pub fn new(config: &S2sConfig, metrics: ListenerMetrics) -> Self {
        HttpTransactions {
            map: Mutex::new(HashMap::new()),
            ttl: Duration::from_secs(config.http_transaction_ttl_secs.max(1)),
            lifetime: config.max_transaction(),
            max: config.max_http_transactions.max(1),
            metrics,
        }
    }

    /// The TTL advertised to clients.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The longest a transaction lives however often it is extended
    /// (`max_transaction_ms`; [`Duration::MAX`] for no limit).
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Open transactions now.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// True when none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Opens a transaction on `port`; returns its identifier.
    pub(crate) fn create(&self, port: PortRef) -> Result<String, TooManyTransactions> {
        self.sweep();
        let mut map = self.map.lock();
        if map.len() >= self.max {
            return Err(TooManyTransactions);
        }
        let id = uuid::Uuid::new_v4().to_string();
        let now = Instant::now();
        // Beyond what an `Instant` can hold is no limit.
        let deadline = now.checked_add(self.lifetime);
        map.insert(
            id.clone(),
            HttpTransaction {
                port,
                data: TxData::Open,
                expires: capped(now + self.ttl, deadline),
                deadline,
            },
        );
        Ok(id)
    }

    /// Pushes the expiry of `id` out by one TTL, never past its lifetime;
    /// false if unknown or expired.
    pub(crate) fn extend(&self, id: &str) -> bool {
        let mut map = self.map.lock();
        match map.get_mut(id) {
            Some(t) if t.expires > Instant::now() => {
                t.expires = capped(Instant::now() + self.ttl, t.deadline);
                true
            }
            _ => false,
        }
    }

    /// Marks a live, still `Open` transaction busy for a request that moves
    /// FlowFiles; `None` (and nothing changed) if unknown, expired or not open.
    pub(crate) fn take_open(&self, id: &str) -> Option<PortRef> {
        let mut map = self.map.lock();
        let t = map.get_mut(id)?;
        if t.expires <= Instant::now() {
            let t = map.remove(id)?;
            drop(map);
            self.expire(t);
            return None;
        }
        if !matches!(t.data, TxData::Open) {
            return None;
        }
        t.expires = capped(Instant::now() + self.ttl, t.deadline);
        t.data = TxData::Busy;
        Some(t.port.clone())
    }

    /// Puts data back after a request (e.g. FlowFiles received). If the
    /// transaction vanished meanwhile (cancelled, expired), the data is
    /// rolled back instead, so sent messages go back to their port.
    pub(crate) fn put(&self, id: &str, port: &PortRef, data: TxData) {
        let mut map = self.map.lock();
        match map.get_mut(id) {
            Some(t) => t.data = data,
            None => {
                drop(map);
                rollback_data(port, data);
            }
        }
    }

    /// Ends a live transaction, returning it; one past its TTL is rolled
    /// back and reported as unknown (`None`), as NiFi does.
    pub(crate) fn remove_live(&self, id: &str) -> Option<(PortRef, TxData)> {
        let t = self.map.lock().remove(id)?;
        if t.expires <= Instant::now() {
            self.expire(t);
            return None;
        }
        Some((t.port, t.data))
    }

    /// Ends a transaction and rolls it back; false (rolled back all the
    /// same) when it was unknown or past its TTL.
    pub(crate) fn cancel(&self, id: &str) -> bool {
        let t = self.map.lock().remove(id);
        match t {
            Some(t) if t.expires <= Instant::now() => {
                self.expire(t);
                false
            }
            Some(t) => {
                rollback(t);
                true
            }
            None => false,
        }
    }

    /// Rolls back every expired transaction; returns how many. Run by the
    /// periodic sweep, and by `create` so that expired transactions never
    /// count against `max_http_transactions`.
    pub(crate) fn sweep(&self) -> usize {
        let now = Instant::now();
        let expired: Vec<HttpTransaction> = {
            let mut map = self.map.lock();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, t)| t.expires <= now)
                .map(|(k, _)| k.clone())
                .collect();
            ids.iter().filter_map(|k| map.remove(k)).collect()
        };
        let n = expired.len();
        if n > 0 {
            info!(
                transactions = n,
                "rolled back s2s http transactions past their TTL or max_transaction_ms"
            );
        }
        for t in expired {
            self.expire(t);
        }
        n
    }

    /// Rolls back a transaction found expired, and counts it.
    fn expire(&self, t: HttpTransaction) {
        debug!(port = %t.port.name(), "s2s http transaction expired; rolled back");
        self.metrics.error("transaction_expired");
        rollback(t);
    }
}

/// `expires`, but not past `deadline`.
fn capped(expires: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(expires, |d| expires.min(d))
}

/// Rolls a transaction back: received FlowFiles are dropped, sent messages
/// go back to their output port.
pub(crate) fn rollback(t: HttpTransaction) {
    rollback_data(&t.port, t.data);
}

/// Rolls back detached transaction data.
pub(crate) fn rollback_data(port: &PortRef, data: TxData) {
    if let (PortRef::Output(p), TxData::Sent { msgs, .. }) = (port, data) {
        p.requeue(msgs);
    }
}

#[cfg(test)]
mod tests {
    use tidegate_hub::{Hub, InflightBudget, RouteTable};

    use super::*;
    use crate::ports::S2sPorts;

    /// A table with these expiries, an input port of it, and the hub.
    fn table(ttl_secs: u64, lifetime_ms: u64) -> (HttpTransactions, S2sPorts, PortRef) {
        let config = S2sConfig {
            http_transaction_ttl_secs: ttl_secs,
            max_transaction_ms: lifetime_ms,
            ..S2sConfig::default()
        };
        let hub = Hub::with_budget(RouteTable::default(), InflightBudget::new(1 << 20));
        let ports = S2sPorts::new(config.clone(), hub).unwrap();
        let port = PortRef::Input(ports.inputs()[0].clone());
        let t = HttpTransactions::new(&config, ports.metrics().clone());
        (t, ports, port)
    }

    #[tokio::test]
    async fn extending_never_goes_past_the_lifetime() {
        // Margins of a second or more: the machine running the tests may
        // stall one for a few hundred milliseconds.
        let (t, ports, port) = table(10, 3_000);
        let id = t.create(port).unwrap();
        assert!(t.extend(&id));
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert!(t.extend(&id), "within the lifetime, and the TTL");
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert!(!t.extend(&id), "past the lifetime, whatever the TTL");
        assert_eq!(t.sweep(), 1);
        assert!(t.is_empty());
        assert_eq!(ports.metrics().error_count("transaction_expired"), 1);
    }

    #[tokio::test]
    async fn a_sweep_gives_back_the_budget_of_expired_flow_files_only() {
        let (t, ports, port) = table(1, 0);
        let budget = ports.hub().budget();
        let (old, new) = (
            t.create(port.clone()).unwrap(),
            t.create(port.clone()).unwrap(),
        );
        for id in [&old, &new] {
            assert_eq!(
                t.take_open(id).map(|p| p.name().to_string()).as_deref(),
                Some("input")
            );
            let held = budget.try_acquire(1000).unwrap();
            let packets = Vec::new();
            t.put(id, &port, TxData::Received { packets, held });
        }
        assert_eq!(budget.in_use(), 2000);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(t.extend(&new));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(t.sweep(), 1, "only the one not extended");
        assert_eq!(budget.in_use(), 1000);
        assert_eq!(t.len(), 1);
        assert!(t.remove_live(&new).is_some());
    }
}
