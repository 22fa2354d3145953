//! Server shutdown (`PushContext::shutdown` cancelled): a `/ws` client gets
//! the messages already queued for it, then close code 1001; an Engine.IO
//! session over websocket gets them, its close packet `1` and close 1001;
//! over polling, the pending GET (or the next one) ends with `1`; new
//! handshakes are refused with 503. A session stuck writing to a client
//! that reads nothing, or a websocket upgrade whose probe never comes,
//! ends within `FLUSH_WAIT` of the shutdown, not after `ping_timeout_ms`
//! (or `upgrade_timeout_ms`). A recovery under way at the shutdown (from
//! the cluster backbone, or waiting for another session's state) is not
//! answered: the client keeps the session id it asked for, for another
//! node. A client's publish waiting for a full sink is given up and
//! answered with an error before the close (a `/ws` error, a Socket.IO
//! ack, a `POST /v1/publish` 503).

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{next_json, request_at, Server, Ws};
use futures::{FutureExt, SinkExt, StreamExt};
use serde_json::{json, Value};
use tidegate_hub::backbone::{HistoryFuture, Positions, Replay};
use tidegate_hub::{
    AckToken, Backbone, Message as HubMessage, Pattern, RouteConfig, RouteTable, SharedMessage,
    Sink, SinkFuture,
};
use tidegate_push::recovery::cluster::{key_of, Op, Update};
use tidegate_push::recovery::{Claim, Protocol, TAKEOVER_TIMEOUT};
use tidegate_push::session::task::DELIVERY_BATCH;
use tidegate_push::shutdown::{BACKLOG, FLUSH_WAIT};
use tidegate_push::PushConfig;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

/// Messages published just before the shutdown: more than a session takes
/// from its hub queue in one go, so that some are certainly still there
/// when it sees the shutdown and only the shutdown's backlog drain can
/// send them (all of them: fewer than that drain takes).
const N: usize = 2 * DELIVERY_BATCH + 50;
const _: () = assert!(N - DELIVERY_BATCH <= BACKLOG);

/// Publishes `N` messages on `topic`, then cancels the shutdown, without
/// letting a session task run in between: the tests run on one thread and
/// a publish with no routes and no backbone never waits (checked), so the
/// sessions find the shutdown and `N` messages in their hub queue at once.
async fn publish_n_then_shut_down(s: &Server, topic: &str) {
    for i in 0..N {
        let m = HubMessage::new(topic, format!("{{\"n\":{i}}}").into_bytes());
        s.ctx
            .hub
            .publish(m)
            .now_or_never()
            .expect("a publish that does not wait")
            .unwrap();
    }
    s.ctx.shutdown.cancel();
}

/// Text frames until the close frame: (texts, close code and reason).
async fn until_close(ws: &mut Ws) -> (Vec<String>, Option<(u16, String)>) {
    until_close_within(ws, Duration::from_secs(30)).await
}

/// The text frames `ws` receives until its close frame (within `limit`),
/// and the close's code and reason.
async fn until_close_within(ws: &mut Ws, limit: Duration) -> (Vec<String>, Option<(u16, String)>) {
    let mut texts = Vec::new();
    let close = tokio::time::timeout(limit, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => texts.push(t.to_string()),
                Some(Ok(Message::Close(f))) => {
                    return f.map(|f| (u16::from(f.code), f.reason.to_string()))
                }
                Some(Ok(_)) => {}
                other => panic!("socket ended without a close frame: {other:?}"),
            }
        }
    })
    .await
    .expect("a close frame");
    (texts, close)
}

/// Shuts the server down and reads `ws` until its close frame: the text
/// frames before it. Panics unless the close is 1001 and comes within
/// `FLUSH_WAIT` + 1 s of the shutdown.
async fn shut_down_until_away(s: &Server, ws: &mut Ws) -> Vec<String> {
    let start = Instant::now();
    s.ctx.shutdown.cancel();
    let (texts, close) = until_close_within(ws, FLUSH_WAIT + Duration::from_secs(5)).await;
    assert_eq!(close.map(|c| c.0), Some(u16::from(CloseCode::Away)));
    assert!(
        start.elapsed() < FLUSH_WAIT + Duration::from_secs(1),
        "closed {:?} after the shutdown",
        start.elapsed()
    );
    texts
}

