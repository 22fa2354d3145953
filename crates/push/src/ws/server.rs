//! A `/ws` connection: JSON requests in, replies and hub messages out. The
//! writer drains everything queued and flushes once per wake-up (or once
//! the first pending frame has waited `[push] write_delay_ms`); a hub
//! queue that overflows under `disconnect` closes with code 1008 and the
//! reason. The server sends a WebSocket ping every `ping_interval_ms`; a
//! client that has not answered with a pong `ping_timeout_ms` later is
//! closed (code 1001), so dead connections are reaped — as is one that
//! leaves a write pending that long (it reads nothing). With recovery on, a
//! lost connection's session is parked for its client to recover. At server
//! shutdown the connection writes what it holds and closes with code 1001
//! ([`crate::shutdown`]), a write under way included, within
//! [`crate::shutdown::FLUSH_WAIT`]; a new one is refused with 503.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tidegate_hub::UpgradedBytes;
use tokio::time::{sleep_until, Instant};
use tracing::debug;

use crate::app::json::{JsonOut, JsonSession};
use crate::app::App;
use crate::auth::Grants;
use crate::context::PushContext;
use crate::engineio::handshake::query_param;
use crate::recovery::park::park;
use crate::session::flush::FlushTimer;
use crate::session::task::DELIVERY_BATCH;
use crate::shutdown::WriteBound;

/// WebSocket close code "policy violation": a slow consumer, a refused token.
pub const CLOSE_POLICY: u16 = 1008;
/// WebSocket close code "going away": no pong within the ping timeout, or
/// the server shutting down.
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// `GET /ws`.
pub async fn handle(
    State(ctx): State<Arc<PushContext>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgraded: Option<Extension<UpgradedBytes>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgraded = upgraded.map(|Extension(u)| u);
    // The origin is checked before the handshake itself, so a refused
    // page learns why whatever else is wrong with its request.
    if let Err(refusal) = crate::origin::check(&ctx.config, &headers) {
        return refusal.into_response();
    }
    if ctx.shutting_down() {
        return crate::shutdown::refusal();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(e) => return e.into_response(),
    };
    let token = query.as_deref().and_then(|q| query_param(q, "token"));
    let grants = ctx.authorize(token);
    ws.max_message_size(ctx.config.max_payload)
        .max_frame_size(ctx.config.max_payload)
        .read_buffer_size(crate::transport::websocket::WS_READ_BUFFER)
        .on_upgrade(move |mut socket| async move {
            match grants {
                Ok(g) => serve(socket, ctx, g, upgraded).await,
                Err(e) => {
                    // Refused after the upgrade so the client can read why.
                    let _ = socket.send(close(CLOSE_POLICY, e.to_string())).await;
                }
            }
        })
}

fn close(code: u16, reason: String) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// Sends `m`, giving up after `limit` (a client that reads nothing) or
/// soon after a shutdown ([`WriteBound`]); false when it was not sent.
async fn send_timed<S>(tx: &mut S, m: Message, limit: Duration, bound: &mut WriteBound) -> bool
where
    S: futures::Sink<Message> + Unpin,
{
    matches!(bound.within(limit, tx.send(m)).await, Some(Ok(())))
}

fn frame(o: JsonOut) -> Message {
    match o {
        JsonOut::Text(t) => axum::extract::ws::Utf8Bytes::try_from(t.clone())
            .map(Message::Text)
            .unwrap_or(Message::Binary(t)),
        JsonOut::Binary(b) => Message::Binary(b),
    }
}

/// How a `/ws` connection ends, for what becomes of its session.
enum End {
    /// The connection is gone (closed, broken, no pong): park the session.
    Lost,
    /// Closed by the server for a reason the client is told; drop it.
    Closed,
    /// A reconnecting client took the session over.
    TakenOver,
    /// The server is shutting down: write what is held, then close 1001.
    Shutdown,
}

