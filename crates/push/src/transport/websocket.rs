//! The websocket transport: one Engine.IO packet per frame (binary packets
//! as raw binary frames). A session opened on websocket starts with the
//! open packet; a polling session upgrades with the probe (`2probe` →
//! `3probe`, the pending GET released with `6`, then the client's `5`;
//! given up once the session ends, and at most [`FLUSH_WAIT`] after a
//! shutdown). The session task writes (everything queued, one flush per wake-up);
//! this side reads.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::stream::SplitStream;
use futures::{FutureExt, StreamExt};
use tidegate_hub::UpgradedBytes;
use tracing::debug;

use crate::context::PushContext;
use crate::engineio::packet::EioPacket;
use crate::session::EngineSession;
use crate::shutdown::{WriteBound, FLUSH_WAIT};

/// Bytes a websocket reads per read call. tungstenite allocates this much
/// for every socket up front, keeps it, and zero-fills it on every read
/// attempt: its 128 KiB default cost a 128 KiB memset per wake-up of every
/// session and 128 KiB of memory per idle one; 4 KiB was still a third of
/// an idle session. Client frames are small (acks, subscribes, 1 KB
/// publishes: a larger frame grows the buffer while it is read).
pub const WS_READ_BUFFER: usize = 1024;

fn limits(ws: WebSocketUpgrade, ctx: &PushContext) -> WebSocketUpgrade {
    ws.max_message_size(ctx.config.max_payload)
        .max_frame_size(ctx.config.max_payload)
        .read_buffer_size(WS_READ_BUFFER)
}

/// A session opened directly on websocket.
pub fn serve_new(
    ws: WebSocketUpgrade,
    s: Arc<EngineSession>,
    open_text: String,
    ctx: Arc<PushContext>,
    upgraded: Option<UpgradedBytes>,
) -> Response {
    limits(ws, &ctx).on_upgrade(move |mut socket| async move {
        if socket.send(Message::text(open_text)).await.is_ok() {
            run(socket, &s, upgraded).await;
        }
        s.close();
    })
}

/// A polling session upgrading to websocket.
pub fn serve_upgrade(
    ws: WebSocketUpgrade,
    s: Arc<EngineSession>,
    ctx: Arc<PushContext>,
    upgraded: Option<UpgradedBytes>,
) -> Response {
    if !s.attach_ws() {
        // One websocket per session; none once upgraded. As in the
        // reference server, the handshake completes and the socket is
        // closed at once (the session is untouched): the protocol's test
        // suite expects a close, not a refused handshake.
        return limits(ws, &ctx).on_upgrade(|mut socket| async move {
            let _ = tokio::time::timeout(FLUSH_WAIT, socket.send(Message::Close(None))).await;
        });
    }
    let timeout = Duration::from_millis(ctx.config.upgrade_timeout_ms);
    limits(ws, &ctx).on_upgrade(move |mut socket| async move {
        // Bounded like a write: a shutdown leaves the probe at most
        // FLUSH_WAIT to complete (so the session's close can still take
        // the websocket), and a session that ends meanwhile ends it.
        let mut bound = WriteBound::new(&ctx.shutdown);
        let probed = tokio::select! {
            r = bound.within(timeout, probe(&mut socket, &s)) => r == Some(true),
            _ = s.closed() => false,
        };
        if probed {
            run(socket, &s, upgraded).await;
        } else {
            debug!(sid = %s.sid, "websocket upgrade failed; session stays on polling");
            s.abort_upgrade();
            let frame = ctx.shutting_down().then(|| CloseFrame {
                code: crate::ws::server::CLOSE_GOING_AWAY,
                reason: crate::shutdown::REASON.into(),
            });
            // A client that reads nothing is not waited for.
            let _ = bound
                .within(FLUSH_WAIT, socket.send(Message::Close(frame)))
                .await;
        }
    })
}