/// An Engine.IO websocket session subscribed (Engine.IO message `4`, the
/// `/ws` protocol inside) to `pattern`: the socket and its sid.
async fn engineio_ws_subscribed(s: &Server, pattern: &str) -> (Ws, String) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!(
        "ws://{}/engine.io/?EIO=4&transport=websocket",
        s.addr
    ))
    .await
    .unwrap();
    let open = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let open = open.to_text().unwrap();
    assert!(open.starts_with("0{"), "{open:?}");
    let open: Value = serde_json::from_str(&open[1..]).unwrap();
    let sid = open["sid"].as_str().unwrap().to_owned();
    let subscribe = json!({"op": "subscribe", "id": 1, "patterns": [pattern]});
    ws.send(Message::text(format!("4{subscribe}")))
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(reply.to_text().unwrap().contains("subscribed"), "{reply:?}");
    (ws, sid)
}

fn numbers(texts: &[String], prefix: &str) -> Vec<u64> {
    texts
        .iter()
        .filter_map(|t| t.strip_prefix(prefix))
        .map(|t| serde_json::from_str::<Value>(t).unwrap())
        .filter(|v| v["op"] == "message")
        .map(|v| v["payload"]["n"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn ws_gets_what_was_queued_then_close_1001() {
    let s = Server::start(PushConfig::default()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"op":"subscribe","id":1,"patterns":["down.>"]}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "subscribed");

    publish_n_then_shut_down(&s, "down.ws").await;
    let (texts, close) = until_close(&mut ws).await;
    assert_eq!(
        numbers(&texts, ""),
        (0..N as u64).collect::<Vec<_>>(),
        "every message queued before the shutdown, in order"
    );
    assert_eq!(
        close,
        Some((
            u16::from(CloseCode::Away),
            "server shutting down".to_owned()
        ))
    );
    // The client's close completes the handshake: the server then ends
    // the connection.
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    assert!(
        matches!(end, Ok(None | Some(Err(_)))),
        "connection still open: {end:?}"
    );

    // No new session while shutting down.
    match tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 503),
        other => panic!("a /ws handshake during shutdown: {other:?}"),
    }
    let (st, _) = s
        .request("GET", "/socket.io/?EIO=4&transport=polling", b"")
        .await;
    assert_eq!(st, 503);
}

#[tokio::test]
async fn engineio_websocket_gets_what_was_queued_the_close_packet_and_1001() {
    let s = Server::start(PushConfig::default()).await;
    let (mut ws, _) = engineio_ws_subscribed(&s, "down.>").await;

    publish_n_then_shut_down(&s, "down.eio").await;
    let (texts, close) = until_close(&mut ws).await;
    assert_eq!(numbers(&texts, "4"), (0..N as u64).collect::<Vec<_>>());
    assert_eq!(texts.last().map(String::as_str), Some("1"), "{texts:?}");
    assert_eq!(close.map(|c| c.0), Some(u16::from(CloseCode::Away)));
}

