//! The `[s2s]` RAW socket listener. (Skeleton: the s2s helper fills this in.)

use tidegate_hub::Hub;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::S2sConfig;

/// A bound `[s2s]` RAW socket listener, ready to serve.
pub struct S2sServer {
    listener: TcpListener,
    config: S2sConfig,
}

impl S2sServer {
    /// Binds `config.listen` (port 0 picks a free port).
    pub async fn bind(config: S2sConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        Ok(S2sServer { listener, config })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let _ = (&self.config, hub);
        shutdown.cancelled().await;
        Ok(())
    }
}
