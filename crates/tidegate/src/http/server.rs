//! HTTP/1.1 (hyper) on a listener-core connection. The core has already
//! applied the connection limit, the allow-list and TLS; here:
//!
//! - the header-read timeout is the listener's `read_timeout_ms` (a client
//!   that trickles its request line or headers is closed), measured from a
//!   head's first byte — a keep-alive connection waiting quietly for its
//!   next request is governed by `idle_timeout_ms` instead;
//! - the request timeout, body limit and byte budget are [`super::limits`]'s,
//!   wrapped around the application before it gets here;
//! - a keep-alive connection with no request in flight that moves no byte
//!   for `idle_timeout_ms` is closed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tidegate_hub::UpgradedBytes;
use tidegate_listener::{Activity, Connection};
use tower::ServiceExt;

use super::first_head::{read_first_head, FirstHead};
use super::limits::HttpApp;
use super::tracked::TrackedStream;

/// Largest buffer hyper keeps per connection for headers and body reads.
const MAX_CONNECTION_BUFFER_BYTES: usize = 64 * 1024;

/// What the watchdog of one connection knows: requests in flight, and
/// when the head of the next request began to arrive.
///
/// hyper's own header-read timer also runs while a keep-alive connection
/// waits for its next request, which would close every quiet keep-alive
/// connection after `read_timeout_ms` and count it as a slow header. So the
/// two clocks are kept here instead: a head that started must be complete
/// within `read_timeout_ms`; a connection with nothing started and nothing
/// in flight may stay quiet for `idle_timeout_ms`.
#[derive(Default)]
pub(super) struct ConnClock {
    in_flight: AtomicUsize,
    /// Set when a request was answered with 101 Switching Protocols: the
    /// stream's reads are then metered by [`TrackedStream`].
    pub(super) upgraded: std::sync::atomic::AtomicBool,
    /// Milliseconds after `origin` at which the pending head's first byte
    /// arrived, plus one (0: no head pending).
    head_started: std::sync::atomic::AtomicU64,
    /// Wakes the watchdog when a head starts or the last request ends, so
    /// it sleeps until the next deadline instead of polling.
    changed: tokio::sync::Notify,
}

impl ConnClock {
    fn since(origin: Instant) -> u64 {
        origin.elapsed().as_millis() as u64 + 1
    }

    /// Bytes arrived: the start of a head, unless a request is being read
    /// or answered (then they are its body, or a pipelined request).
    pub(super) fn bytes_read(&self, origin: Instant) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self
                .head_started
                .compare_exchange(0, Self::since(origin), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.changed.notify_one();
        }
    }

    /// A head is complete and its request begins.
    fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
    }

    fn request_done(&self) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.changed.notify_one();
        }
    }
}

/// Counts one request of a connection until it is answered.
struct InFlight(Arc<ConnClock>);

impl InFlight {
    fn enter(clock: &Arc<ConnClock>) -> InFlight {
        clock.request_started();
        InFlight(clock.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// Why the watchdog closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    /// A request head started and did not complete in time.
    Header,
    /// Nothing moved and nothing was pending.
    Idle,
}

/// Resolves when a started head has taken longer than `header`, or when the
/// connection, with nothing pending, has moved no byte for `idle`.
async fn watchdog(
    activity: Activity,
    clock: Arc<ConnClock>,
    origin: Instant,
    header: Option<Duration>,
    idle: Option<Duration>,
) -> Expired {
    loop {
        let changed = clock.changed.notified();
        let now = Instant::now();
        let started = clock.head_started.load(Ordering::Relaxed);
        let mut next = None;
        if started > 0 {
            if let Some(header) = header {
                let due = origin + Duration::from_millis(started - 1) + header;
                if now >= due {
                    return Expired::Header;
                }
                next = Some(due);
            }
        } else if clock.in_flight.load(Ordering::Relaxed) == 0 {
            if let Some(idle) = idle {
                let due = activity.last() + idle;
                if now >= due {
                    return Expired::Idle;
                }
                next = Some(due);
            }
        }
        match next {
            Some(due) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(due.into()) => {}
                    _ = changed => {}
                }
            }
            None => changed.await,
        }
    }
}

