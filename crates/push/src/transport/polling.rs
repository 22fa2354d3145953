//! HTTP long-polling: a GET waits for the session's outbox and answers with
//! everything queued within maxPayload (one `\x1e`-joined body); a GET that
//! had to wait holds its answer as a websocket write is held
//! (`[push] busy_write_delay_ms`, `write_delay_ms`: [`crate::session::flush`]),
//! so what arrives meanwhile rides along; a POST
//! carries client packets. One GET and one POST at a time: a second
//! concurrent one is a 400 and closes the session (spec). Polling after an
//! upgrade is a 400.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::refuse;
use crate::context::PushContext;
use crate::engineio::handshake::HandshakeError;
use crate::engineio::packet::EioPacket;
use crate::engineio::payload::decode_payload;
use crate::engineio::EioError;
use crate::session::engine::PollAnswer;
use crate::session::flush::hold_for;
use crate::session::task::DELIVERY_BATCH;
use crate::session::EngineSession;

/// A pending GET is answered with a noop after this long at most, so it
/// always ends before `[http] request_timeout_ms` whatever the ping
/// settings (the client simply polls again).
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(30);

/// `200 text/plain` with `body`.
pub fn text_response(body: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=UTF-8")],
        body,
    )
        .into_response()
}

/// Clears the pending-GET mark however the request ends (answered, or the
/// client went away and the future was dropped).
struct PollGuard<'a>(&'a EngineSession);

impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        self.0.end_poll();
    }
}

struct PostGuard<'a>(&'a EngineSession);

impl Drop for PostGuard<'_> {
    fn drop(&mut self) {
        self.0.end_post();
    }
}

/// Serves a GET or POST on an existing session.
pub async fn handle(
    s: Arc<EngineSession>,
    method: Method,
    body: Body,
    ctx: &PushContext,
) -> Response {
    if method == Method::GET && s.is_upgrading() {
        // Not a POST: engine.io-client finishes the POST under way before
        // it sends `5`, so a POST waiting here would only wait the time out.
        wait_for_upgrade(&s, ctx).await;
    }
    if !s.is_polling() {
        return refuse(HandshakeError::BadRequest);
    }
    match method {
        Method::GET => get(&s, ctx).await,
        Method::POST => post(&s, body, ctx).await,
        _ => refuse(HandshakeError::BadRequest),
    }
}

/// How long a GET that comes during an upgrade (probe answered, the
/// client's `5` not read yet) waits for its outcome: the reference server
/// answers such a GET with a noop from a timer that ticks every 100 ms.
const UPGRADE_OUTCOME_WAIT: Duration = Duration::from_millis(100);

/// Waits, at most [`UPGRADE_OUTCOME_WAIT`], until the upgrade under way
/// completed or failed. A GET sent after the `5` may overtake it on its
/// way here (the protocol's test suite sends `2probe`, `5` and a GET at
/// once) and must get the answer it would have got after it: 400 once the
/// websocket took over. A GET whose client has not sent `5` yet (it waits
/// for this GET first) gets its noop after the wait, as from the
/// reference. Rare, so checked every few milliseconds rather than with a
/// notifier every session would carry.
async fn wait_for_upgrade(s: &EngineSession, ctx: &PushContext) {
    let until = tokio::time::Instant::now() + UPGRADE_OUTCOME_WAIT;
    while s.is_upgrading() && !s.is_closed() && tokio::time::Instant::now() < until {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = ctx.shutdown.cancelled() => return,
        }
    }
}

async fn get(s: &EngineSession, ctx: &PushContext) -> Response {
    if !s.begin_poll() {
        // A second concurrent GET: the spec closes the session; the first
        // GET then answers `1`.
        s.close();
        return refuse(HandshakeError::BadRequest);
    }
    let _guard = PollGuard(s);
    let deadline = tokio::time::Instant::now()
        + MAX_POLL_WAIT.min(Duration::from_millis(
            ctx.config.ping_interval_ms + ctx.config.ping_timeout_ms,
        ));
    let delay = ctx.config.write_delay();
    let busy_delay = ctx.config.busy_write_delay();
    let mut waited = false;
    loop {
        let pending = s.outbox_len();
        if waited && pending > 0 && pending < DELIVERY_BATCH {
            // The first packet for a GET that had to wait: hold the answer
            // (`write_delay_ms`, or `busy_write_delay_ms` when the server is
            // loaded and packets come close together) so what arrives
            // meanwhile rides along. A GET that finds packets waiting takes
            // them at once.
            waited = false;
            let now = tokio::time::Instant::now();
            let until =
                deadline.min(now + hold_for(delay, busy_delay, s.send_gap(), ctx.load.is_loaded()));
            if until > now {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = s.closed() => {}
                }
            }
        }
        let wake = s.writable();
        match s.poll(ctx.config.max_payload) {
            PollAnswer::Payload(b) => {
                if s.is_closed_by_client() {
                    // Its noop after the client's own close: no request
                    // finds the session after this one.
                    ctx.sessions.remove(&s.sid);
                }
                return text_response(b);
            }
            PollAnswer::Wait => {}
            PollAnswer::Upgraded => return refuse(HandshakeError::BadRequest),
        }
        tokio::select! {
            _ = wake => waited = true,
            _ = s.closed() => {}
            _ = tokio::time::sleep_until(deadline) => return text_response(b"6".to_vec()),
        }
    }
}

async fn post(s: &EngineSession, body: Body, ctx: &PushContext) -> Response {
    if !s.begin_post() {
        s.close();
        return refuse(HandshakeError::BadRequest);
    }
    let _guard = PostGuard(s);
    let max = ctx.config.max_payload;
    let bytes = match axum::body::to_bytes(body, max.saturating_add(1)).await {
        Ok(b) => b,
        Err(_) => {
            // Larger than maxPayload (or the body broke off): the reference
            // answers 413 and closes the session.
            s.close();
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload larger than maxPayload\n",
            )
                .into_response();
        }
    };
    let packets = match decode_payload(&bytes, max) {
        Ok(p) => p,
        Err(e @ EioError::TooLarge { .. }) => {
            s.close();
            return (StatusCode::PAYLOAD_TOO_LARGE, format!("{e}\n")).into_response();
        }
        Err(e) => {
            s.close();
            return (StatusCode::BAD_REQUEST, format!("bad payload: {e}\n")).into_response();
        }
    };
    for p in packets {
        // Packets behind a close are not read (the reference drops what
        // reaches a closed socket).
        let close = matches!(p, EioPacket::Close);
        if !s.receive(p).await || close {
            break;
        }
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/html")], "ok").into_response()
}
