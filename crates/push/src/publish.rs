//! `POST /v1/publish?topic=…`: the request body is published to the hub as
//! one message (200 `{"ok":true}`, 400 for a bad topic, 503 after shutdown
//! began). The body size is bounded by `[http] max_body_bytes`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tidegate_hub::{Message, PublishError};

use crate::context::PushContext;

/// The query of a publish.
#[derive(Debug, Deserialize)]
pub struct PublishQuery {
    /// The hub topic.
    pub topic: String,
}

/// `POST /v1/publish`.
pub async fn handle(
    State(ctx): State<Arc<PushContext>>,
    Query(q): Query<PublishQuery>,
    body: Bytes,
) -> Response {
    match ctx.hub.publish(Message::new(q.topic, body)).await {
        Ok(()) => (StatusCode::OK, "{\"ok\":true}\n").into_response(),
        Err(e) => {
            let status = match e {
                PublishError::BadTopic(_) => StatusCode::BAD_REQUEST,
                PublishError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            };
            (
                status,
                format!("{{\"ok\":false,\"reason\":{:?}}}\n", e.to_string()),
            )
                .into_response()
        }
    }
}