/// Serves HTTP/1.1 on one connection until the client closes, it idles
/// out, or shutdown (which lets the request in progress finish). An
/// upgraded connection (WebSocket) keeps its place under `max_connections`
/// and in the open-connections gauge until its handler lets it go.
pub async fn serve_connection(conn: Connection, app: HttpApp) {
    // The HTTP part runs in an allocation of its own, let go when it ends:
    // an upgraded connection's task then holds only the wait for its
    // handler (a few bytes, where the HTTP state machine took kilobytes for
    // every idle websocket).
    if let Some(dropped) = Box::pin(serve_http(conn, app)).await {
        // Resolves at once unless an upgrade handed the stream on.
        let _ = dropped.await;
    }
}

/// [`serve_connection`] until hyper lets go of the connection; then the
/// signal of the stream's drop (`None` if it never got that far).
async fn serve_http(conn: Connection, app: HttpApp) -> Option<tokio::sync::oneshot::Receiver<()>> {
    let Connection {
        stream,
        inbound,
        shutdown,
        metrics,
        peer,
        ..
    } = conn;
    // hyper allocates its buffers when it starts reading: the first head
    // is collected in a buffer sized to what arrives (nothing before the
    // first byte), so a quiet or trickling connection holds next to
    // nothing. Until its first byte a connection is idle (`idle_timeout`);
    // from it, the head has `read_timeout` (a spurious readiness, or TLS,
    // where readiness says nothing, must not start that clock).
    let mut stream = stream;
    let prefix = tokio::select! {
        head = read_first_head(&mut stream, MAX_CONNECTION_BUFFER_BYTES, inbound.idle_timeout(), inbound.read_timeout()) => match head {
            FirstHead::Ready(head) => head,
            FirstHead::Idle => {
                metrics.error("idle_timeout");
                return None;
            }
            FirstHead::Closed => {
                metrics.error("truncated");
                return None;
            }
            FirstHead::TimedOut => {
                metrics.error("read_timeout");
                return None;
            }
            FirstHead::Failed(e) => {
                metrics.error("io");
                tracing::debug!(%peer, error = %e, "http connection failed before its first request");
                return None;
            }
        },
        _ = shutdown.cancelled() => return None,
    };
    let activity = inbound.activity().clone();
    let budget = inbound.budget().clone();
    let clock = Arc::new(ConnClock::default());
    let origin = Instant::now();
    let upgraded = UpgradedBytes::new(&budget);
    let svc = {
        let clock = clock.clone();
        let metrics = metrics.clone();
        let upgraded = upgraded.clone();
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            let app = app.clone();
            let guard = InFlight::enter(&clock);
            let clock = clock.clone();
            metrics.frames_in(1);
            // A websocket handler releases the upgraded stream's bytes
            // after each message (see `tracked`).
            req.extensions_mut().insert(upgraded.clone());
            async move {
                let r = app.oneshot(req.map(Body::new)).await;
                if let Ok(resp) = &r {
                    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                        clock.upgraded.store(true, Ordering::Relaxed);
                    }
                }
                drop(guard);
                r
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(MAX_CONNECTION_BUFFER_BYTES);
    // The header-read timeout is the watchdog's (see `ConnClock`), so
    // hyper's own, which defaults to 30 s once a timer is set, is off.
    builder.header_read_timeout(None);
    let (dropped_tx, dropped) = tokio::sync::oneshot::channel::<()>();
    let stream = TrackedStream::new(
        stream,
        prefix,
        clock.clone(),
        origin,
        budget,
        upgraded,
        dropped_tx,
    );
    // Boxed, not pinned on the stack, so it can be dropped (closing the
    // socket) before waiting for an upgraded stream below.
    let mut serving = Box::pin(
        builder
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades(),
    );
    let expiry = watchdog(
        activity,
        clock,
        origin,
        inbound.read_timeout(),
        inbound.idle_timeout(),
    );
    tokio::pin!(expiry);
    let mut draining = false;
    loop {
        tokio::select! {
            r = serving.as_mut() => {
                if let Err(e) = r {
                    let kind = if e.is_timeout() { "read_timeout" } else if e.is_parse() || e.is_parse_too_large() { "bad_request" } else { "io" };
                    metrics.error(kind);
                    tracing::debug!(%peer, error = %e, "http connection ended");
                }
                break;
            }
            _ = shutdown.cancelled(), if !draining => {
                draining = true;
                serving.as_mut().graceful_shutdown();
            }
            why = &mut expiry, if !draining => {
                metrics.error(match why {
                    Expired::Header => "read_timeout",
                    Expired::Idle => "idle_timeout",
                });
                break;
            }
        }
    }
    drop(serving);
    Some(dropped)
}
