//! The `[forward]` listener: accepts TCP connections (optionally TLS), caps
//! their number, answers UDP heartbeats on the same port, and runs each
//! connection ([`crate::connection`]) until shutdown, then gives in-flight
//! chunks a bounded time to be acknowledged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::Hub;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection::{serve_connection, ConnectionError, ServerContext};
use crate::handshake::ServerHandshake;
use crate::metrics::ForwardCounters;
use crate::ForwardConfig;

/// Name of this listener in metrics.
pub const LISTENER_NAME: &str = "forward";

/// A bound `[forward]` listener, ready to serve.
pub struct ForwardServer {
    listener: TcpListener,
    udp: Option<UdpSocket>,
    tls: Option<TlsAcceptor>,
    config: ForwardConfig,
}

impl std::fmt::Debug for ForwardServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardServer")
            .field("listen", &self.listener.local_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl ForwardServer {
    /// Binds `config.listen` (port 0 picks a free port) for TCP and, unless
    /// disabled, the same port for UDP heartbeats; loads the TLS files.
    pub async fn bind(config: ForwardConfig) -> std::io::Result<Self> {
        let tls = match &config.tls {
            Some(t) => Some(TlsAcceptor::from(crate::tls::server_config(t)?)),
            None => None,
        };
        let listener = TcpListener::bind(config.listen).await?;
        let udp = if config.udp_heartbeat {
            Some(UdpSocket::bind(listener.local_addr()?).await?)
        } else {
            None
        };
        Ok(ForwardServer {
            listener,
            udp,
            tls,
            config,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then waits (bounded by
    /// `shutdown_drain_ms`) for connections to answer their pending chunks.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let metrics = hub.metrics().listener(LISTENER_NAME);
        let counters = ForwardCounters::register(hub.metrics());
        let handshake = self.config.shared_key.as_ref().map(|key| {
            ServerHandshake::new(
                key.clone(),
                self.config.self_hostname.clone(),
                self.config.users.clone(),
            )
        });
        let ctx = Arc::new(ServerContext {
            hub,
            limits: self.config.limits(),
            config: self.config,
            metrics: metrics.clone(),
            counters,
            handshake,
        });
        let tracker = TaskTracker::new();
        if let Some(udp) = self.udp {
            tracker.spawn(crate::heartbeat::answer_heartbeats(
                Arc::new(udp),
                metrics.clone(),
                shutdown.clone(),
            ));
        }
        let slots = Arc::new(Semaphore::new(ctx.config.max_connections));
        tracing::info!(addr = %self.listener.local_addr()?, tls = self.tls.is_some(), "forward listener up");
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = self.listener.accept() => a,
            };
            let (sock, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: count, back off briefly.
                    metrics.error("accept");
                    tracing::warn!(error = %e, "forward: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                metrics.error("max_connections");
                tracing::warn!(%peer, max = ctx.config.max_connections, "forward: connection refused, limit reached");
                drop(sock);
                continue;
            };
            let _ = sock.set_nodelay(true);
            let ctx = ctx.clone();
            let tls = self.tls.clone();
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                let _slot = slot;
                let _open = ctx.metrics.connection();
                if let Err(e) = run_connection(sock, peer, tls, ctx.clone(), shutdown).await {
                    ctx.metrics.error(e.kind());
                    match &e {
                        ConnectionError::Io(_) => {
                            tracing::debug!(%peer, error = %e, "forward: connection ended")
                        }
                        _ => tracing::warn!(%peer, error = %e, "forward: connection closed"),
                    }
                }
            });
        }
        tracker.close();
        let grace = Duration::from_millis(ctx.config.shutdown_drain_ms) + Duration::from_secs(1);
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            tracing::warn!("forward: connections still open after the shutdown grace period");
        }
        Ok(())
    }
}

async fn run_connection(
    sock: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    ctx: Arc<ServerContext>,
    shutdown: CancellationToken,
) -> Result<(), ConnectionError> {
    match tls {
        None => serve_connection(sock, peer, ctx, shutdown).await,
        Some(acceptor) => {
            let timeout = Duration::from_millis(ctx.config.handshake_timeout_ms);
            let stream = match tokio::time::timeout(timeout, acceptor.accept(sock)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    ctx.metrics.error("tls_handshake");
                    tracing::warn!(%peer, error = %e, "forward: TLS handshake failed");
                    return Ok(());
                }
                Err(_) => {
                    ctx.metrics.error("tls_handshake");
                    tracing::warn!(%peer, "forward: TLS handshake timed out");
                    return Ok(());
                }
            };
            serve_connection(stream, peer, ctx, shutdown).await
        }
    }
}
