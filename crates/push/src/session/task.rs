//! The task behind one Engine.IO session: heartbeats (a `2` every
//! pingInterval, closed when no `3` comes within pingTimeout), client
//! packets into the application protocol, and hub messages out — taken from
//! the session's hub queue only while the outbox has room, so a slow client
//! leaves them in the bounded hub queue where the overflow policy applies.
//!
//! Once a websocket carries the session, this task also writes it: after
//! each wake-up it drains the outbox into the socket with one flush, so a
//! delivery wakes one task (this one), not a writer task as well. A write
//! that cannot complete within pingTimeout (the client reads nothing) ends
//! the session like a lost transport.
//!
//! With recovery on, a session whose transport is lost is parked
//! ([`crate::recovery::park`]), and one whose client reconnected elsewhere
//! hands its state over.
//!
//! At server shutdown the session writes what its outbox holds followed by
//! the close packet `1` (over polling, as the end of the pending GET's
//! answer), closes a websocket with code 1001, and is parked like a lost
//! one ([`crate::shutdown`]). A websocket write under way when the
//! shutdown comes goes on for at most [`crate::shutdown::FLUSH_WAIT`], all
//! the session's writes from then on included.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::CloseFrame;
use futures::SinkExt;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tracing::debug;

use super::engine::{EngineSession, Outgoing, WsWriter, OUTBOX_SOFT_LIMIT};
use super::flush::FlushTimer;
use crate::app::App;
use crate::context::PushContext;
use crate::engineio::packet::EioPacket;
use crate::recovery::park::{forget, park};
use crate::shutdown::WriteBound;

/// How a session task ends, for what becomes of its state.
enum End {
    /// The transport is gone (closed, ping timeout): park for recovery.
    Lost(String),
    /// A protocol error or a slow-consumer disconnect: drop it.
    Fatal(String),
    /// A reconnecting client asked for it.
    TakenOver,
    /// The server is shutting down.
    Shutdown,
}

/// Hub messages moved into the outbox per wake-up at most.
pub const DELIVERY_BATCH: usize = 256;