/// `upgraded` holds the in-flight budget bytes the server took for what
/// this socket read; they go back once each message has been handled.
async fn serve(
    socket: WebSocket,
    ctx: Arc<PushContext>,
    grants: Grants,
    upgraded: Option<UpgradedBytes>,
) {
    let mut session = JsonSession::new(&ctx, grants);
    let _counted = ctx.stats.ws_session();
    let (mut tx, mut rx) = socket.split();
    let mut out: Vec<JsonOut> = session.hello().into_iter().collect();
    // Grown on the first delivery: an idle session holds no batch buffer.
    let mut batch = Vec::new();
    let interval = Duration::from_millis(ctx.config.ping_interval_ms);
    let timeout = Duration::from_millis(ctx.config.ping_timeout_ms);
    let mut next_ping = Instant::now() + interval;
    let mut pong_due: Option<Instant> = None;
    let mut flush = FlushTimer::new(
        ctx.config.write_delay(),
        ctx.config.busy_write_delay(),
        ctx.load.clone(),
    );
    let shutdown = ctx.session_shutdown();
    let mut bound = WriteBound::new(&shutdown);
    let end = loop {
        // Seen after a write or a request as well as in the select: the
        // session goes no further round, and what it holds goes out with
        // its close.
        if shutdown.is_cancelled() {
            break End::Shutdown;
        }
        // One flush for everything the last wake-up produced. A client
        // that does not read stalls the write; one that lets a frame wait
        // longer than the ping timeout is as dead as one that sends no
        // pong, and its backlog stays in the bounded hub queue meanwhile.
        // A shutdown cuts the wait short (`WriteBound`).
        if flush.due(out.len()) {
            flush.done();
            let write = async {
                for o in out.drain(..) {
                    tx.feed(frame(o)).await?;
                }
                tx.flush().await
            };
            match bound.within(timeout, write).await {
                Some(Ok(())) => {}
                Some(Err(_)) => break End::Lost,
                None if shutdown.is_cancelled() => {
                    debug!("/ws client read nothing since the shutdown; closing");
                    break End::Shutdown;
                }
                None => {
                    debug!("/ws client read nothing within ping_timeout_ms; closing");
                    break End::Lost;
                }
            }
        }
        let handle = session.recovery_handle();
        tokio::select! {
            m = rx.next() => {
                let _handled = upgraded.as_ref().map(UpgradedBytes::release_when_done);
                match m {
                    Some(Ok(Message::Text(t))) => session.on_text(&t, &ctx, &mut out).await,
                    Some(Ok(Message::Binary(b))) => session.on_binary(b, &ctx, &mut out).await,
                    // Any pong answers the outstanding ping (browsers send
                    // none unprompted; a stale one still proves liveness).
                    Some(Ok(Message::Pong(_))) => {
                        pong_due = None;
                        next_ping = Instant::now() + interval;
                    }
                    Some(Ok(Message::Ping(_))) => {}
                    _ => break End::Lost,
                }
            }
            r = session.subscriber().recv_many(&mut batch, DELIVERY_BATCH) => {
                match r {
                    Ok(n) => {
                        ctx.stats.delivered(n);
                        session.deliver(&batch, &mut out);
                        batch.clear();
                    }
                    Err(e) => {
                        send_timed(&mut tx, close(CLOSE_POLICY, e.to_string()), timeout, &mut bound).await;
                        break End::Closed;
                    }
                }
            }
            _ = sleep_until(next_ping), if pong_due.is_none() => {
                // Timed like every write: a ping queued behind a full
                // socket buffer must not hold the loop (and the pong
                // deadline with it) forever, nor the shutdown.
                if !send_timed(&mut tx, Message::Ping(Default::default()), timeout, &mut bound).await {
                    break if shutdown.is_cancelled() { End::Shutdown } else { End::Lost };
                }
                pong_due = Some(Instant::now() + timeout);
            }
            _ = sleep_until(pong_due.unwrap_or_else(Instant::now)), if pong_due.is_some() => {
                debug!("/ws client sent no pong within ping_timeout_ms; closing");
                send_timed(&mut tx, close(CLOSE_GOING_AWAY, "ping timeout".into()), timeout, &mut bound).await;
                break End::Lost;
            }
            _ = flush.wait(), if flush.is_armed() => {}
            _ = shutdown.cancelled() => break End::Shutdown,
            _ = async { handle.as_ref().expect("guarded").requested().await }, if handle.is_some() => {
                send_timed(&mut tx, close(CLOSE_POLICY, "session recovered by another connection".into()), timeout, &mut bound).await;
                break End::TakenOver;
            }
        }
    };
    if matches!(end, End::Shutdown) {
        // What the hub already queued for this client goes out before the
        // close, as if the loop had gone on a little.
        if let Ok(n) = session
            .subscriber()
            .try_recv_many(&mut batch, crate::shutdown::BACKLOG)
        {
            ctx.stats.delivered(n);
            session.deliver(&batch, &mut out);
        }
    }
    let mut app = App::Json(Box::new(session));
    match end {
        End::Shutdown => {
            go_away(tx, rx, out, upgraded.as_ref(), bound).await;
            // Kept like a lost connection's: in cluster mode the client
            // may still recover it on another node.
            park(app, &ctx)
        }
        End::Lost => park(app, &ctx),
        End::Closed => {}
        End::TakenOver => {
            app.detach();
            if let Some(reply) = app.recovery_handle().and_then(|h| h.take_reply()) {
                let _ = reply.send(app);
            }
        }
    }
}

/// At shutdown: writes the frames `out` holds, then a close frame 1001, and
/// waits briefly for the client's close in return (the close handshake),
/// each bounded so a client that reads nothing does not hold the drain:
/// the writes by what `bound` has left of [`crate::shutdown::FLUSH_WAIT`]
/// (nothing, if the loop's last write used it up).
async fn go_away(
    mut tx: SplitSink<WebSocket, Message>,
    mut rx: SplitStream<WebSocket>,
    out: Vec<JsonOut>,
    upgraded: Option<&UpgradedBytes>,
    mut bound: WriteBound,
) {
    use crate::shutdown::{CLOSE_REPLY_WAIT, FLUSH_WAIT, REASON};
    let write = async {
        for o in out {
            tx.feed(frame(o)).await?;
        }
        tx.send(close(CLOSE_GOING_AWAY, REASON.into())).await
    };
    if !matches!(bound.within(FLUSH_WAIT, write).await, Some(Ok(()))) {
        debug!("/ws client read nothing of its last frames at shutdown");
        return;
    }
    let reply = async {
        while let Some(Ok(m)) = rx.next().await {
            let _handled = upgraded.map(UpgradedBytes::release_when_done);
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_REPLY_WAIT, reply).await;
}
