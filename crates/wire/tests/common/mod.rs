//! Starts in-process `[wire]` and `[sockperf]` servers on free ports for
//! integration tests, and small helpers the test files share.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tidegate_hub::{Hub, ListenerMetrics};
use tidegate_wire::{
    ErrorFrame, Frame, SockperfConfig, SockperfServer, WireClient, WireConfig, WireServer,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a test waits for something the server should do at once.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// A running server; shut down on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    pub hub: Hub,
    pub shutdown: CancellationToken,
    pub task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a `[wire]` server with `config` (its `listen` replaced by port 0).
    pub async fn start(config: WireConfig) -> TestServer {
        Self::start_with_hub(config, Hub::default()).await
    }

    /// Starts a `[wire]` server publishing into `hub`.
    pub async fn start_with_hub(mut config: WireConfig, hub: Hub) -> TestServer {
        config.listener.listen = "127.0.0.1:0".parse().unwrap();
        let server = WireServer::bind(config).unwrap();
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server.run(hub.clone(), shutdown.clone()));
        TestServer {
            addr,
            hub,
            shutdown,
            task: Some(task),
        }
    }

    /// Starts a `[wire]` server with the default configuration.
    pub async fn default() -> TestServer {
        Self::start(WireConfig::default()).await
    }

    /// Starts a `[sockperf]` server with `config` (port 0).
    pub async fn sockperf(mut config: SockperfConfig) -> TestServer {
        config.listener.listen = "127.0.0.1:0".parse().unwrap();
        let hub = Hub::default();
        let server = SockperfServer::bind(config).unwrap();
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server.run(hub.clone(), shutdown.clone()));
        TestServer {
            addr,
            hub,
            shutdown,
            task: Some(task),
        }
    }

    /// The counters of listener `name` (`wire`, `sockperf`).
    pub fn metrics(&self, name: &str) -> ListenerMetrics {
        self.hub.metrics().listener(name)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Reads until an ERROR (any other frame fails the test) and checks the
/// connection closes right after it.
pub async fn expect_error_then_close(c: &mut WireClient) -> ErrorFrame {
    let f = tokio::time::timeout(PATIENCE, c.recv()).await.unwrap();
    let Ok(Some(Frame::Error(e))) = f else {
        panic!("expected an ERROR frame, got {f:?}");
    };
    let end = tokio::time::timeout(PATIENCE, c.recv()).await.unwrap();
    assert!(
        matches!(end, Ok(None)),
        "expected the connection to close, got {end:?}"
    );
    e
}

/// Waits until `cond` holds (polling), failing the test after [`PATIENCE`].
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