/// The probe exchange; true once the client sent `5`.
async fn probe(socket: &mut WebSocket, s: &EngineSession) -> bool {
    let mut probed = false;
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Text(t) = msg else { continue };
        match EioPacket::decode_text(&t) {
            Ok(EioPacket::Ping(d)) if d == "probe" && !probed => {
                if socket.send(Message::text("3probe")).await.is_err() {
                    return false;
                }
                probed = true;
                // A `5` that came right behind the probe (already read
                // with it) completes the upgrade before a pending GET is
                // released: that GET came before the `5` was sent, but
                // the reference, reading in order, would have seen the
                // `5` first. engine.io-client sends `5` only after its
                // GET was released, so it never takes this path.
                if let Some(Some(Ok(Message::Text(t)))) = socket.recv().now_or_never() {
                    if EioPacket::decode_text(&t) == Ok(EioPacket::Upgrade) {
                        s.finish_upgrade();
                        return true;
                    }
                    return false;
                }
                s.start_upgrade();
            }
            Ok(EioPacket::Upgrade) if probed => {
                s.finish_upgrade();
                return true;
            }
            _ => return false,
        }
    }
    false
}

/// Hands the socket's writing half to the session task (which writes the
/// outbox from then on, see [`crate::session::task`]) and reads client
/// packets into the session until either side ends.
///
/// `upgraded` holds the in-flight budget bytes the server took for what this
/// socket read; they go back once each message has been handled.
async fn run(socket: WebSocket, s: &Arc<EngineSession>, upgraded: Option<UpgradedBytes>) {
    let (tx, mut rx) = socket.split();
    if let Ok(close_sent) = s.attach_ws_writer(tx) {
        let reading = read_packets(&mut rx, s.clone(), upgraded.as_ref());
        tokio::select! {
            _ = reading => {}
            _ = s.closed() => {
                // The server closed the session (shutdown, ping timeout, …)
                // and its task sends the close frame. Once that went out,
                // reading on until the client's close comes back keeps the
                // socket open for that handshake: closed at once, with the
                // client's frames still unread, it ends in a reset, which
                // may cut off the close. One that did not go out (the write
                // failed, or the client read nothing within its wait) gets
                // no answer: waiting for one would only hold the socket,
                // and at shutdown the [http] drain, a second longer.
                // The task says so once it is done with the writer (its
                // writes are bounded), or drops the sender: not sent.
                if close_sent.await == Ok(true) {
                    let reply = async {
                        while let Some(Ok(m)) = rx.next().await {
                            let _handled = upgraded.as_ref().map(UpgradedBytes::release_when_done);
                            if matches!(m, Message::Close(_)) {
                                break;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(crate::shutdown::CLOSE_REPLY_WAIT, reply).await;
                }
            }
        }
    }
    s.close();
}

/// Client packets into the session until the client closes, sends a bad
/// packet, or the session is gone.
async fn read_packets(
    rx: &mut SplitStream<WebSocket>,
    s: Arc<EngineSession>,
    upgraded: Option<&UpgradedBytes>,
) {
    while let Some(Ok(msg)) = rx.next().await {
        let _handled = upgraded.map(UpgradedBytes::release_when_done);
        let p = match msg {
            Message::Text(t) => match EioPacket::decode_text(&t) {
                Ok(p) => p,
                Err(e) => {
                    debug!(sid = %s.sid, error = %e, "bad engine.io packet; closing");
                    return;
                }
            },
            Message::Binary(b) => EioPacket::Binary(b),
            Message::Close(_) => return,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        if !s.receive(p).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engineio::handshake::Transport;
    use crate::session::engine::{Inbound, WsWriter};
    use crate::shutdown::CLOSE_REPLY_WAIT;
    use axum::routing::get;
    use futures::SinkExt;
    use tokio::sync::{mpsc, oneshot};
    use tokio::time::{timeout, Instant};
    use tokio_tungstenite::tungstenite::Message as ClientMessage;

    type Client = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    /// A session on a loopback websocket whose reading side is [`run`]; the
    /// test plays the session task (it takes the writer).
    struct Reading {
        session: Arc<EngineSession>,
        /// Kept so the session's inbound queue stays open.
        _inbound: mpsc::Receiver<Inbound>,
        client: Client,
        /// Resolves when `run` returned.
        done: oneshot::Receiver<()>,
    }

    async fn reading() -> Reading {
        let (session, inbound) = EngineSession::new("t".into(), Transport::WebSocket);
        let session = Arc::new(session);
        let (done_tx, done) = oneshot::channel();
        let done_tx = Arc::new(parking_lot::Mutex::new(Some(done_tx)));
        let s = session.clone();
        let app = axum::Router::new().route(
            "/",
            get(move |ws: WebSocketUpgrade| async move {
                ws.on_upgrade(move |socket| async move {
                    run(socket, &s, None).await;
                    if let Some(d) = done_tx.lock().take() {
                        let _ = d.send(());
                    }
                })
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        let (client, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
            .await
            .unwrap();
        Reading {
            session,
            _inbound: inbound,
            client,
            done,
        }
    }

    /// The writer `run` handed to the session, as the session task takes it.
    async fn writer(s: &EngineSession) -> WsWriter {
        loop {
            if let Some(w) = s.take_ws_writer() {
                return w;
            }
            timeout(Duration::from_secs(5), s.writer_ready())
                .await
                .expect("the writer attached");
        }
    }

    /// Writes to a client that reads nothing until a write stalls: the
    /// socket buffers are full, nothing more goes out.
    async fn stall(w: &mut WsWriter) {
        let mb = Message::Binary(vec![0u8; 1 << 20].into());
        for _ in 0..256 {
            match timeout(Duration::from_millis(200), w.sink().send(mb.clone())).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("write failed: {e}"),
                Err(_) => return,
            }
        }
        panic!("256 MiB written to a client that reads nothing");
    }

    #[tokio::test]
    async fn a_close_frame_that_did_not_go_out_is_not_waited_for() {
        let mut r = reading().await;
        let mut w = writer(&r.session).await;
        // The client reads nothing (and so sends no close either).
        stall(&mut w).await;
        r.session.close();
        assert!(!w.close(None, Duration::from_millis(100)).await);
        let start = Instant::now();
        timeout(CLOSE_REPLY_WAIT / 2, &mut r.done)
            .await
            .expect("the reader ended without waiting for a close reply")
            .unwrap();
        assert!(start.elapsed() < CLOSE_REPLY_WAIT / 2);
    }

    #[tokio::test]
    async fn a_writer_dropped_without_its_close_is_not_waited_for() {
        let mut r = reading().await;
        let w = writer(&r.session).await;
        r.session.close();
        drop(w);
        timeout(CLOSE_REPLY_WAIT / 2, &mut r.done)
            .await
            .expect("the reader ended without waiting for a close reply")
            .unwrap();
    }

    #[tokio::test]
    async fn a_close_frame_that_went_out_waits_for_the_client_s_close() {
        let mut r = reading().await;
        let w = writer(&r.session).await;
        r.session.close();
        let frame = CloseFrame {
            code: crate::ws::server::CLOSE_GOING_AWAY,
            reason: "bye".into(),
        };
        assert!(w.close(Some(frame), Duration::from_secs(5)).await);
        // Not before the client's close: the handshake is let finish.
        let early = timeout(Duration::from_millis(200), &mut r.done).await;
        assert!(early.is_err(), "the reader ended before the client's close");
        let got = timeout(Duration::from_secs(5), r.client.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(matches!(got, ClientMessage::Close(Some(_))), "{got:?}");
        // tungstenite queued the reply to a received close; this sends it.
        let _ = r.client.flush().await;
        let replied = Instant::now();
        timeout(CLOSE_REPLY_WAIT / 2, &mut r.done)
            .await
            .expect("the reader ended on the client's close")
            .unwrap();
        assert!(replied.elapsed() < CLOSE_REPLY_WAIT / 2);
    }
}
