//! The Engine.IO endpoint: one handler for `/engine.io/` and `/socket.io/`
//! that checks the query (400 with the reference's error codes), opens
//! sessions, and hands requests to [`polling`] or [`websocket`]. While the
//! server shuts down, handshakes and upgrades are answered 503
//! ([`crate::shutdown`]); requests of live sessions go on, so a poll can
//! still collect the session's close packet.

pub mod polling;
pub mod websocket;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use tidegate_hub::UpgradedBytes;

use crate::app::{json::JsonSession, socketio::SocketIoApp, App};
use crate::auth::Grants;
use crate::context::PushContext;
use crate::engineio::handshake::{new_sid, parse_query, query_param, HandshakeError, Transport};
use crate::session::engine::Forgotten;
use crate::session::{task, EngineSession};

/// Which application protocol a path serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `/socket.io/`: Socket.IO v5.
    SocketIo,
    /// `/engine.io/`: plain Engine.IO (JSON protocol, or echo in conformance mode).
    EngineIo,
}

/// The 400 answer for `e`, as the reference server words it.
pub fn refuse(e: HandshakeError) -> Response {
    let status = if e == HandshakeError::Forbidden {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::BAD_REQUEST
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        e.body(),
    )
        .into_response()
}

/// Handles every request under an Engine.IO path.
// An axum handler: one argument per extractor.
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    flavor: Flavor,
    State(ctx): State<Arc<PushContext>>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgraded: Option<Extension<UpgradedBytes>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    body: Body,
) -> Response {
    let upgraded = upgraded.map(|Extension(u)| u);
    let origin = match crate::origin::check(&ctx.config, &headers) {
        Ok(o) => o,
        Err(refusal) => return refusal.into_response(),
    };
    if method == Method::OPTIONS {
        return crate::origin::preflight(origin, &headers);
    }
    let mut resp = route(flavor, ctx, method, query, (ws, upgraded), body).await;
    crate::origin::add_cors(&mut resp, origin);
    resp
}

async fn route(
    flavor: Flavor,
    ctx: Arc<PushContext>,
    method: Method,
    query: Option<String>,
    (ws, upgraded): (
        Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
        Option<UpgradedBytes>,
    ),
    body: Body,
) -> Response {
    let raw = query.as_deref().unwrap_or("");
    let token = query_param(raw, "token");
    let q = match parse_query(raw) {
        Ok(q) => q,
        Err(e) => return refuse(e),
    };
    // The shared token's check takes a lock every session's request would
    // contend for, so only handshakes and upgrades look at it.
    if (q.sid.is_none() || q.transport == Transport::WebSocket) && ctx.shutting_down() {
        return crate::shutdown::refusal();
    }
    match (q.sid, q.transport) {
        (None, Transport::Polling) => {
            if method != Method::GET {
                return refuse(HandshakeError::BadHandshakeMethod);
            }
            match open(flavor, &ctx, Transport::Polling, token) {
                Ok((_, open_text)) => polling::text_response(open_text.into_bytes()),
                Err(e) => refuse(e),
            }
        }
        (None, Transport::WebSocket) => {
            let Ok(ws) = ws else {
                return refuse(HandshakeError::BadRequest);
            };
            match open(flavor, &ctx, Transport::WebSocket, token) {
                Ok((s, open_text)) => websocket::serve_new(ws, s, open_text, ctx, upgraded),
                Err(e) => refuse(e),
            }
        }
        (Some(sid), transport) => {
            let Some(s) = ctx.sessions.get(&sid) else {
                return refuse(HandshakeError::UnknownSid);
            };
            let polling_get = method == Method::GET && transport == Transport::Polling;
            match s.forgotten(polling_get) {
                Some(Forgotten::PongOverdue) => {
                    // Ended by the ping timeout; its task is about to notice.
                    s.close();
                    return refuse(HandshakeError::UnknownSid);
                }
                // The client closed it: only a GET racing the close still
                // finds it (for its noop); a POST or an upgrade is for a
                // session the reference has already forgotten.
                Some(Forgotten::ClosedByClient) => return refuse(HandshakeError::UnknownSid),
                None => {}
            }
            match transport {
                Transport::Polling => polling::handle(s, method, body, &ctx).await,
                Transport::WebSocket => match ws {
                    Ok(ws) => websocket::serve_upgrade(ws, s, ctx, upgraded),
                    Err(_) => refuse(HandshakeError::BadRequest),
                },
            }
        }
    }
}

/// Opens a session on `transport`, starts its task, and returns it with its
/// open packet.
fn open(
    flavor: Flavor,
    ctx: &Arc<PushContext>,
    transport: Transport,
    token: Option<&str>,
) -> Result<(Arc<EngineSession>, String), HandshakeError> {
    // Socket.IO authenticates per namespace in CONNECT; plain Engine.IO
    // sessions carry their token in the handshake query.
    let grants = match flavor {
        Flavor::EngineIo => ctx
            .authorize(token)
            .map_err(|_| HandshakeError::Forbidden)?,
        Flavor::SocketIo => Grants::all(),
    };
    let sid = new_sid();
    let opened = tokio::time::Instant::now();
    let (session, inbound) = EngineSession::new(sid, transport);
    let session = Arc::new(session);
    if !ctx
        .sessions
        .insert(session.clone(), ctx.config.max_sessions)
    {
        return Err(HandshakeError::Forbidden);
    }
    let upgrades: &[&str] = match transport {
        Transport::Polling => &["websocket"],
        Transport::WebSocket => &[],
    };
    let open_text = crate::engineio::handshake::OpenInfo {
        sid: &session.sid,
        upgrades,
        ping_interval: ctx.config.ping_interval_ms,
        ping_timeout: ctx.config.ping_timeout_ms,
        max_payload: ctx.config.max_payload,
    }
    .packet_text();
    let app = match flavor {
        Flavor::SocketIo => App::SocketIo(Box::new(SocketIoApp::new(ctx))),
        Flavor::EngineIo if ctx.config.conformance => App::Echo,
        Flavor::EngineIo => {
            let j = JsonSession::new(ctx, grants);
            if let Some(hello) = j.hello() {
                crate::app::send_json(&session, vec![hello]);
            }
            App::Json(Box::new(j))
        }
    };
    tokio::spawn(task::run(
        session.clone(),
        opened,
        inbound,
        app,
        ctx.clone(),
    ));
    Ok((session, open_text))
}
