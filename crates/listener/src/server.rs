//! [`Listener`]: bind, then accept with the connection limit and the CIDR
//! allow-list, run the TLS handshake, and hand each protocol session a ready
//! [`Connection`] in its own task and tracing span — counting everything
//! with the same metric names and labels on every listener, catching a
//! session's panic without losing the listener, and draining sessions for a
//! bounded time at shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use thiserror::Error;
use tidegate_hub::{Hub, ListenerMetrics};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::accept_errors::AcceptErrorLog;
use crate::config::ListenerSettings;
use crate::inbound::Inbound;
use crate::stream::{Activity, ConnStream};
use crate::tls::{self, TlsError};

/// Pending connections the kernel queues before `accept`.
const ACCEPT_BACKLOG: i32 = 4096;
/// Pause after a failed `accept` (out of descriptors, say), so the loop
/// does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(20);
/// TLS handshake limit when the listener has no read timeout.
const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener that cannot start; the message names the section and key.
#[derive(Debug, Error)]
pub enum ListenerError {
    /// The TLS files cannot be used.
    #[error("[{section}] {source}")]
    Tls {
        /// Config section.
        section: &'static str,
        /// What is wrong.
        source: TlsError,
    },
    /// The address cannot be bound.
    #[error("[{section}] listen = {addr}: cannot bind: {source}")]
    Bind {
        /// Config section.
        section: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
}

/// What the TLS handshake established about the client.
#[derive(Debug, Clone, Default)]
pub struct TlsIdentity {
    /// The client certificate's subject DN, when one was presented.
    pub client_dn: Option<String>,
}

/// One accepted connection, ready for its protocol session.
#[derive(Debug)]
pub struct Connection {
    /// The byte stream (plain or TLS), metered.
    pub stream: ConnStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// Set on TLS connections.
    pub tls: Option<TlsIdentity>,
    /// Reads through the budget and timeouts; use it for every read.
    pub inbound: Inbound,
    /// Cancelled when the process shuts down: finish what is in flight and
    /// close.
    pub shutdown: CancellationToken,
    /// The listener's counters.
    pub metrics: ListenerMetrics,
}

/// A bound listener, not yet accepting.
pub struct Listener {
    name: &'static str,
    tcp: TcpListener,
    tls: Option<TlsAcceptor>,
    settings: ListenerSettings,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.name)
            .field("listen", &self.tcp.local_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Loads a section's TLS files, if it has any (also what `config --check`
/// runs).
pub fn load_tls(
    section: &'static str,
    settings: &ListenerSettings,
) -> Result<Option<TlsAcceptor>, ListenerError> {
    match &settings.tls {
        None => Ok(None),
        Some(t) => tls::server_config(t)
            .map(|c| Some(TlsAcceptor::from(c)))
            .map_err(|source| ListenerError::Tls { section, source }),
    }
}

fn bind_socket(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // A restarted server must not wait out TIME_WAIT of its predecessor.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(ACCEPT_BACKLOG)?;
    Ok(socket.into())
}

impl Listener {
    /// Loads the TLS files, then binds `settings.listen` (port 0 picks a free
    /// port). Must be called inside a tokio runtime.
    pub fn bind(section: &'static str, settings: ListenerSettings) -> Result<Self, ListenerError> {
        let tls = load_tls(section, &settings)?;
        let bind_err = |source| ListenerError::Bind {
            section,
            addr: settings.listen,
            source,
        };
        let tcp = bind_socket(settings.listen)
            .and_then(TcpListener::from_std)
            .map_err(bind_err)?;
        Ok(Listener {
            name: section,
            tcp,
            tls,
            settings,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.tcp.local_addr().unwrap_or(self.settings.listen)
    }

    /// The section name (`forward`, `wire`, …), also the metrics label.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ListenerSettings {
        &self.settings
    }

    /// True when it serves TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Accepts until `shutdown` is cancelled, running `session` for each
    /// connection in its own task; then waits up to `drain` for sessions to
    /// finish. Returns an error only when accepting itself cannot go on.
    pub async fn run<F, Fut>(
        self,
        hub: &Hub,
        shutdown: CancellationToken,
        drain: Duration,
        session: F,
    ) -> io::Result<()>
    where
        F: Fn(Connection) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let metrics = hub.metrics().listener(self.name);
        let budget = hub.budget().clone();
        let session = Arc::new(session);
        let slots = Arc::new(Semaphore::new(self.settings.max_connections));
        let tracker = TaskTracker::new();
        tracing::info!(
            listener = self.name,
            listen = %self.local_addr(),
            tls = self.tls.is_some(),
            max_connections = self.settings.max_connections,
            "accepting"
        );
        let mut accept_errors = AcceptErrorLog::default();
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = self.tcp.accept() => a,
            };
            let (sock, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    metrics.refused("accept_error");
                    if let Some(failures) = accept_errors.failed(Instant::now()) {
                        tracing::warn!(
                            listener = self.name,
                            error = %e,
                            failures,
                            "accept failed (failures since the last such warning)"
                        );
                    }
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            if !self.settings.allows(peer.ip()) {
                metrics.refused("not_allowed");
                tracing::debug!(listener = self.name, %peer, "refused: not in the allow list");
                continue;
            }
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                metrics.refused("max_connections");
                tracing::debug!(listener = self.name, %peer, max = self.settings.max_connections, "refused: connection limit reached");
                continue;
            };
            let _ = sock.set_nodelay(true);
            // A DEBUG span: entering and leaving a span on every poll of
            // every connection task cost 6-9 % of an S2S transaction's
            // latency at INFO (measured with two servers side by side, one
            // with each level; BENCHMARKS.md, s2s). Events that matter at
            // INFO and above name the peer themselves; `RUST_LOG=debug`
            // (or `[conn]=debug` for these spans alone) puts every event
            // of a connection in its context.
            let span = tracing::debug_span!(
                "conn",
                listener = self.name,
                %peer,
                tls_id = tracing::field::Empty
            );
            let accepted = Accepted {
                name: self.name,
                sock,
                peer,
                tls: self.tls.clone(),
                settings: self.settings.clone(),
                metrics: metrics.clone(),
                budget: budget.clone(),
                shutdown: shutdown.clone(),
            };
            let session = session.clone();
            let metrics = metrics.clone();
            let name = self.name;
            tracker.spawn(
                async move {
                    let _slot = slot;
                    let _open = metrics.connection();
                    // Boxed: a TLS handshake's state is large and over
                    // once the session starts; inline, every connection's
                    // task would keep room for it as long as it lives.
                    let Some(conn) = Box::pin(accepted.handshake()).await else {
                        return;
                    };
                    let ran = std::panic::AssertUnwindSafe(session(conn))
                        .catch_unwind()
                        .await;
                    if let Err(panic) = ran {
                        metrics.error("panic");
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        tracing::error!(listener = name, %peer, panic = %what, "session panicked; connection closed, listener goes on");
                    }
                }
                .instrument(span),
            );
        }
        drop(self.tcp); // stop the kernel queueing connections nobody takes
        tracker.close();
        if tokio::time::timeout(drain, tracker.wait()).await.is_err() {
            tracing::warn!(
                listener = self.name,
                open = tracker.len(),
                ?drain,
                "sessions still open after the drain period; abandoning them"
            );
        }
        Ok(())
    }
}