/// Runs the session, opened at `opened` (its heartbeats count from
/// there), until it closes, then forgets it.
pub async fn run(
    session: Arc<EngineSession>,
    opened: Instant,
    mut inbound: mpsc::Receiver<super::engine::Inbound>,
    mut app: App,
    ctx: Arc<PushContext>,
) {
    let interval = Duration::from_millis(ctx.config.ping_interval_ms);
    let timeout = Duration::from_millis(ctx.config.ping_timeout_ms);
    // From the session's opening (`opened`: before its open packet went
    // out), not this task's first poll: the client counts from the open
    // packet.
    let mut next_ping = opened + interval;
    let mut pong_due: Option<Instant> = None;
    // Cleared for good by the first namespace CONNECT (as in the npm
    // server): a connection that never joins one holds a session slot.
    let mut connect_due = (ctx.config.connect_timeout_ms > 0 && app.awaiting_connect())
        .then(|| Instant::now() + Duration::from_millis(ctx.config.connect_timeout_ms));
    // Grown on the first delivery: an idle session holds no batch buffer.
    let mut batch = Vec::new();
    let mut frames = Vec::new();
    let mut ws: Option<WsWriter> = None;
    let mut written: Vec<Outgoing> = Vec::new();
    let mut flush = FlushTimer::new(
        ctx.config.write_delay(),
        ctx.config.busy_write_delay(),
        ctx.load.clone(),
    );
    let shutdown = ctx.session_shutdown();
    let mut bound = WriteBound::new(&shutdown);
    let end = loop {
        // Seen after a write or a packet as well as in the select: the
        // session goes no further round, and what it holds goes out with
        // its close.
        if shutdown.is_cancelled() {
            break End::Shutdown;
        }
        if ws.is_none() {
            ws = session.take_ws_writer();
        }
        if let Some(tx) = ws.as_mut() {
            if flush.due(session.outbox_len()) {
                if !write_outbox(tx, &session, &mut written, timeout, &mut bound).await {
                    if shutdown.is_cancelled() {
                        // Cut short by the shutdown: the close may still go.
                        break End::Shutdown;
                    }
                    // A socket that failed or stalled this long gets no
                    // close frame: trying would only wait again.
                    ws = None;
                    break End::Lost("websocket write failed or stalled past pingTimeout".into());
                }
                flush.done();
                if let Some(later) = app.take_after_write() {
                    // A moment later, so the client reads it apart from
                    // what was just written; then the next round writes it.
                    tokio::time::sleep(AFTER_WRITE_GAP).await;
                    session.send(later);
                    continue;
                }
            }
        }
        let room = OUTBOX_SOFT_LIMIT.saturating_sub(session.outbox_len());
        let take = room.min(DELIVERY_BATCH);
        let handle = app.recovery_handle();
        let sub = app.subscriber();
        tokio::select! {
            _ = session.closed() => break End::Lost("closed".into()),
            _ = async { handle.as_ref().expect("guarded").requested().await }, if handle.is_some() => {
                break End::TakenOver;
            }
            p = inbound.recv() => {
                let Some(p) = p else { break End::Lost("transport gone".into()) };
                let r = match *p {
                    EioPacket::Pong(_) => {
                        pong_due = None;
                        session.set_pong_deadline(None);
                        next_ping = Instant::now() + interval;
                        Ok(())
                    }
                    // Boxed: these futures are large and short-lived; inline
                    // they would grow every idle session's task by their size.
                    EioPacket::Message(t) => Box::pin(app.on_text(t, &session, &ctx)).await,
                    EioPacket::Binary(b) => Box::pin(app.on_binary(b, &session, &ctx)).await,
                    EioPacket::Close => {
                        session.close_by_client();
                        break End::Lost("client closed".into());
                    }
                    // Pings from clients are not part of v4; noops and
                    // stray upgrades carry nothing.
                    EioPacket::Ping(_) | EioPacket::Noop | EioPacket::Upgrade => Ok(()),
                    EioPacket::Open(_) => break End::Fatal("client sent an open packet".into()),
                };
                if let Err(e) = r {
                    break End::Fatal(e.0);
                }
                if connect_due.is_some() && !app.awaiting_connect() {
                    connect_due = None;
                }
            }
            _ = sleep_until(connect_due.unwrap_or_else(Instant::now)), if connect_due.is_some() => {
                break End::Fatal("no namespace CONNECT within connect_timeout_ms".into());
            }
            _ = sleep_until(next_ping), if pong_due.is_none() => {
                session.send_text(&b"2"[..]);
                // pingTimeout runs from the ping, as in the reference. From
                // when it was due when the timer fired about then (a tick
                // late at most), so that a client that fetched nothing is
                // gone exactly pingInterval + pingTimeout after the opening;
                // from now when this task was held up longer (a slow write,
                // a recovery), so the client still gets its whole pingTimeout.
                let now = Instant::now();
                let sent = if now.saturating_duration_since(next_ping) <= PING_TIMER_SLACK {
                    next_ping
                } else {
                    now
                };
                pong_due = Some(sent + timeout);
                session.set_pong_deadline(pong_due);
                app.on_ping(&ctx);
            }
            _ = sleep_until(pong_due.unwrap_or_else(Instant::now)), if pong_due.is_some() => {
                if session.pong_pending() {
                    break End::Lost("ping timeout".into());
                }
                // The pong came in time and waits in the inbound queue
                // (this task was held up): it counts.
                pong_due = None;
                next_ping = Instant::now() + interval;
            }
            r = async { sub.expect("guarded").recv_many(&mut batch, take).await }, if take > 0 && sub.is_some() => {
                match r {
                    Ok(n) => {
                        ctx.stats.delivered(n);
                        app.deliver(&batch, session.transport(), &mut frames);
                        batch.clear();
                        session.send(frames.drain(..));
                    }
                    Err(e) => break End::Fatal(e.to_string()),
                }
            }
            _ = session.drained(), if take == 0 => {}
            _ = session.writer_ready(), if ws.is_none() => {}
            _ = flush.wait(), if flush.is_armed() => {}
            _ = shutdown.cancelled() => break End::Shutdown,
        }
    };
    let shutting_down = matches!(end, End::Shutdown);
    if shutting_down {
        let mut backlog = Vec::new();
        if let Some(Ok(n)) = app
            .subscriber()
            .map(|sub| sub.try_recv_many(&mut backlog, crate::shutdown::BACKLOG))
        {
            ctx.stats.delivered(n);
            app.deliver(&backlog, session.transport(), &mut frames);
            session.send(frames.drain(..));
        }
        go_away(&session, &mut ws, &mut written, &mut bound).await;
    }
    session.close();
    if session.is_closed_by_client() && session.is_polling() {
        // The client's GET may race its own close (a client sends both at
        // once): for a moment a GET still finds the session and is
        // released with a noop (which also forgets it), as it would have
        // been had it come first. Later requests get 400.
        let (ctx, sid) = (ctx.clone(), session.sid.clone());
        tokio::spawn(async move {
            tokio::time::sleep(CLIENT_CLOSE_LINGER).await;
            ctx.sessions.remove(&sid);
        });
    } else {
        ctx.sessions.remove(&session.sid);
    }
    // A writer attached after the last look goes with the session.
    let ws = ws.or_else(|| session.take_ws_writer());
    match end {
        End::Lost(reason) => {
            debug!(sid = %session.sid, %reason, "engine.io session ended");
            park(app, &ctx);
        }
        End::Shutdown => {
            debug!(sid = %session.sid, "engine.io session closed: server shutting down");
            // Not forgotten: in cluster mode another node may recover it.
            park(app, &ctx);
        }
        End::Fatal(reason) => {
            debug!(sid = %session.sid, %reason, "engine.io session closed");
            forget(&app, &ctx);
        }
        End::TakenOver => {
            debug!(sid = %session.sid, "engine.io session taken over by a reconnect");
            // Handed over like a parked one: nothing is sent any more until
            // the new connection CONNECTs.
            app.detach();
            if let Some(tx) = app.recovery_handle().and_then(|h| h.take_reply()) {
                let _ = tx.send(app);
            }
        }
    }
    if let Some(tx) = ws {
        // Tell the client, briefly: a peer that reads nothing is not waited
        // for (and then its reader does not wait for its answer either).
        let frame = shutting_down.then(|| CloseFrame {
            code: crate::ws::server::CLOSE_GOING_AWAY,
            reason: crate::shutdown::REASON.into(),
        });
        tx.close(frame, CLOSE_FRAME_WAIT).await;
    }
}

