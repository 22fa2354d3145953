//! [`S2sSink`]: the hub's [`Sink`] that sends routed messages to a NiFi
//! input port.
//!
//! `send` puts the message and its token in a queue bounded by
//! `queue_max_messages` (waiting when it is full — the sources' backpressure);
//! a collector task cuts the queue into batches ([`super::batch`]) and
//! `connections` workers ([`super::deliver`]) send one batch per
//! transaction, completing the tokens only once NiFi confirmed it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tidegate_hub::{
    AckToken, DeliveryError, HubMetrics, SharedMessage, Sink, SinkCounters, SinkFuture, SinkHealth,
};
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;

use super::batch::{collect, Item, Limits};
use super::config::{S2sSinkConfig, SinkConfigError};
use super::deliver::{Worker, WorkerShared};
use super::metrics::SinkMetrics;
use super::peers::PeerDirectory;
use crate::tls::ClientTls;

/// The name routes use: `sink = "s2s"`.
pub const SINK_NAME: &str = "s2s";

/// `/readyz` reason: no NiFi peer answered the last attempts.
pub const NOT_READY_UNREACHABLE: &str = "no NiFi peer reachable";

/// `/readyz` reason: `queue_max_messages` messages are queued.
pub const NOT_READY_QUEUE_FULL: &str = "queue full";

/// Why the sink could not be created.
#[derive(Debug, Error)]
pub enum S2sSinkError {
    /// The section is unusable.
    #[error(transparent)]
    Config(#[from] SinkConfigError),
    /// The TLS files cannot be loaded.
    #[error("[sinks.s2s.tls]: {0}")]
    Tls(std::io::Error),
}

/// Sends routed messages to a NiFi input port over Site-to-Site.
pub struct S2sSink {
    queue: mpsc::Sender<Item>,
    metrics: SinkMetrics,
    peers: Arc<PeerDirectory>,
    workers: Arc<WorkerShared>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for S2sSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S2sSink")
            .field("queued", &self.metrics.queued.get())
            .finish_non_exhaustive()
    }
}

impl S2sSink {
    /// Checks `config`, loads its TLS files and starts the collector and
    /// workers (inside the current tokio runtime). NiFi is not contacted
    /// until the first message: an unreachable NiFi makes sends wait, not
    /// this call fail.
    pub fn new(config: S2sSinkConfig) -> Result<Self, S2sSinkError> {
        let urls = config.validate()?;
        let tls = match &config.tls {
            Some(t) => {
                Some(ClientTls::from_pem(&t.ca, &t.cert, &t.key).map_err(S2sSinkError::Tls)?)
            }
            None => None,
        };
        let metrics = SinkMetrics::default();
        let peers = Arc::new(PeerDirectory::new(&config, urls, tls));
        let shutdown = CancellationToken::new();
        let (queue, rx) = mpsc::channel(config.queue_max_messages);
        let (btx, brx) = mpsc::channel(config.connections);
        let limits = Limits {
            flowfiles: config.batch_max_flowfiles,
            bytes: config.batch_max_bytes,
            linger: Duration::from_millis(config.batch_max_ms),
        };
        tokio::spawn(collect(rx, btx, limits, metrics.clone(), shutdown.clone()));
        let workers = Arc::new(WorkerShared {
            peers: peers.clone(),
            batches: Mutex::new(brx),
            metrics: metrics.clone(),
            transport: config.transport,
            compress: config.compress,
            timeout: config.timeout(),
            retry_min: Duration::from_millis(config.retry_min_ms.max(1)),
            retry_max: Duration::from_millis(config.retry_max_ms.max(config.retry_min_ms)),
            reachable: AtomicBool::new(true),
            shutdown: shutdown.clone(),
        });
        for _ in 0..config.connections {
            tokio::spawn(Worker::new(workers.clone()).run());
        }
        Ok(S2sSink {
            queue,
            metrics,
            peers,
            workers,
            shutdown,
        })
    }

    /// Registers the sink's counters (`tidegate_s2s_sink_*`) with the hub.
    pub fn register_metrics(&self, metrics: &HubMetrics) {
        self.metrics.register(metrics);
    }

    /// The sink's counters (tests and benchmarks read them).
    pub fn metrics(&self) -> &SinkMetrics {
        &self.metrics
    }

    /// The peer directory (what discovery found; tests and probe).
    pub fn peers(&self) -> &PeerDirectory {
        &self.peers
    }

    fn closed(ack: AckToken) {
        ack.complete(Err(DeliveryError::Failed {
            sink: SINK_NAME.to_owned(),
            reason: "the S2S sink is shutting down".into(),
        }));
    }
}

impl Drop for S2sSink {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Sink for S2sSink {
    fn name(&self) -> &str {
        SINK_NAME
    }

    fn send(&self, msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        Box::pin(async move {
            // A permit first (cancel-safe: a send dropped while waiting has
            // counted nothing), then the count, then the hand-over, so the
            // collector never confirms a message before it was counted.
            let permit = match self.queue.try_reserve() {
                Ok(p) => p,
                Err(mpsc::error::TrySendError::Full(())) => {
                    self.metrics.queue_full_waits.inc();
                    match self.queue.reserve().await {
                        Ok(p) => p,
                        Err(_) => return Self::closed(ack),
                    }
                }
                Err(mpsc::error::TrySendError::Closed(())) => return Self::closed(ack),
            };
            self.metrics.queued.inc();
            permit.send((msg, ack));
        })
    }

    fn try_send(&self, msg: SharedMessage, ack: AckToken) -> Result<(), (SharedMessage, AckToken)> {
        match self.queue.try_reserve() {
            Ok(permit) => {
                self.metrics.queued.inc();
                permit.send((msg, ack));
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(())) => Err((msg, ack)),
            Err(mpsc::error::TrySendError::Closed(())) => {
                Self::closed(ack);
                Ok(())
            }
        }
    }

    fn is_full(&self) -> bool {
        self.queue.capacity() == 0
    }

    fn health(&self) -> SinkHealth {
        if !self.workers.reachable.load(Ordering::Relaxed) {
            SinkHealth::NotReady(NOT_READY_UNREACHABLE.to_owned())
        } else if self.is_full() {
            SinkHealth::NotReady(NOT_READY_QUEUE_FULL.to_owned())
        } else {
            SinkHealth::Ready
        }
    }

    fn counters(&self) -> SinkCounters {
        SinkCounters {
            queued: self.metrics.queued.get().max(0) as u64,
            acked: self.metrics.delivered.get(),
            failed: self.metrics.failed.get(),
        }
    }

    /// Resolves once every queued message is confirmed or failed, or
    /// `timeout` passed.
    fn flush(&self, timeout: Duration) -> SinkFuture<'_> {
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            while self.metrics.queued.get() > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if self.metrics.queued.get() > 0 {
                tracing::warn!(
                    unconfirmed = self.metrics.queued.get(),
                    "s2s sink flush did not finish in time"
                );
            }
        })
    }
}
