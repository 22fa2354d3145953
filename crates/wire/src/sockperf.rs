//! The `[sockperf]` echo listener. (Skeleton: the wire helper fills this in.)

use tidegate_hub::Hub;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::SockperfConfig;

/// A bound `[sockperf]` echo listener, ready to serve.
pub struct SockperfServer {
    listener: TcpListener,
    config: SockperfConfig,
}

impl SockperfServer {
    /// Binds `config.listen` (port 0 picks a free port).
    pub async fn bind(config: SockperfConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        Ok(SockperfServer { listener, config })
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
