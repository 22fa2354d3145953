//! The `[sockperf]` echo listener: what the stock `sockperf` client drives in
//! `ping-pong` and `under-load` modes over TCP.
//!
//! It runs on the listener core like every other listener (connection limit,
//! allow-list, TLS, idle and partial-message timeouts, byte budget, drain).
//! A session is one task that reads, echoes and writes in turn on the
//! unsplit stream — no second task, no lock, no allocation per message: the
//! read buffer and the reply buffer are reused, and every reply produced by
//! one read leaves in one write. A client that stops reading its replies is
//! held back by TCP (nothing more is read while a write waits) and closed
//! once nothing moved for the idle timeout. The echo rule itself is the pure
//! [`echo_replies`] in `sockperf_header.rs`.
//!
//! With `mode = "low_latency"` each plain-TCP connection is handed to a
//! busy-polling thread instead (`sockperf_spin.rs` on `spin_poller.rs`),
//! while its session task waits for it to close.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tidegate_hub::Hub;
use tidegate_listener::{Connection, Listener, ListenerError, ReadError};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::connection::write_timeout;
use crate::sockperf_header::echo_replies;
use crate::sockperf_spin::SockperfSpinConn;
use crate::spin_poller::{PollerHandle, PollerSettings};
use crate::timed_write::{bounded, write_timed, StallLimit, WriteFailed};
use crate::{SockperfConfig, WireMode};

/// The listener's name: its config section and its metrics label.
pub const SECTION: &str = "sockperf";
/// How long shutdown waits for sessions to end (an echo has no in-flight
/// work beyond the write in progress).
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);
/// A reply buffer with more capacity than this is released after it is
/// written, so a burst does not pin memory on a quiet connection.
const KEEP_REPLY_CAPACITY: usize = 16 * 1024;

/// A bound `[sockperf]` echo listener, ready to serve.
#[derive(Debug)]
pub struct SockperfServer {
    listener: Listener,
    config: SockperfConfig,
}

impl SockperfServer {
    /// Loads the TLS files (if any) and binds `config.listener.listen` (port
    /// 0 picks a free port). Must be called inside a tokio runtime.
    pub fn bind(config: SockperfConfig) -> Result<Self, ListenerError> {
        let listener = Listener::bind(SECTION, config.listener.settings())?;
        Ok(SockperfServer { listener, config })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then stops accepting and closes
    /// every open connection.
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let max_message = self.config.max_message;
        if self.config.mode == WireMode::Default {
            return self
                .listener
                .run(&hub, shutdown, SHUTDOWN_DRAIN, move |conn: Connection| {
                    echo_session(conn, max_message)
                })
                .await;
        }
        let settings = PollerSettings {
            name: "sockperf-poller",
            cpu: self.config.cpu,
            spin_idle: Duration::from_millis(self.config.spin_idle_ms),
            drain: SHUTDOWN_DRAIN,
        };
        let (poller, _stop) = PollerHandle::start(settings, hub.metrics().listener(SECTION))?;
        poller.stop_on(shutdown.clone());
        self.listener
            .run(&hub, shutdown, SHUTDOWN_DRAIN, move |conn: Connection| {
                spin_session(conn, max_message, poller.clone())
            })
            .await
    }
}

/// Hands a plain connection to the poller and waits until it is closed
/// (TLS stays on the tokio path).
async fn spin_session(
    conn: Connection,
    max_message: usize,
    poller: PollerHandle<SockperfSpinConn>,
) {
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
            tracing::debug!("sockperf: cannot hand the socket to the poller: {e}");
            return;
        }
        Err(stream) => {
            let conn = Connection {
                stream,
                peer,
                tls,
                inbound,
                shutdown,
                metrics,
            };
            return echo_session(conn, max_message).await;
        }
    };
    if poller.is_stopping() {
        return;
    }
    let (conn, closed) = SockperfSpinConn::new(
        mio::net::TcpStream::from_std(sock),
        metrics,
        max_message,
        inbound.idle_timeout(),
        inbound.read_timeout(),
    );
    if poller.hand_over(conn) {
        let _ = closed.await;
    }
}

/// Echoes on one connection until end of stream, an error or shutdown.
async fn echo_session(conn: Connection, max_message: usize) {
    let Connection {
        mut stream,
        mut inbound,
        shutdown,
        metrics,
        ..
    } = conn;
    let mut input = BytesMut::new();
    let mut replies = Vec::new();
    let limit = StallLimit {
        open: write_timeout(&inbound),
        closing: Some(&shutdown),
    };
    // Created once: a fresh cancellation waiter per read would cost a lock
    // per message.
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    loop {
        let read = tokio::select! {
            biased;
            r = inbound.read(&mut stream, &mut input) => r,
            _ = &mut cancelled => return,
        };
        match read {
            Ok(0) => return,
            Ok(_) => {}
            // Timeouts are counted by the listener core.
            Err(e @ (ReadError::IdleTimeout(_) | ReadError::ReadTimeout(_))) => {
                tracing::debug!("sockperf: closing connection: {e}");
                return;
            }
            Err(e) => {
                metrics.error("io");
                tracing::debug!("sockperf: read failed: {e}");
                return;
            }
        }
        let echoed = match echo_replies(&input, max_message, &mut replies) {
            Ok(e) => e,
            Err(e) => {
                metrics.error("bad_length");
                tracing::debug!("sockperf: closing connection: {e}");
                return;
            }
        };
        input.advance(echoed.consumed);
        metrics.frames_in(echoed.messages);
        if !replies.is_empty() {
            // While this write waits the connection reads nothing, so TCP
            // holds back a client that does not read its replies; it is
            // closed once nothing moved for the timeout.
            if let Err(e) = write_timed(&mut stream, &replies, limit).await {
                metrics.error(match e {
                    WriteFailed::Stalled(_) => "write_timeout",
                    WriteFailed::Io(_) => "io",
                });
                tracing::debug!("sockperf: closing connection: write failed: {e}");
                let _ = bounded(StallLimit::closing_limit(limit.open), stream.shutdown()).await;
                return;
            }
            replies.clear();
            if replies.capacity() > KEEP_REPLY_CAPACITY {
                replies = Vec::new();
            }
        }
    }
}
