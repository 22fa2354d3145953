//! Starts in-process `[wire]` and `[sockperf]` servers on free ports for
//! integration tests, and small helpers the test files share.
//!
//! [`both_modes!`] runs a test once per `[wire] mode`: the servers a test
//! starts take the mode of the test thread ([`set_mode`]), so the protocol
//! tests need no mode argument of their own.

#![allow(dead_code)]

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Duration;

use tidegate_hub::{Hub, ListenerMetrics};
use tidegate_wire::{
    ErrorFrame, Frame, SockperfConfig, SockperfServer, WireClient, WireConfig, WireMode, WireServer,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a test waits for something the server should do at once.
pub const PATIENCE: Duration = Duration::from_secs(5);

thread_local! {
    /// The mode servers started on this thread run in.
    static MODE: Cell<WireMode> = const { Cell::new(WireMode::Default) };
}

/// Sets the mode of the `[wire]` servers this test thread starts (a
/// `#[tokio::test]` body runs on its own thread).
pub fn set_mode(mode: WireMode) {
    MODE.with(|m| m.set(mode));
}

/// The mode of this test thread.
pub fn mode() -> WireMode {
    MODE.with(|m| m.get())
}

/// Turns `async fn name() { body }` into a module `name` with two tests,
/// `default` and `low_latency`, running the body in each `[wire] mode`.
#[macro_export]
macro_rules! both_modes {
    ($(async fn $name:ident() $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn default() {
                $crate::common::set_mode(tidegate_wire::WireMode::Default);
                $body
            }

            #[tokio::test]
            async fn low_latency() {
                $crate::common::set_mode(tidegate_wire::WireMode::LowLatency);
                $body
            }
        }
    )*};
}

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
        if config.mode == WireMode::Default {
            config.mode = mode();
        }
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
        if config.mode == WireMode::Default {
            config.mode = mode();
        }
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

/// Waits until `cond` holds (polling), failing the test after `limit`.
pub async fn eventually_within(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
