//! HTTP/1.1 (hyper) on a listener-core connection. The core has already
//! applied the connection limit, the allow-list and TLS; here:
//!
//! - the header-read timeout is the listener's `read_timeout_ms` (a client
//!   that trickles its request line or headers is closed), measured from a
//!   head's first byte — a keep-alive connection waiting quietly for its
//!   next request is governed by `idle_timeout_ms` instead;
//! - `[http] request_timeout_ms` bounds a request from headers to response
//!   (408), and `max_body_bytes` bounds its body (413 with a message saying
//!   which limit);
//! - request bodies draw their bytes from the hub's in-flight budget as
//!   they arrive and hold them until the response is produced, so many
//!   large uploads wait for room instead of growing memory;
//! - a keep-alive connection with no request in flight that moves no byte
//!   for `idle_timeout_ms` is closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tidegate_hub::{BodyBytes, BudgetPermit, InflightBudget, UpgradedBytes};
use tidegate_listener::{Activity, Connection};
use tower::Service;

use super::first_head::{read_first_head, FirstHead};
use super::tracked::TrackedStream;
use super::HttpConfig;

/// Largest buffer hyper keeps per connection for headers and body reads.
const MAX_CONNECTION_BUFFER_BYTES: usize = 64 * 1024;

/// Wraps `app` in the request limits of `[http]` and the byte budget.
pub fn with_limits(app: Router, config: &HttpConfig, budget: InflightBudget) -> Router {
    let limits = BodyLimits {
        max_body: config.max_body_bytes,
        budget,
    };
    let app = app.layer(axum::middleware::from_fn_with_state(limits, limit_body));
    if config.request_timeout_ms == 0 {
        return app; // 0: no limit, as for every other `_ms` key
    }
    app.layer(tower_http::timeout::TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        Duration::from_millis(config.request_timeout_ms),
    ))
}

#[derive(Clone)]
struct BodyLimits {
    max_body: usize,
    budget: InflightBudget,
}

fn too_large(max: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than [http] max_body_bytes = {max}\n"),
    )
        .into_response()
}

/// Refuses a body announced larger than the limit at once, caps one sent
/// without a length, and meters what arrives against the budget.
async fn limit_body(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.max_body as u64) {
        return too_large(limits.max_body);
    }
    let held = BodyBytes::new(limits.budget.empty());
    let (mut parts, body) = req.into_parts();
    // A handler that keeps the body's data past its response (S2S holds
    // FlowFiles until commit) takes these bytes with it.
    parts.extensions.insert(held.clone());
    let body = MeteredBody {
        inner: http_body_util::Limited::new(body, limits.max_body),
        budget: limits.budget.clone(),
        held: held.clone(),
        waiting: None,
    };
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    // The body's bytes are held until the handler answered.
    drop(held);
    response
}

type Acquire = Pin<Box<dyn Future<Output = BudgetPermit> + Send>>;

/// A request body whose frames are handed on only once their bytes are
/// taken from the budget.
struct MeteredBody<B> {
    inner: B,
    budget: InflightBudget,
    held: BodyBytes,
    waiting: Option<(Frame<Bytes>, Acquire)>,
}

impl<B> http_body::Body for MeteredBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Some((_, acquire)) = this.waiting.as_mut() {
            let permit = std::task::ready!(acquire.as_mut().poll(cx));
            this.held.add(permit);
            let (frame, _) = this.waiting.take().expect("checked above");
            return Poll::Ready(Some(Ok(frame)));
        }
        let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(f)) => f,
            other => return Poll::Ready(other),
        };
        let n = frame.data_ref().map_or(0, |d| d.len());
        if n == 0 {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(permit) = this.budget.try_acquire(n) {
            this.held.add(permit);
            return Poll::Ready(Some(Ok(frame)));
        }
        let budget = this.budget.clone();
        let mut acquire: Acquire = Box::pin(async move { budget.acquire(n).await });
        match acquire.as_mut().poll(cx) {
            Poll::Ready(permit) => {
                this.held.add(permit);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                this.waiting = Some((frame, acquire));
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.waiting.is_none() && self.inner.is_end_stream()
    }
}

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
pub async fn serve_connection(conn: Connection, app: Router) {
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
async fn serve_http(conn: Connection, app: Router) -> Option<tokio::sync::oneshot::Receiver<()>> {
    let Connection {
        stream,
        inbound,
        shutdown,
        metrics,
        peer,
        ..
    } = conn;
    // hyper allocates its buffers when it starts reading: wait for the
    // first byte, then collect the first head in a buffer sized to what
    // arrives, so a quiet or trickling connection holds next to nothing.
    let first_byte = async {
        match inbound.idle_timeout() {
            Some(idle) => tokio::time::timeout(idle, stream.readable()).await.ok(),
            None => Some(stream.readable().await),
        }
    };
    tokio::select! {
        ready = first_byte => match ready {
            Some(Ok(())) => {}
            Some(Err(_)) => return None,
            None => {
                metrics.error("idle_timeout");
                return None;
            }
        },
        _ = shutdown.cancelled() => return None,
    }
    let mut stream = stream;
    let prefix = tokio::select! {
        head = read_first_head(&mut stream, MAX_CONNECTION_BUFFER_BYTES, inbound.read_timeout()) => match head {
            FirstHead::Ready(head) => head,
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
            let mut app = app.clone();
            let guard = InFlight::enter(&clock);
            let clock = clock.clone();
            metrics.frames_in(1);
            // A websocket handler releases the upgraded stream's bytes
            // after each message (see `tracked`).
            req.extensions_mut().insert(upgraded.clone());
            async move {
                let r = app.call(req.map(Body::new)).await;
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
