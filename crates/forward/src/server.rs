//! The `[forward]` listener: the listener core ([`Listener`]) accepts, applies
//! the connection limit, the allow-list, TLS and the read/idle timeouts, and
//! hands every connection to the Forward session ([`crate::connection`]).
//! What stays here is Forward's own: the UDP heartbeat on the same address,
//! and the context every session shares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::Hub;
use tidegate_listener::{Listener, ListenerError};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::connection::{run_session, ServerContext};
use crate::handshake::ServerHandshake;
use crate::metrics::ForwardCounters;
use crate::ForwardConfig;

/// Name of this listener in metrics, logs and errors (the config section).
pub const LISTENER_NAME: &str = "forward";

/// Time the listener core waits for sessions at shutdown beyond
/// `shutdown_drain_ms` (sessions flush their last acks and close).
const DRAIN_SLACK: Duration = Duration::from_secs(1);

/// A bound `[forward]` listener, ready to serve.
#[derive(Debug)]
pub struct ForwardServer {
    listener: Listener,
    udp: Option<UdpSocket>,
    config: ForwardConfig,
}

impl ForwardServer {
    /// Loads the TLS files and binds the listener block's `listen` (port 0
    /// picks a free port) for TCP and, unless `udp_heartbeat = false`, the
    /// same address for UDP heartbeats. Errors name the section and key.
    /// Must be called inside a tokio runtime.
    pub fn bind(config: ForwardConfig) -> Result<Self, ListenerError> {
        let listener = Listener::bind(LISTENER_NAME, config.listener.settings())?;
        if config.listener.idle_timeout_ms != 0
            && config.listener.idle_timeout_ms < config.ack_timeout_ms
        {
            tracing::warn!(
                idle_timeout_ms = config.listener.idle_timeout_ms,
                ack_timeout_ms = config.ack_timeout_ms,
                "[forward] idle_timeout_ms is shorter than ack_timeout_ms: a connection waiting that long for a slow sink is closed as idle, and its chunk is retried"
            );
        }
        let addr = listener.local_addr();
        let udp = if config.udp_heartbeat {
            let bound = bind_udp(addr).map_err(|source| ListenerError::Bind {
                section: LISTENER_NAME,
                addr,
                source,
            })?;
            Some(bound)
        } else {
            None
        };
        Ok(ForwardServer {
            listener,
            udp,
            config,
        })
    }

    /// The bound address (TCP, and UDP for heartbeats).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then gives connections
    /// `shutdown_drain_ms` to answer their pending chunks.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let config = self.config;
        let handshake = config.shared_key.as_ref().map(|key| {
            ServerHandshake::new(
                key.clone(),
                config.self_hostname.clone(),
                config.users.clone(),
            )
        });
        let drain = Duration::from_millis(config.shutdown_drain_ms) + DRAIN_SLACK;
        let ctx = Arc::new(ServerContext {
            hub: hub.clone(),
            limits: config.limits(),
            counters: ForwardCounters::register(hub.metrics()),
            handshake,
            config,
        });
        let heartbeat_stop = shutdown.child_token();
        let heartbeat = self.udp.map(|udp| {
            tokio::spawn(crate::heartbeat::answer_heartbeats(
                Arc::new(udp),
                ctx.config.listener.settings(),
                hub.metrics().listener(LISTENER_NAME),
                heartbeat_stop.clone(),
            ))
        });
        let served = self
            .listener
            .run(&hub, shutdown.clone(), drain, move |conn| {
                run_session(conn, ctx.clone())
            })
            .await;
        heartbeat_stop.cancel();
        if let Some(task) = heartbeat {
            let _ = task.await;
        }
        served
    }
}

/// The UDP socket for heartbeats, on the TCP listener's address.
fn bind_udp(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}
