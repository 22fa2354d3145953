//! [`HttpTransactions`]: the open HTTP transactions, each with a TTL that
//! the client extends with `PUT`; expired ones are rolled back (an output
//! transaction's messages go back to its port).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tidegate_hub::{BudgetPermit, SharedMessage};

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
}

/// Why a transaction could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyTransactions;

/// The open HTTP transactions, bounded in number.
#[derive(Debug)]
pub struct HttpTransactions {
    map: Mutex<HashMap<String, HttpTransaction>>,
    ttl: Duration,
    max: usize,
}

impl HttpTransactions {
    /// An empty table with the configured TTL and bound.
    pub fn new(config: &S2sConfig) -> Self {
        HttpTransactions {
            map: Mutex::new(HashMap::new()),
            ttl: Duration::from_secs(config.http_transaction_ttl_secs.max(1)),
            max: config.max_http_transactions.max(1),
        }
    }

    /// The TTL advertised to clients.
    pub fn ttl(&self) -> Duration {
        self.ttl
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
        map.insert(
            id.clone(),
            HttpTransaction {
                port,
                data: TxData::Open,
                expires: Instant::now() + self.ttl,
            },
        );
        Ok(id)
    }

    /// Pushes the expiry of `id` out by one TTL; false if unknown.
    pub(crate) fn extend(&self, id: &str) -> bool {
        let mut map = self.map.lock();
        match map.get_mut(id) {
            Some(t) if t.expires > Instant::now() => {
                t.expires = Instant::now() + self.ttl;
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
            rollback(t);
            return None;
        }
        if !matches!(t.data, TxData::Open) {
            return None;
        }
        t.expires = Instant::now() + self.ttl;
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
            rollback(t);
            return None;
        }
        Some((t.port, t.data))
    }

    /// Ends a transaction and rolls it back; false (rolled back all the
    /// same) when it was unknown or past its TTL.
    pub(crate) fn cancel(&self, id: &str) -> bool {
        let t = self.map.lock().remove(id);
        match t {
            Some(t) => {
                let live = t.expires > Instant::now();
                rollback(t);
                live
            }
            None => false,
        }
    }

    /// Rolls back every expired transaction.
    pub(crate) fn sweep(&self) {
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
        for t in expired {
            rollback(t);
        }
    }
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
