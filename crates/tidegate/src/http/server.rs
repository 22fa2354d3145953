//! HTTP/1.1 (hyper) on a listener-core connection. The core has already
//! applied the connection limit, the allow-list and TLS; here:
//!
//! - the header-read timeout is the listener's `read_timeout_ms` (a client
//!   that trickles its request line or headers is closed);
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
use parking_lot::Mutex;
use tidegate_hub::{BudgetPermit, InflightBudget};
use tidegate_listener::{Activity, Connection};
use tower::Service;

use super::HttpConfig;

/// Largest buffer hyper keeps per connection for headers and body reads.
const MAX_CONNECTION_BUFFER_BYTES: usize = 64 * 1024;

/// Wraps `app` in the request limits of `[http]` and the byte budget.
pub fn with_limits(app: Router, config: &HttpConfig, budget: InflightBudget) -> Router {
    let limits = BodyLimits {
        max_body: config.max_body_bytes,
        budget,
    };
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    app.layer(axum::middleware::from_fn_with_state(limits, limit_body))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
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
    let held = Arc::new(Mutex::new(limits.budget.empty()));
    let (parts, body) = req.into_parts();
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
    held: Arc<Mutex<BudgetPermit>>,
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
            this.held.lock().merge(permit);
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
            this.held.lock().merge(permit);
            return Poll::Ready(Some(Ok(frame)));
        }
        let budget = this.budget.clone();
        let mut acquire: Acquire = Box::pin(async move { budget.acquire(n).await });
        match acquire.as_mut().poll(cx) {
            Poll::Ready(permit) => {
                this.held.lock().merge(permit);
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

/// Counts the requests of one connection that have not been answered.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(n: &Arc<AtomicUsize>) -> InFlight {
        n.fetch_add(1, Ordering::Relaxed);
        InFlight(n.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Resolves when the connection has had no request in flight and moved no
/// byte for `idle`.
async fn idle_expired(activity: Activity, in_flight: Arc<AtomicUsize>, idle: Option<Duration>) {
    let Some(idle) = idle else {
        return std::future::pending().await;
    };
    loop {
        let due = activity.last() + idle;
        if Instant::now() >= due && in_flight.load(Ordering::Relaxed) == 0 {
            return;
        }
        let next = due.max(Instant::now() + Duration::from_millis(100));
        tokio::time::sleep_until(next.into()).await;
    }
}

/// The connection's stream, signalling when it is finally dropped: by hyper
/// when the connection ends, or — after an upgrade — by the websocket
/// handler that took it over.
struct TrackedStream {
    stream: tidegate_listener::ConnStream,
    _dropped: tokio::sync::oneshot::Sender<()>,
}

impl tokio::io::AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Serves HTTP/1.1 on one connection until the client closes, it idles
/// out, or shutdown (which lets the request in progress finish). An
/// upgraded connection (WebSocket) keeps its place under `max_connections`
/// and in the open-connections gauge until its handler lets it go.
pub async fn serve_connection(conn: Connection, app: Router) {
    let Connection {
        stream,
        inbound,
        shutdown,
        metrics,
        peer,
        ..
    } = conn;
    let activity = inbound.activity().clone();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let svc = {
        let in_flight = in_flight.clone();
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let mut app = app.clone();
            let guard = InFlight::enter(&in_flight);
            async move {
                let r = app.call(req.map(Body::new)).await;
                drop(guard);
                r
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(MAX_CONNECTION_BUFFER_BYTES);
    if let Some(t) = inbound.read_timeout() {
        builder.header_read_timeout(t);
    }
    let (dropped_tx, dropped) = tokio::sync::oneshot::channel::<()>();
    let stream = TrackedStream {
        stream,
        _dropped: dropped_tx,
    };
    // Boxed, not pinned on the stack, so it can be dropped (closing the
    // socket) before waiting for an upgraded stream below.
    let mut serving = Box::pin(
        builder
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades(),
    );
    let idle = idle_expired(activity, in_flight, inbound.idle_timeout());
    tokio::pin!(idle);
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
            _ = &mut idle, if !draining => {
                metrics.error("idle_timeout");
                break;
            }
        }
    }
    drop(serving);
    // Resolves at once unless an upgrade handed the stream on.
    let _ = dropped.await;
}
