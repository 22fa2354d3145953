//! Starts an in-process `[wire]` server on a free port for integration tests.

#![allow(dead_code)]

use std::net::SocketAddr;

use tidegate_hub::Hub;
use tidegate_wire::{WireConfig, WireServer};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running server; shut down on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    pub hub: Hub,
    pub shutdown: CancellationToken,
    pub task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server with `config` (its `listen` replaced by port 0).
    pub async fn start(mut config: WireConfig) -> TestServer {
        config.listen = "127.0.0.1:0".parse().unwrap();
        let hub = Hub::default();
        let server = WireServer::bind(config).await.unwrap();
        let addr = server.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server.run(hub.clone(), shutdown.clone()));
        TestServer {
            addr,
            hub,
            shutdown,
            task: Some(task),
        }
    }

    /// Starts a server with the default configuration.
    pub async fn default() -> TestServer {
        Self::start(WireConfig::default()).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
