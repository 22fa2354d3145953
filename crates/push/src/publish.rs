//! `POST /v1/publish?topic=…`: the request body is published to the hub as
//! one message (200 `{"ok":true}`, 400 for a bad or missing topic, 503 after shutdown
//! began, or when it began while the publish waited). With `auth = "jwt"` a token (`Authorization: Bearer …` or
//! `?token=`) is required (401) and must allow the topic (403). The body
//! size is bounded by `[http] max_body_bytes`.
//!
//! Every client publish of push — this one, a `/ws` `publish`, a Socket.IO
//! `publish` event — goes through [`to_hub`], which gives it up at server
//! shutdown.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tidegate_hub::{Message, PublishError};
use tokio_util::sync::CancellationToken;

use crate::context::PushContext;

/// The query of a publish.
#[derive(Debug, Deserialize)]
pub struct PublishQuery {
    /// The hub topic.
    pub topic: String,
    /// A token, when not sent as `Authorization: Bearer`.
    pub token: Option<String>,
}

fn reason(why: &str) -> String {
    format!("{}\n", serde_json::json!({"ok": false, "reason": why}))
}

/// `POST /v1/publish`.
pub async fn handle(
    State(ctx): State<Arc<PushContext>>,
    query: Result<Query<PublishQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Refused in the same JSON as every other answer of this route (axum's
    // own rejection is a line of plain text).
    let Ok(Query(q)) = query else {
        return (
            StatusCode::BAD_REQUEST,
            reason("the query needs topic=<hub topic> (and token=<JWT> with auth on and no Authorization header)"),
        )
            .into_response();
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let grants = match ctx.authorize(bearer.or(q.token.as_deref())) {
        Ok(g) => g,
        Err(e) => return (StatusCode::UNAUTHORIZED, reason(&e.to_string())).into_response(),
    };
    if !grants.may_publish(&q.topic) {
        return (StatusCode::FORBIDDEN, reason("not allowed by the token")).into_response();
    }
    match to_hub(&ctx, Message::new(q.topic, body)).await {
        Ok(()) => (StatusCode::OK, "{\"ok\":true}\n").into_response(),
        Err(e) => {
            let status = match e {
                PublishError::BadTopic(_) => StatusCode::BAD_REQUEST,
                PublishError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            };
            (status, reason(&e.to_string())).into_response()
        }
    }
}

/// Publishes a client's `msg` to the hub, unless the server shuts down
/// first ([`PushContext::shutdown`]): then the publish is given up and
/// answered [`PublishError::ShuttingDown`], as one after the hub closed.
///
/// A hub publish waits while a sink its topic routes to has no room (a
/// Kafka sink with its queue full, a broker that is gone); meanwhile the
/// session that awaits it sees nothing else, the shutdown included, and
/// would hold the `[http]` drain until `shutdown_grace_ms`.
///
/// Dropping `Hub::publish` is safe: nothing is left half-done inside the
/// hub or a sink. Its waits are a sink's `send` (the Kafka and S2S sinks
/// take nothing until they have room — Kafka's queue place is held by a
/// guard that gives it back, S2S waits for a channel permit; the message's
/// ack token, dropped, counts a route failure) and, in cluster mode, the
/// backbone's (which also takes nothing until it has room); the in-flight
/// byte budget is
/// not drawn by a publish (the connection's read holds its bytes, released
/// once the frame is handled, so sooner here). It is not undone either:
/// the hub queues a message to its subscribers (or hands it to the
/// backbone) before its sinks, so one given up may have reached them and
/// the sinks before the one that was full, but not that one. The client
/// is told it was not accepted, which promises nothing about where it went
/// — one that sends it again elsewhere may duplicate it for subscribers,
/// the at-least-once side of the trade.
pub async fn to_hub(ctx: &PushContext, msg: Message) -> Result<(), PublishError> {
    given_up_at(&ctx.shutdown, ctx.hub.publish(msg)).await
}

/// `publish`, or [`PublishError::ShuttingDown`] once `shutdown` is
/// cancelled (already, or while it waits).
async fn given_up_at(
    shutdown: &CancellationToken,
    publish: impl std::future::Future<Output = Result<(), PublishError>>,
) -> Result<(), PublishError> {
    tokio::select! {
        // A publish that does not wait still goes once the shutdown
        // began (the hub refuses it itself once closed).
        biased;
        r = publish => r,
        () = shutdown.cancelled() => Err(PublishError::ShuttingDown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiting_publish_is_given_up_at_the_shutdown() {
        let shutdown = CancellationToken::new();
        let cancel = shutdown.clone();
        tokio::spawn(async move { cancel.cancel() });
        let r = given_up_at(&shutdown, std::future::pending()).await;
        assert_eq!(r, Err(PublishError::ShuttingDown));
    }

    #[tokio::test]
    async fn one_that_does_not_wait_still_goes_after_it() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        assert_eq!(given_up_at(&shutdown, async { Ok(()) }).await, Ok(()));
    }
}