/// A socket between `accept` and its session.
struct Accepted {
    /// The listener's name, for log events.
    name: &'static str,
    sock: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    settings: ListenerSettings,
    metrics: ListenerMetrics,
    budget: tidegate_hub::InflightBudget,
    shutdown: CancellationToken,
}

impl Accepted {
    /// Runs the TLS handshake (bounded by the read timeout) if the listener
    /// has TLS; `None` when it failed (counted and logged).
    async fn handshake(self) -> Option<Connection> {
        let activity = Activity::new();
        let (stream, identity) = match &self.tls {
            None => (
                ConnStream::plain(self.sock, self.metrics.clone(), activity.clone()),
                None,
            ),
            Some(acceptor) => {
                let limit = self
                    .settings
                    .read_timeout
                    .unwrap_or(DEFAULT_TLS_HANDSHAKE_TIMEOUT);
                let s = match tokio::time::timeout(limit, acceptor.accept(self.sock)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        self.metrics.error("tls_handshake");
                        tracing::warn!(listener = self.name, peer = %self.peer, error = %e, "TLS handshake failed");
                        return None;
                    }
                    Err(_) => {
                        self.metrics.error("tls_handshake_timeout");
                        tracing::warn!(listener = self.name, peer = %self.peer, ?limit, "TLS handshake timed out");
                        return None;
                    }
                };
                let dn = s
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| tls::subject_dn(c));
                if let Some(dn) = &dn {
                    tracing::Span::current().record("tls_id", dn.as_str());
                }
                (
                    ConnStream::tls(s, self.metrics.clone(), activity.clone()),
                    Some(TlsIdentity { client_dn: dn }),
                )
            }
        };
        activity.touch();
        let inbound = Inbound::new(
            self.budget,
            self.settings.idle_timeout,
            self.settings.read_timeout,
            activity,
            self.metrics.clone(),
        );
        Some(Connection {
            stream,
            peer: self.peer,
            tls: identity,
            inbound,
            shutdown: self.shutdown,
            metrics: self.metrics,
        })
    }
}