#[tokio::test]
async fn engineio_polling_ends_with_the_close_packet() {
    let s = Server::start(PushConfig::default()).await;
    let path = "/engine.io/";
    // One session with a GET pending when the shutdown comes…
    let waiting = s.open(path).await;
    // …and one with messages queued and no GET pending: its next GET takes
    // them and the close packet.
    let queued = s.open(path).await;
    let subscribe = br#"4{"op":"subscribe","id":1,"patterns":["down.>"]}"#;
    assert_eq!(s.post(path, &queued, subscribe).await.0, 200);
    let (_, body) = s.get(path, &queued).await;
    assert!(String::from_utf8_lossy(&body).contains("subscribed"));

    let pending = {
        let (addr, sid) = (s.addr, waiting.clone());
        tokio::spawn(async move {
            request_at(
                addr,
                "GET",
                &format!("{path}?EIO=4&transport=polling&sid={sid}"),
                b"",
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    publish_n_then_shut_down(&s, "down.poll").await;

    let (st, body) = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("the pending GET answered at once")
        .unwrap();
    assert_eq!((st, body), (200, b"1".to_vec()));

    let (st, body) = s.get(path, &queued).await;
    assert_eq!(st, 200);
    let body = String::from_utf8(body).unwrap();
    let packets: Vec<String> = body.split('\u{1e}').map(str::to_owned).collect();
    assert_eq!(numbers(&packets, "4"), (0..N as u64).collect::<Vec<_>>());
    assert_eq!(packets.last().map(String::as_str), Some("1"), "{body}");
}

/// 1 KB messages published to a client that reads nothing: 20 MB, far
/// past what the loopback socket buffers hold, so the server's write
/// stalls.
const STALL_MESSAGES: usize = 20_000;

/// Heartbeats and upgrade timeout far longer than the tests: only the
/// shutdown can end a stalled write (or a probe) in time.
fn patient_config() -> PushConfig {
    PushConfig {
        queue_capacity: STALL_MESSAGES + 1,
        ping_interval_ms: 60_000,
        ping_timeout_ms: 60_000,
        upgrade_timeout_ms: 60_000,
        ..PushConfig::default()
    }
}

async fn publish_kb(s: &Server, topic: &str) {
    let kb = format!("\"{}\"", "x".repeat(1022));
    for _ in 0..STALL_MESSAGES {
        let m = HubMessage::new(topic, kb.clone());
        s.ctx.hub.publish(m).await.unwrap();
    }
}

/// Cancels the shutdown and waits until `gone()` holds, for at most
/// `FLUSH_WAIT` + 1 s; panics otherwise.
async fn shut_down_until(s: &Server, what: &str, gone: impl Fn() -> bool) {
    let start = Instant::now();
    s.ctx.shutdown.cancel();
    let limit = FLUSH_WAIT + Duration::from_secs(1);
    while !gone() {
        assert!(
            start.elapsed() < limit,
            "{what} still there {limit:?} after the shutdown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads what is left until the connection ends (a close frame, the end
/// of the stream or a reset), within `limit`.
async fn until_end(ws: &mut Ws, limit: Duration) {
    let read = async {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_close() {
                break;
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .expect("the connection ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_client_that_reads_nothing_does_not_hold_the_shutdown() {
    let s = Server::start(patient_config()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"op":"subscribe","id":1,"patterns":["stall.>"]}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "subscribed");
    // From here on the client reads nothing: the server's write stalls.
    publish_kb(&s, "stall.ws").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let live = || s.ctx.stats.sessions(&s.ctx.sessions).ws;
    assert_eq!(live(), 1);
    shut_down_until(&s, "the stalled /ws connection", || live() == 0).await;
    until_end(&mut ws, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engineio_websocket_that_reads_nothing_does_not_hold_the_shutdown() {
    let s = Server::start(patient_config()).await;
    let (mut ws, sid) = engineio_ws_subscribed(&s, "stall.>").await;
    // From here on the client reads nothing: the session's write stalls.
    publish_kb(&s, "stall.eio").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.ctx.sessions.get(&sid).is_some());
    shut_down_until(&s, "the stalled Engine.IO session", || {
        s.ctx.sessions.get(&sid).is_none()
    })
    .await;
    until_end(&mut ws, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn an_upgrade_whose_probe_never_comes_does_not_hold_the_shutdown() {
    let s = Server::start(patient_config()).await;
    let path = "/engine.io/";
    let sid = s.open(path).await;
    // The upgrade's websocket, on which the client never sends `2probe`.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!(
        "ws://{}{path}?EIO=4&transport=websocket&sid={sid}",
        s.addr
    ))
    .await
    .unwrap();
    s.ctx.shutdown.cancel();
    until_end(&mut ws, FLUSH_WAIT + Duration::from_secs(1)).await;
}

/// With recovery on, long enough for the tests.
fn recovering() -> PushConfig {
    PushConfig {
        recovery_window_ms: 60_000,
        ..PushConfig::default()
    }
}

/// A cluster backbone whose `positions` — the first thing a recovery from
/// the backbone asks — never answers, so such a recovery stays under way
/// until the shutdown. It says when it was asked, and keeps what the node
/// announces on it.
#[derive(Debug, Default)]
struct StuckBackbone {
    asked: tokio::sync::Notify,
    announced: std::sync::Mutex<Vec<SharedMessage>>,
}

impl Backbone for StuckBackbone {
    fn carries(&self, _topic: &str) -> bool {
        false
    }

    fn try_send(&self, msg: SharedMessage) -> Result<(), SharedMessage> {
        self.announced.lock().unwrap().push(msg);
        Ok(())
    }

    fn send(&self, msg: SharedMessage) -> SinkFuture<'_> {
        self.announced.lock().unwrap().push(msg);
        Box::pin(async {})
    }

    fn positions(&self) -> HistoryFuture<'_, Positions> {
        self.asked.notify_one();
        Box::pin(std::future::pending())
    }

    fn delivered(&self) -> Positions {
        Positions::new()
    }

    fn replay(&self, _: Positions, _: Vec<Pattern>, _: usize) -> HistoryFuture<'_, Replay> {
        self.asked.notify_one();
        Box::pin(std::future::pending())
    }
}

/// Over polling: a Socket.IO CONNECT asking to recover `pid`; once
/// `under_way` resolves (the recovery is waiting), the shutdown. Returns
/// every packet the session sends until its close packet `1`.
async fn recover_at_shutdown(
    s: &Server,
    pid: &str,
    under_way: impl Future<Output = ()>,
) -> Vec<String> {
    let path = "/socket.io/";
    let sid = s.open(path).await;
    let connect = format!(r#"40{{"pid":"{pid}","offset":"0"}}"#);
    assert_eq!(s.post(path, &sid, connect.as_bytes()).await.0, 200);
    tokio::time::timeout(Duration::from_secs(5), under_way)
        .await
        .expect("the recovery under way");
    let start = Instant::now();
    s.ctx.shutdown.cancel();
    let mut packets: Vec<String> = Vec::new();
    while !packets.iter().any(|p| p == "1") {
        let (st, body) = s.get(path, &sid).await;
        assert_eq!(
            st, 200,
            "the session ended before its close packet: {packets:?}"
        );
        let body = String::from_utf8(body).unwrap();
        packets.extend(body.split('\u{1e}').map(str::to_owned));
    }
    assert!(
        start.elapsed() < FLUSH_WAIT + Duration::from_secs(1),
        "the close came {:?} after the shutdown",
        start.elapsed()
    );
    packets
}

#[tokio::test]
async fn a_socketio_recovery_from_the_backbone_under_way_at_shutdown_is_not_answered() {
    let s = Server::start(recovering()).await;
    let backbone = Arc::new(StuckBackbone::default());
    s.ctx.hub.set_backbone(backbone.clone()).unwrap();
    assert!(s.ctx.cluster_recovery());
    // The session, as the node that served it announced it.
    let pid = "served-by-another-node";
    s.ctx.cluster_sessions.as_ref().unwrap().apply(Update {
        key: key_of(pid),
        nsp: "/".into(),
        owner: "its-owner".into(),
        version: 1,
        op: Op::Own {
            subject: None,
            sid: Some("its-socket".into()),
            groups: Vec::new(),
        },
    });

    let packets = recover_at_shutdown(&s, pid, backbone.asked.notified()).await;
    // A CONNECT answer (a clean start: a new pid) would make
    // socket.io-client forget the pid it can still recover elsewhere.
    assert_eq!(packets, ["1"], "nothing but the close");
    // Nor was the session announced under a new pid, or as gone.
    let announced = backbone.announced.lock().unwrap();
    assert!(announced.is_empty(), "announced: {announced:?}");
}

#[tokio::test]
async fn a_socketio_takeover_under_way_at_shutdown_is_not_answered() {
    let s = Server::start(recovering()).await;
    // A session whose owner never hands it over: the takeover waits for
    // it (up to TAKEOVER_TIMEOUT) until the shutdown.
    let grants = s.ctx.authorize(None).unwrap();
    let held = s
        .ctx
        .recovery
        .register(16, Claim::new(Protocol::SocketIo, &grants))
        .unwrap();

    let packets = recover_at_shutdown(&s, held.pid(), held.handle().requested()).await;
    assert_eq!(packets, ["1"], "nothing but the close");
}

#[tokio::test]
async fn a_ws_recover_under_way_at_shutdown_is_not_answered() {
    let s = Server::start(recovering()).await;
    let grants = s.ctx.authorize(None).unwrap();
    let held = s
        .ctx
        .recovery
        .register(16, Claim::new(Protocol::Json, &grants))
        .unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "session");
    let recover = json!({"op": "recover", "id": 5, "session": held.pid(), "offset": 0});
    ws.send(Message::text(recover.to_string())).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), held.handle().requested())
        .await
        .expect("the takeover under way");

    let start = Instant::now();
    s.ctx.shutdown.cancel();
    // Read past TAKEOVER_TIMEOUT: a recover that went on waiting would be
    // answered (not recovered, with this connection's new id) by then.
    let (texts, close) =
        until_close_within(&mut ws, TAKEOVER_TIMEOUT + Duration::from_secs(2)).await;
    let took = start.elapsed();
    assert!(texts.is_empty(), "nothing but the close: {texts:?}");
    assert_eq!(close.map(|c| c.0), Some(u16::from(CloseCode::Away)));
    assert!(
        took < FLUSH_WAIT + Duration::from_secs(1),
        "closed {took:?} after the shutdown"
    );
}

/// A `/ws` subscribe replaying the cluster backbone from positions waits
/// for the backbone's read; at shutdown that read is given up, so the
/// session's close is not held for as long as the broker makes it wait.
#[tokio::test]
async fn a_ws_cluster_replay_under_way_at_shutdown_does_not_hold_the_close() {
    let s = Server::start(recovering()).await;
    let backbone = Arc::new(StuckBackbone::default());
    s.ctx.hub.set_backbone(backbone.clone()).unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "session");
    let subscribe = json!({"op": "subscribe", "id": 1, "patterns": ["news.>"], "from": {"0": 5}});
    ws.send(Message::text(subscribe.to_string())).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), backbone.asked.notified())
        .await
        .expect("the replay under way");

    let texts = shut_down_until_away(&s, &mut ws).await;
    // The subscribe is answered, saying why nothing was replayed.
    let answered = texts
        .iter()
        .map(|t| serde_json::from_str::<serde_json::Value>(t).unwrap())
        .find(|v| v["op"] == "subscribed")
        .expect("the subscribe answered");
    assert_eq!(answered["cluster_error"], "the server is shutting down");
}

/// A routed sink with room for a few messages (taken and acknowledged at
/// once), then none: its `send` waits for ever, like one to a Kafka sink
/// whose queue is full and whose broker is gone. It says when a message
/// came to it with no room left.
#[derive(Debug, Default)]
struct FullSink {
    room: AtomicUsize,
    asked: tokio::sync::Notify,
}

impl Sink for FullSink {
    fn name(&self) -> &str {
        "full"
    }

    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        let took = self
            .room
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
        if took.is_ok() {
            ack.complete(Ok(()));
            return Box::pin(async {});
        }
        self.asked.notify_one();
        Box::pin(std::future::pending())
    }

    fn is_full(&self) -> bool {
        self.room.load(Ordering::Acquire) == 0
    }
}

/// Routes `stuck.>` to a new [`FullSink`] with room for `room` messages.
fn route_to_full_sink(s: &Server, room: usize) -> Arc<FullSink> {
    let sink = Arc::new(FullSink {
        room: AtomicUsize::new(room),
        ..FullSink::default()
    });
    let sinks: Vec<Arc<dyn Sink>> = vec![sink.clone()];
    let route = RouteConfig {
        topics: "stuck.>".into(),
        sink: "full".into(),
    };
    s.ctx
        .hub
        .set_routes(RouteTable::build(&[route], &sinks).unwrap());
    sink
}

/// A `/ws` publish waits while the sink its topic routes to is full; at
/// shutdown it is given up — answered with an error, the message not
/// accepted — so the session's close is not held until the sink has room
/// (the `[http]` drain's `shutdown_grace_ms`).
#[tokio::test]
async fn a_ws_publish_waiting_for_a_full_sink_does_not_hold_the_close() {
    let s = Server::start(PushConfig::default()).await;
    let sink = route_to_full_sink(&s, 0);
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    let publish = json!({"op": "publish", "id": 3, "topic": "stuck.a", "payload": {"n": 1}});
    ws.send(Message::text(publish.to_string())).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), sink.asked.notified())
        .await
        .expect("the publish waiting for the sink");

    let texts = shut_down_until_away(&s, &mut ws).await;
    let answers: Vec<Value> = texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(
        answers,
        [json!({"op": "error", "id": 3, "reason": "the hub is shutting down"})],
        "the publish refused, as one after the hub closed"
    );
}

