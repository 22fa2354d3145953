//! The `[s2s]` RAW socket listener: accepts connections (TLS with client
//! certificates when configured), bounds their number, and runs one task per
//! connection ([`session`]). No thread per client; per-connection memory is
//! a few kilobytes of buffers.

mod error;
mod receive;
mod session;
mod transfer;

pub use error::SessionError;

use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::Hub;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::ports::S2sPorts;
use crate::{tls, S2sConfig};

/// Longest a TLS handshake may take.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound `[s2s]` RAW socket listener, ready to serve.
pub struct S2sServer {
    listener: TcpListener,
    config: S2sConfig,
    ports: Option<S2sPorts>,
}

impl S2sServer {
    /// Binds `config.listen` (port 0 picks a free port).
    pub async fn bind(config: S2sConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        Ok(S2sServer {
            listener,
            config,
            ports: None,
        })
    }

    /// Serves these ports (shared with the HTTP router) instead of building
    /// its own from the configuration at `run`.
    pub fn with_ports(mut self, ports: S2sPorts) -> Self {
        self.ports = Some(ports);
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then lets in-flight
    /// transactions finish for up to `shutdown_grace_ms`.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let ports = match self.ports {
            Some(p) => p,
            None => S2sPorts::new(self.config.clone(), hub)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
        };
        let tls = match &self.config.tls {
            Some(t) => Some(tokio_rustls::TlsAcceptor::from(tls::server_config(t)?)),
            None => None,
        };
        let raw_port = self.listener.local_addr()?.port();
        let limit = Arc::new(Semaphore::new(self.config.max_connections.max(1)));
        let tracker = TaskTracker::new();
        let metrics = ports.metrics().clone();
        info!(addr = %self.listener.local_addr()?, secure = tls.is_some(), "s2s RAW listener up");
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = self.listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: count, breathe, go on.
                    metrics.error("accept");
                    warn!(error = %e, "s2s accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                metrics.error("too_many_connections");
                warn!(%peer, max = self.config.max_connections, "s2s connection refused: too many connections");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (ports, shutdown, tls, metrics) = (
                ports.clone(),
                shutdown.clone(),
                tls.clone(),
                metrics.clone(),
            );
            tracker.spawn(async move {
                let _open = metrics.connection();
                let _permit = permit;
                match tls {
                    None => session::serve(stream, None, ports, raw_port, shutdown).await,
                    Some(acceptor) => {
                        let tls_stream = match tokio::time::timeout(
                            TLS_HANDSHAKE_TIMEOUT,
                            acceptor.accept(stream),
                        )
                        .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                metrics.error("tls_handshake");
                                warn!(%peer, error = %e, "s2s TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                metrics.error("tls_handshake");
                                warn!(%peer, "s2s TLS handshake timed out");
                                return;
                            }
                        };
                        let dn = tls_stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(|c| tls::subject_dn(c));
                        session::serve(tls_stream, dn, ports, raw_port, shutdown).await
                    }
                }
            });
        }
        tracker.close();
        let grace = Duration::from_millis(self.config.shutdown_grace_ms);
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!(
                open = tracker.len(),
                "s2s shutdown grace elapsed with connections still open"
            );
        }
        Ok(())
    }
}
