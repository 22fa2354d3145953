//! [`Worker`]: one connection to a NiFi peer, sending one batch per
//! transaction until NiFi confirms it.
//!
//! At-least-once: a batch's messages are acknowledged only after
//! `TRANSACTION_FINISHED` (RAW) or the commit's `200` with
//! `TRANSACTION_FINISHED` (HTTP). Any failure — connection lost, timeout,
//! bad checksum, port unknown or not running, destination full — drops the
//! connection and retries the same batch after a wait that doubles from
//! `retry_min_ms` to `retry_max_ms`, on a peer chosen afresh. A connection
//! lost after NiFi committed but before its answer arrived means the batch
//! is sent twice: that is the at-least-once price.
//!
//! Backpressure: "destination full" (at create/handshake, or after a
//! commit) makes the worker wait before its next transaction; meanwhile
//! batches and then the sink's queue fill, and the sources wait in `send`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::batch::Batch;
use super::config::Transport;
use super::metrics::SinkMetrics;
use super::peers::PeerDirectory;
use crate::client::{ClientError, DynStream, HttpS2sClient, RawClient};
use crate::codec::{DataPacket, ResponseCode};
use crate::frame_io::FrameError;

/// A connection, by transport.
enum Conn {
    Raw(RawClient<DynStream>),
    Http(HttpS2sClient),
}

impl Conn {
    async fn send(&mut self, packets: &[DataPacket]) -> Result<bool, ClientError> {
        match self {
            Conn::Raw(c) => c.send_transaction(packets).await,
            Conn::Http(c) => c.send_transaction(packets).await,
        }
    }

    async fn close(self) {
        if let Conn::Raw(c) = self {
            c.shutdown().await;
        }
    }
}

/// What every worker shares.
#[derive(Debug)]
pub struct WorkerShared {
    /// Where to connect.
    pub peers: Arc<PeerDirectory>,
    /// Batches from the collector.
    pub batches: Mutex<mpsc::Receiver<Batch>>,
    /// The sink's counters.
    pub metrics: SinkMetrics,
    /// RAW or HTTP.
    pub transport: Transport,
    /// Compress packets.
    pub compress: bool,
    /// Per-request timeout.
    pub timeout: Duration,
    /// First retry wait.
    pub retry_min: Duration,
    /// Longest retry wait.
    pub retry_max: Duration,
    /// Set after a confirmed transaction, cleared when no peer answers.
    pub reachable: AtomicBool,
    /// Ends the workers.
    pub shutdown: CancellationToken,
}

/// True for the refusals that mean "NiFi is there but cannot take these
/// now": wait and try again, without counting the peer as gone.
fn busy(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Refused(
            ResponseCode::PortsDestinationFull | ResponseCode::PortNotInValidState,
            _
        )
    )
}

/// One worker: one connection at a time, one transaction at a time.
pub struct Worker {
    shared: Arc<WorkerShared>,
    conn: Option<Conn>,
}

impl Worker {
    /// A worker without a connection yet.
    pub fn new(shared: Arc<WorkerShared>) -> Self {
        Worker { shared, conn: None }
    }

    /// Takes batches until shutdown or until the collector ends.
    pub async fn run(mut self) {
        loop {
            let batch = {
                let mut rx = self.shared.batches.lock().await;
                tokio::select! {
                    b = rx.recv() => b,
                    _ = self.shared.shutdown.cancelled() => None,
                }
            };
            let Some(batch) = batch else { break };
            self.deliver(batch).await;
        }
        if let Some(c) = self.conn.take() {
            c.close().await;
        }
    }

    /// Sends `batch` until NiFi confirms it (or shutdown, which fails it).
    async fn deliver(&mut self, batch: Batch) {
        let sh = self.shared.clone();
        let mut wait = sh.retry_min;
        loop {
            match self.attempt(&batch.packets).await {
                Ok(full) => {
                    sh.reachable.store(true, Ordering::Relaxed);
                    batch.confirmed();
                    if full {
                        // Taken, but NiFi asks for a pause before the next.
                        sh.metrics.destination_full.inc();
                        pause(&sh, sh.retry_min).await;
                    }
                    return;
                }
                Err(e) => {
                    // A half-done transaction's connection cannot be reused.
                    self.conn = None;
                    sh.metrics.error(e.kind());
                    if busy(&e) {
                        sh.metrics.destination_full.inc();
                        debug!(error = %e, "s2s sink: NiFi port busy; waiting");
                    } else {
                        if matches!(
                            e,
                            ClientError::Frame(FrameError::Io(_) | FrameError::Eof)
                                | ClientError::Http(_)
                        ) {
                            sh.reachable.store(false, Ordering::Relaxed);
                        }
                        sh.peers.invalidate();
                        warn!(error = %e, flowfiles = batch.len(), wait_ms = wait.as_millis() as u64,
                            "s2s sink: transaction failed; retrying");
                    }
                    if !pause(&sh, wait).await {
                        return; // shutdown: the batch's tokens fail
                    }
                    wait = (wait * 2).min(sh.retry_max);
                }
            }
        }
    }

    /// One transaction, connecting first if needed; `Ok(true)` = the
    /// destination is full after it.
    async fn attempt(&mut self, packets: &[DataPacket]) -> Result<bool, ClientError> {
        if self.conn.is_none() {
            self.conn = Some(connect(&self.shared).await?);
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.send(packets).await
    }
}

/// Sleeps `d`; false if shutdown came first.
async fn pause(sh: &WorkerShared, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = sh.shutdown.cancelled() => false,
    }
}

/// A connection to a peer chosen by the directory (a free function: the
/// worker's own connection is not `Sync`, so `&Worker` may not be held
/// across this await).
async fn connect(sh: &WorkerShared) -> Result<Conn, ClientError> {
    let (peer, port_id) = sh.peers.pick().await?;
    match sh.transport {
        Transport::Raw => Ok(Conn::Raw(
            sh.peers
                .raw_connect(
                    &peer.host,
                    peer.port,
                    peer.secure,
                    Some(&port_id),
                    sh.compress,
                )
                .await?,
        )),
        Transport::Http => {
            let addr = super::config::resolve(&peer.host, peer.port).await?;
            let tls = match (peer.secure, sh.peers.tls()) {
                (false, _) => None,
                (true, Some(t)) => Some(t),
                (true, None) => {
                    return Err(ClientError::Protocol(
                        "NiFi's web port is https: configure [sinks.s2s.tls]".into(),
                    ))
                }
            };
            Ok(Conn::Http(
                HttpS2sClient::connect_with(addr, tls, &port_id, sh.compress, sh.timeout).await?,
            ))
        }
    }
}
