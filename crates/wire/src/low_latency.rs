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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::Duration;

use tidegate_listener::Connection;

use crate::connection::{self, ConnectionContext};
use crate::hub_link::{self, Wake};
use crate::spin_conn::{SpinConn, SpinContext};
use crate::spin_poller::{NewConn, Poller, Shared, WAKE_TOKEN};

/// A running poller thread, shared by the listener's session tasks.
#[derive(Clone)]
pub(crate) struct LowLatency {
    shared: Arc<Shared>,
    /// Used at hand-over only (once per connection), never per message.
    incoming: Sender<NewConn>,
    spin: Arc<SpinContext>,
}

/// Stops the poller when the server's `run` ends, however it ends.
pub(crate) struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stopping.store(true, Ordering::Release);
        self.0.wake.wake_always();
    }
}

impl LowLatency {
    /// Starts the poller thread (pinned to `cpu` when set).
    pub(crate) fn start(
        ctx: &ConnectionContext,
        drain: Duration,
    ) -> std::io::Result<(Self, StopOnDrop)> {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKE_TOKEN)?;
        let shared = Arc::new(Shared {
            wake: Arc::new(Wake::new(waker)),
            stopping: AtomicBool::new(false),
        });
        let spin = Arc::new(SpinContext {
            hub: ctx.hub.clone(),
            config: ctx.config.clone(),
            tokens: ctx.tokens.clone(),
            metrics: ctx.hub.metrics().listener(crate::server::SECTION),
        });
        let (tx, rx) = mpsc::channel();
        let poller = Poller {
            poll,
            shared: shared.clone(),
            incoming: rx,
            ctx: spin.clone(),
            spin_idle: Duration::from_millis(ctx.config.spin_idle_ms),
            drain,
        };
        let cpu = ctx.config.cpu;
        std::thread::Builder::new()
            .name("wire-poller".into())
            .spawn(move || {
                if let Some(cpu) = cpu {
                    pin_to(cpu);
                }
                poller.run();
            })?;
        Ok((
            LowLatency {
                shared: shared.clone(),
                incoming: tx,
                spin,
            },
            StopOnDrop(shared),
        ))
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
        if self.shared.stopping.load(Ordering::Acquire) || shutdown.is_cancelled() {
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
        if self.incoming.send(NewConn { conn }).is_err() {
            return; // the poller has stopped: the socket closes with it
        }
        self.shared.wake.wake_always();
        hub_link::run(
            hub_end,
            ctx.hub.clone(),
            ctx.config.clone(),
            metrics,
            self.shared.wake.clone(),
        )
        .await;
    }
}

/// Pins the poller to `cpu`; a CPU that does not exist is logged and
/// ignored (the thread runs unpinned).
fn pin_to(cpu: usize) {
    if crate::pin::pin_current_thread(cpu) {
        tracing::info!(cpu, "wire low-latency poller pinned");
    } else {
        tracing::warn!(
            cpu,
            "[wire] cpu: cannot pin the poller to this CPU; running unpinned"
        );
    }
}