/// At shutdown, before the session closes (what its hub queue held is in
/// the outbox already): queues the close packet `1` behind everything
/// queued and waits until it is written — by this task on a websocket, by
/// the pending (or next) GET over polling — so the client gets what it was
/// sent and learns the server is going away, instead of a broken
/// connection it might retry here. Waits at most what `bound` has left of
/// [`crate::shutdown::FLUSH_WAIT`] (nothing, if the loop's last write used
/// it up).
async fn go_away(
    session: &EngineSession,
    ws: &mut Option<WsWriter>,
    written: &mut Vec<Outgoing>,
    bound: &mut WriteBound,
) {
    let deadline = bound
        .deadline()
        .unwrap_or_else(|| Instant::now() + crate::shutdown::FLUSH_WAIT);
    session.send_text(&b"1"[..]);
    loop {
        if ws.is_none() {
            // An upgrade may complete meanwhile: the websocket takes it.
            *ws = session.take_ws_writer();
        }
        if let Some(tx) = ws.as_mut() {
            if !write_outbox(tx, session, written, crate::shutdown::FLUSH_WAIT, bound).await {
                // Failed, or stalled for the whole wait: the close frame
                // would stall too.
                *ws = None;
            }
            return;
        }
        if session.outbox_len() == 0 {
            return;
        }
        tokio::select! {
            _ = session.drained() => {}
            _ = session.writer_ready() => {}
            _ = session.closed() => return,
            _ = sleep_until(deadline) => return,
        }
    }
}

/// How late the ping timer may fire for the ping to count as sent when it
/// was due.
const PING_TIMER_SLACK: Duration = Duration::from_millis(5);

/// The pause before a packet that must come in a write of its own
/// ([`App::take_after_write`], conformance mode only): long enough that a
/// client on loopback has read what came before.
const AFTER_WRITE_GAP: Duration = Duration::from_millis(20);

/// How long a polling session the client closed stays findable, so a GET
/// sent together with the close still gets its noop: requests sent at once
/// arrive within a few milliseconds of each other.
const CLIENT_CLOSE_LINGER: Duration = Duration::from_millis(200);

/// How long the closing websocket frame may take to be written.
const CLOSE_FRAME_WAIT: Duration = Duration::from_millis(500);

/// Writes everything queued to the websocket and flushes once; false when
/// the socket failed or the write stalled past `timeout` (or past what
/// `bound` allows once the server shuts down).
async fn write_outbox(
    tx: &mut WsWriter,
    session: &EngineSession,
    batch: &mut Vec<Outgoing>,
    timeout: Duration,
    bound: &mut WriteBound,
) -> bool {
    session.take_all(batch);
    if batch.is_empty() {
        return true;
    }
    let sink = tx.sink();
    let write = async {
        for o in batch.drain(..) {
            sink.feed(o.ws_message()).await?;
        }
        sink.flush().await
    };
    let ok = matches!(bound.within(timeout, write).await, Some(Ok(())));
    if !ok {
        debug!(sid = %session.sid, "websocket write failed, or the client read nothing within pingTimeout (or since the shutdown)");
    }
    batch.clear();
    ok
}
