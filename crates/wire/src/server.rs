//! The `[wire]` listener: binds through the listener core (TLS, connection
//! limit, allow-list, timeouts, drain) and runs each accepted connection
//! until it closes or the server shuts down: as two tokio tasks
//! (`connection.rs`) in the default mode, or on the busy-polling thread
//! (`low_latency.rs`) in `mode = "low_latency"`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::Hub;
use tidegate_listener::{Connection, Listener, ListenerError};
use tokio_util::sync::CancellationToken;

use crate::auth::TokenSet;
use crate::connection::{self, ConnectionContext};
use crate::low_latency::LowLatency;
use crate::{WireConfig, WireMode};

/// The listener's name: its config section and its metrics label.
pub const SECTION: &str = "wire";

/// A bound `[wire]` listener, ready to serve.
#[derive(Debug)]
pub struct WireServer {
    listener: Listener,
    config: WireConfig,
}

impl WireServer {
    /// Loads the TLS files (if any) and binds `config.listener.listen` (port
    /// 0 picks a free port). Must be called inside a tokio runtime.
    pub fn bind(config: WireConfig) -> Result<Self, ListenerError> {
        let listener = Listener::bind(SECTION, config.listener.settings())?;
        Ok(WireServer { listener, config })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, tells every
    /// connection to flush and close (ERROR 8), and waits up to `drain_ms`
    /// for them.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let drain = Duration::from_millis(self.config.drain_ms);
        let ctx = ConnectionContext {
            hub: hub.clone(),
            tokens: Arc::new(TokenSet::new(&self.config.tokens)),
            config: Arc::new(self.config.clone()),
        };
        match self.config.mode {
            WireMode::Default => {
                self.listener
                    .run(&hub, shutdown, drain, move |conn: Connection| {
                        connection::serve(conn, ctx.clone())
                    })
                    .await
            }
            WireMode::LowLatency => {
                let (poller, _stop) = LowLatency::start(&ctx, drain, shutdown.clone())?;
                self.listener
                    .run(&hub, shutdown, drain, move |conn: Connection| {
                        poller.clone().serve(conn, ctx.clone())
                    })
                    .await
            }
        }
    }
}