/// The next frame's text, within 5 s.
async fn next_text(ws: &mut Ws) -> String {
    let m = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("a frame within 5 s")
        .expect("socket open")
        .unwrap();
    m.into_text().unwrap().to_string()
}

/// A Socket.IO `publish` event waits while the sink its topic routes to is
/// full; at shutdown it is given up and its ack says why (`{ok: false,
/// reason}`, as for a publish after the hub closed), before the close
/// packet and within `FLUSH_WAIT`. One with room, before, is acked
/// `{ok: true}`: the sink and its route work, only the wait is given up.
#[tokio::test]
async fn a_socketio_publish_waiting_for_a_full_sink_is_acked_with_the_shutdown() {
    let s = Server::start(PushConfig::default()).await;
    let sink = route_to_full_sink(&s, 1);
    let (mut ws, _) = s.open_ws("/socket.io/").await;
    ws.send(Message::text("40")).await.unwrap();
    assert!(next_text(&mut ws).await.starts_with("40{"));

    ws.send(Message::text(r#"421["publish","stuck.a",{"n":1}]"#))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, r#"431[{"ok":true}]"#);
    ws.send(Message::text(r#"422["publish","stuck.b",{"n":2}]"#))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), sink.asked.notified())
        .await
        .expect("the publish waiting for the sink");

    let texts = shut_down_until_away(&s, &mut ws).await;
    let ack: Value = json!([{"ok": false, "reason": "the hub is shutting down"}]);
    assert_eq!(
        texts,
        [format!("432{ack}"), "1".to_owned()],
        "the publish refused in its ack, then the close packet"
    );
}

/// `POST /v1/publish` waiting for a full sink is answered 503 at shutdown,
/// its body saying why, within `FLUSH_WAIT` (the `[http]` drain is not
/// held until the sink has room). One with room, before, is answered 200.
#[tokio::test]
async fn a_post_publish_waiting_for_a_full_sink_is_answered_503_at_shutdown() {
    let s = Server::start(PushConfig::default()).await;
    let sink = route_to_full_sink(&s, 1);
    let (st, body) = s
        .request("POST", "/v1/publish?topic=stuck.a", br#"{"n":1}"#)
        .await;
    assert_eq!((st, body), (200, b"{\"ok\":true}\n".to_vec()));

    let addr = s.addr;
    let waiting = tokio::spawn(async move {
        request_at(addr, "POST", "/v1/publish?topic=stuck.b", br#"{"n":2}"#).await
    });
    tokio::time::timeout(Duration::from_secs(5), sink.asked.notified())
        .await
        .expect("the publish waiting for the sink");

    let start = Instant::now();
    s.ctx.shutdown.cancel();
    let (st, body) = tokio::time::timeout(FLUSH_WAIT + Duration::from_secs(5), waiting)
        .await
        .expect("the POST answered after the shutdown")
        .unwrap();
    assert!(
        start.elapsed() < FLUSH_WAIT + Duration::from_secs(1),
        "answered {:?} after the shutdown",
        start.elapsed()
    );
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (st, body),
        (
            503,
            json!({"ok": false, "reason": "the hub is shutting down"})
        )
    );
}
