//! `[wire] mode = "low_latency"`: how the listener core's connections reach
//! the poller thread.
//!
//! The listener core still accepts (limits, allow-list, TLS, metrics) and
//! runs one session task per connection. In this mode that task hands the
//! plain socket to the poller thread (`spin_poller.rs`) and then serves the
//! connection's hub side (`hub_link.rs`) until the poller closes it — so
//! the core's connection slot, open gauge and drain keep counting the
//! connection exactly as in the default mode. A TLS connection cannot be
//! handed over and is served by the default path (`connection.rs`).

use std::sync::Arc;
use std::time::Duration;

use tidegate_listener::Connection;
use tokio_util::sync::CancellationToken;

use crate::connection::{self, ConnectionContext};
use crate::hub_link;
use crate::spin_conn::{SpinConn, SpinContext};
use crate::spin_poller::{PollerHandle, PollerSettings, StopOnDrop};

/// A running poller thread, shared by the listener's session tasks.
#[derive(Clone)]
pub(crate) struct LowLatency {
    poller: PollerHandle<SpinConn>,
    spin: Arc<SpinContext>,
}

impl LowLatency {
    /// Starts the poller thread (pinned to `[wire] cpu` when set); it stops
    /// when the guard is dropped.
    pub(crate) fn start(
        ctx: &ConnectionContext,
        drain: Duration,
        shutdown: CancellationToken,
    ) -> std::io::Result<(Self, StopOnDrop)> {
        let metrics = ctx.hub.metrics().listener(crate::server::SECTION);
        let spin = Arc::new(SpinContext {
            hub: ctx.hub.clone(),
            config: ctx.config.clone(),
            tokens: ctx.tokens.clone(),
            metrics: metrics.clone(),
        });
        let settings = PollerSettings {
            name: "wire-poller",
            cpu: ctx.config.cpu,
            spin_idle: Duration::from_millis(ctx.config.spin_idle_ms),
            drain,
        };
        let (poller, stop) = PollerHandle::start(settings, metrics)?;
        poller.stop_on(shutdown);
        Ok((LowLatency { poller, spin }, stop))
    }

    /// Serves one connection accepted by the listener core.
    pub(crate) async fn serve(self, conn: Connection, ctx: ConnectionContext) {
        let Connection {
            stream,
            peer,
            tls,
            inbound,
            shutdown,
            metrics,
        } = conn;
        let sock = match stream.into_std() {
            Ok(Ok(sock)) => sock,
            Ok(Err(e)) => {
                tracing::debug!("wire: cannot hand the socket to the poller: {e}");
                return;
            }
            Err(stream) => {
                // TLS: the default path serves it.
                let conn = Connection {
                    stream,
                    peer,
                    tls,
                    inbound,
                    shutdown,
                    metrics,
                };
                return connection::serve(conn, ctx).await;
            }
        };
        if self.poller.is_stopping() || shutdown.is_cancelled() {
            return;
        }
        let (link, hub_end) = hub_link::link();
        let conn = SpinConn::new(
            mio::net::TcpStream::from_std(sock),
            self.spin.clone(),
            link,
            inbound.idle_timeout(),
            inbound.read_timeout(),
        );
        if !self.poller.hand_over(conn) {
            return;
        }
        hub_link::run(
            hub_end,
            ctx.hub.clone(),
            ctx.config.clone(),
            metrics,
            self.poller.wake(),
        )
        .await;
    }
}
