//! A `/ws` connection: JSON requests in, replies and hub messages out. The
//! writer drains everything queued and flushes once per wake-up; a hub
//! queue that overflows under `disconnect` closes with code 1008 and the
//! reason.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::response::Response;
use futures::{SinkExt, StreamExt};

use crate::app::json::{JsonOut, JsonSession};
use crate::auth::{authorize, now_s, Grants};
use crate::context::PushContext;
use crate::engineio::handshake::query_param;
use crate::session::task::DELIVERY_BATCH;

/// WebSocket close code "policy violation": a slow consumer, a refused token.
pub const CLOSE_POLICY: u16 = 1008;

/// `GET /ws`.
pub async fn handle(
    State(ctx): State<Arc<PushContext>>,
    RawQuery(query): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    let token = query.as_deref().and_then(|q| query_param(q, "token"));
    let grants = authorize(&ctx.config, token, now_s());
    ws.max_message_size(ctx.config.max_payload)
        .max_frame_size(ctx.config.max_payload)
        .on_upgrade(move |mut socket| async move {
            match grants {
                Ok(g) => serve(socket, ctx, g).await,
                Err(e) => {
                    // Refused after the upgrade so the client can read why.
                    let close = CloseFrame {
                        code: CLOSE_POLICY,
                        reason: e.to_string().into(),
                    };
                    let _ = socket.send(Message::Close(Some(close))).await;
                }
            }
        })
}

fn frame(o: JsonOut) -> Message {
    match o {
        JsonOut::Text(t) => axum::extract::ws::Utf8Bytes::try_from(t.clone())
            .map(Message::Text)
            .unwrap_or(Message::Binary(t)),
        JsonOut::Binary(b) => Message::Binary(b),
    }
}

async fn serve(socket: WebSocket, ctx: Arc<PushContext>, grants: Grants) {
    let mut session = JsonSession::new(
        ctx.hub.subscriber(ctx.config.subscriber_options()),
        ctx.config.max_subscriptions,
        grants,
    );
    let (mut tx, mut rx) = socket.split();
    let mut out = Vec::new();
    let mut batch = Vec::with_capacity(DELIVERY_BATCH);
    loop {
        tokio::select! {
            m = rx.next() => {
                match m {
                    Some(Ok(Message::Text(t))) => session.on_text(&t, &ctx.hub, &mut out).await,
                    Some(Ok(Message::Binary(b))) => session.on_binary(b, &ctx.hub, &mut out).await,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    _ => return,
                }
            }
            r = session.subscriber().recv_many(&mut batch, DELIVERY_BATCH) => {
                match r {
                    Ok(_) => {
                        session.deliver(&batch, &mut out);
                        batch.clear();
                    }
                    Err(e) => {
                        let close = CloseFrame { code: CLOSE_POLICY, reason: e.to_string().into() };
                        let _ = tx.send(Message::Close(Some(close))).await;
                        return;
                    }
                }
            }
        }
        // One flush for everything this wake-up produced.
        for o in out.drain(..) {
            if tx.feed(frame(o)).await.is_err() {
                return;
            }
        }
        if tx.flush().await.is_err() {
            return;
        }
    }
}
