//! The `[http]` request limits, applied once to every request before it is
//! routed: `request_timeout_ms` (408) bounds a request from headers to
//! response, `max_body_bytes` (413) bounds its body, and the body's bytes
//! are drawn from the hub's in-flight budget as they arrive and held until
//! the response is produced, so many large uploads wait for room instead of
//! growing memory.
//!
//! One service wraps the whole router instead of a layer on every route:
//! an axum `Router::layer` runs after routing and boxes each route once
//! more per layer; wrapping once made a 3-node KV PUT load 2–14 % faster
//! (BENCHMARKS.md, "Writes skip the last-write-wins read; the request
//! limits wrap the router once").

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use tidegate_hub::{BodyBytes, BudgetPermit, InflightBudget};
use tower::util::Either;
use tower::Service;

use super::HttpConfig;

/// The HTTP application as served on a connection: the routes behind the
/// request timeout (when `request_timeout_ms` is not 0) and the body limits.
pub type HttpApp =
    Either<tower_http::timeout::Timeout<RequestLimits<Router>>, RequestLimits<Router>>;

/// Wraps `app` in the request limits of `[http]` and the byte budget.
pub fn with_limits(app: Router, config: &HttpConfig, budget: InflightBudget) -> HttpApp {
    let limited = RequestLimits {
        inner: app,
        max_body: config.max_body_bytes,
        budget,
    };
    if config.request_timeout_ms == 0 {
        return Either::Right(limited); // 0: no limit, as for every other `_ms` key
    }
    Either::Left(tower_http::timeout::Timeout::with_status_code(
        limited,
        StatusCode::REQUEST_TIMEOUT,
        Duration::from_millis(config.request_timeout_ms),
    ))
}

/// `inner` behind the body limit and the byte budget: refuses a body
/// announced larger than the limit at once, caps one sent without a length,
/// and meters what arrives against the budget.
#[derive(Clone)]
pub struct RequestLimits<S> {
    inner: S,
    max_body: usize,
    budget: InflightBudget,
}

impl<S> Service<Request> for RequestLimits<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answered<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // KV's signed node-to-node requests carry client bodies of up to
        // the limit with their framing (tidegate_kv::INTERNAL_BODY_ALLOWANCE).
        let max_body = match req
            .uri()
            .path()
            .starts_with(tidegate_kv::INTERNAL_PATH_PREFIX)
        {
            true => self
                .max_body
                .saturating_add(tidegate_kv::INTERNAL_BODY_ALLOWANCE),
            false => self.max_body,
        };
        let announced = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > max_body as u64) {
            return Answered::Refused {
                response: Some(too_large(self.max_body)),
            };
        }
        let held = BodyBytes::new(self.budget.empty());
        let (mut parts, body) = req.into_parts();
        // A handler that keeps the body's data past its response (S2S holds
        // FlowFiles until commit) takes these bytes with it.
        parts.extensions.insert(held.clone());
        let body = MeteredBody {
            inner: http_body_util::Limited::new(body, max_body),
            budget: self.budget.clone(),
            held: held.clone(),
            waiting: None,
        };
        Answered::Routed {
            inner: self.inner.call(Request::from_parts(parts, Body::new(body))),
            held: Some(held),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response of [`RequestLimits`]: the inner service's, with the
    /// body's bytes held until it is ready, or the refusal.
    #[project = AnsweredProj]
    pub enum Answered<F> {
        /// Routed to the inner service.
        Routed {
            #[pin]
            inner: F,
            held: Option<BodyBytes>,
        },
        /// Refused before routing (413).
        Refused { response: Option<Response> },
    }
}

impl<F> Future for Answered<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AnsweredProj::Routed { inner, held } => {
                let response = std::task::ready!(inner.poll(cx));
                // The body's bytes are held until the handler answered.
                held.take();
                Poll::Ready(response)
            }
            AnsweredProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("an answered request is not polled again"))),
        }
    }
}

fn too_large(max: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than [http] max_body_bytes = {max}\n"),
    )
        .into_response()
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
