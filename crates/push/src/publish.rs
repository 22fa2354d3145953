//! `POST /v1/publish?topic=…`: the request body is published to the hub as
//! one message (200 `{"ok":true}`, 400 for a bad topic, 503 after shutdown
//! began). With `auth = "jwt"` a token (`Authorization: Bearer …` or
//! `?token=`) is required (401) and must allow the topic (403). The body
//! size is bounded by `[http] max_body_bytes`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tidegate_hub::{Message, PublishError};

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
    Query(q): Query<PublishQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
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
    match ctx.hub.publish(Message::new(q.topic, body)).await {
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
