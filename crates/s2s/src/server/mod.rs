//! The `[s2s]` RAW socket listener: the listener core
//! ([`tidegate_listener::Listener`]) accepts, applies the connection limit,
//! the allow-list and TLS (client certificates), and hands each connection
//! to a Site-to-Site `session` in its own task. Nothing here touches
//! `accept()` or a TLS configuration.

mod error;
mod receive;
mod session;
mod transfer;

pub use error::SessionError;

use std::net::SocketAddr;

use tidegate_hub::Hub;
use tidegate_listener::{ConnStream, Connection, Listener, ListenerError};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::frame_io::QuickAck;
use crate::ports::S2sPorts;
use crate::S2sConfig;

/// The listener's name: its config section and its metrics label.
pub const SECTION: &str = "s2s";

/// A bound `[s2s]` RAW socket listener, ready to serve.
#[derive(Debug)]
pub struct S2sServer {
    listener: Listener,
    config: S2sConfig,
    ports: Option<S2sPorts>,
}

impl S2sServer {
    /// Loads the TLS files, then binds `listen` (port 0 picks a free port).
    /// Must be called inside a tokio runtime.
    pub fn bind(config: S2sConfig) -> Result<Self, ListenerError> {
        let listener = Listener::bind(SECTION, config.listener.settings())?;
        for port in config.unreachable_dn_lists() {
            warn!(
                port,
                "[s2s] port has allowed_dns, but the RAW listener asks no client certificate \
                 (tls.client_ca): no client can use it"
            );
        }
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
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then lets open connections
    /// finish their transaction for up to `shutdown_grace_ms`.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let ports = match self.ports {
            Some(p) => p,
            None => S2sPorts::new(self.config.clone(), hub.clone())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
        };
        let raw_port = self.listener.local_addr().port();
        let drain = self.config.shutdown_grace();
        self.listener
            .run(&hub, shutdown, drain, move |conn: Connection| {
                session::serve(conn, ports.clone(), raw_port)
            })
            .await
    }
}

/// The stock Java client writes with Nagle's algorithm on; see [`QuickAck`].
impl QuickAck for ConnStream {
    fn quick_ack(&self) {
        let _ = socket2::SockRef::from(self.tcp()).set_quickack(true);
    }
}
