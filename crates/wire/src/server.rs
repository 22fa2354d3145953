//! The `[wire]` listener: accepts connections and runs each one
//! (`connection.rs`) until it closes or the server shuts down.

use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::Hub;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::connection::{self, ConnectionContext};
use crate::WireConfig;

/// Pause after a failed `accept` (e.g. out of file descriptors) before retrying.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// A bound `[wire]` listener, ready to serve.
pub struct WireServer {
    listener: TcpListener,
    config: WireConfig,
}

impl WireServer {
    /// Binds `config.listen` (port 0 picks a free port).
    pub async fn bind(config: WireConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        Ok(WireServer { listener, config })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, tells every
    /// connection to flush and close, and waits up to `drain_ms` for them
    /// before aborting the rest.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let metrics = hub.metrics().listener("wire");
        let drain = Duration::from_millis(self.config.drain_ms);
        let max_connections = self.config.max_connections;
        let ctx = ConnectionContext {
            hub,
            config: Arc::new(self.config),
            metrics: metrics.clone(),
        };
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        if connections.len() >= max_connections {
                            metrics.error("connection_limit");
                            tracing::warn!("wire: refusing {peer}: {max_connections} connections open");
                            continue;
                        }
                        connections.spawn(connection::serve(stream, ctx.clone(), shutdown.clone()));
                    }
                    Err(e) => {
                        metrics.error("accept");
                        tracing::warn!("wire: accept failed: {e}");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        drop(self.listener);
        let drained = tokio::time::timeout(drain, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "wire: {} connections did not close within {drain:?}; aborting them",
                connections.len()
            );
            connections.shutdown().await;
        }
        Ok(())
    }
}
