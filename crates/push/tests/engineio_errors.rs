//! Every Engine.IO error case of the spec, over raw HTTP and a raw
//! websocket: 400s with the reference's codes, a second concurrent GET
//! closes the session, polling after an upgrade, one websocket per session,
//! ping timeout, garbage and oversize payloads closing only their session.

mod common;

use std::time::Duration;

use common::{fast_heartbeats, Server};
use futures::{SinkExt, StreamExt};
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::Message;

const SIO: &str = "/socket.io/";

#[tokio::test]
async fn bad_queries_and_methods_are_400_with_the_reference_codes() {
    let s = Server::start(PushConfig::default()).await;
    let cases = [
        (
            "GET",
            "/socket.io/?EIO=3&transport=polling",
            r#"{"code":5,"message":"Unsupported protocol version"}"#,
        ),
        (
            "GET",
            "/socket.io/?transport=polling",
            r#"{"code":5,"message":"Unsupported protocol version"}"#,
        ),
        (
            "GET",
            "/engine.io/?EIO=4&transport=carrier-pigeon",
            r#"{"code":0,"message":"Transport unknown"}"#,
        ),
        (
            "GET",
            "/socket.io/?EIO=4&transport=polling&sid=nope",
            r#"{"code":1,"message":"Session ID unknown"}"#,
        ),
        (
            "POST",
            "/socket.io/?EIO=4&transport=polling",
            r#"{"code":2,"message":"Bad handshake method"}"#,
        ),
        (
            "GET",
            "/socket.io/?EIO=4&transport=websocket",
            r#"{"code":3,"message":"Bad request"}"#,
        ),
    ];
    for (m, path, want) in cases {
        let (st, body) = s.request(m, path, b"").await;
        assert_eq!(
            (st, String::from_utf8_lossy(&body).as_ref()),
            (400, want),
            "{m} {path}"
        );
    }
    let sid = s.open(SIO).await;
    let (st, _) = s
        .request(
            "PUT",
            &format!("{SIO}?EIO=4&transport=polling&sid={sid}"),
            b"",
        )
        .await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn a_second_concurrent_get_is_400_and_closes_the_session() {
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open(SIO).await;
    let first = polling_get(&s, SIO, &sid);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (st, _) = s.get(SIO, &sid).await;
    assert_eq!(st, 400);
    let (st, body) = tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (st, body.as_slice()),
        (200, &b"1"[..]),
        "the first GET gets a close packet"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (st, _) = s.get(SIO, &sid).await;
    assert_eq!(st, 400, "the session is gone");
}

/// A polling GET on a connection of its own, sent now and answered later
/// (a long poll): its status and body.
fn polling_get(
    s: &Server,
    path: &'static str,
    sid: &str,
) -> tokio::task::JoinHandle<(u16, Vec<u8>)> {
    let (addr, sid) = (s.addr, sid.to_owned());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut st = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path}?EIO=4&transport=polling&sid={sid} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        st.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        st.read_to_end(&mut out).await.unwrap();
        common::parse_response(&out)
    })
}

async fn ws_connect(
    s: &Server,
    path: &str,
    sid: Option<&str>,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    String,
> {
    let q = sid.map(|s| format!("&sid={s}")).unwrap_or_default();
    let url = format!("ws://{}{path}?EIO=4&transport=websocket{q}", s.addr);
    tokio_tungstenite::connect_async(url)
        .await
        .map(|(ws, _)| ws)
        .map_err(|e| e.to_string())
}

/// Asserts that an upgraded session answers a `/ws` subscribe on its
/// websocket.
async fn works_on_the_websocket<S>(ws: &mut S)
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + futures::Sink<Message>
        + Unpin,
    <S as futures::Sink<Message>>::Error: std::fmt::Debug,
{
    ws.send(Message::text(
        r#"4{"op":"subscribe","id":1,"patterns":["a"]}"#,
    ))
    .await
    .unwrap();
    let got = next_text(ws).await;
    assert!(
        got.starts_with("4{") && got.contains(r#""op":"subscribed""#),
        "{got}"
    );
}

async fn next_text<S>(ws: &mut S) -> String
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Text(t))) => return t.to_string(),
            Some(Ok(Message::Close(_))) | None => return "<closed>".into(),
            Some(Ok(_)) => continue,
            Some(Err(_)) => return "<closed>".into(),
        }
    }
}

#[tokio::test]
async fn upgrade_releases_the_pending_get_with_noop_and_then_polling_is_400() {
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open("/engine.io/").await;
    let pending = polling_get(&s, "/engine.io/", &sid);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ws = ws_connect(&s, "/engine.io/", Some(&sid)).await.unwrap();
    ws.send(Message::text("2probe")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "3probe");
    let (st, body) = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st, body.as_slice()), (200, &b"6"[..]));
    ws.send(Message::text("5")).await.unwrap();
    // A second websocket for the same session is closed at once, as the
    // reference server does (its handshake completes), and the session is
    // untouched.
    let mut second = ws_connect(&s, "/engine.io/", Some(&sid)).await.unwrap();
    assert_eq!(next_text(&mut second).await, "<closed>");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (st, _) = s.get("/engine.io/", &sid).await;
    assert_eq!(st, 400, "polling after the upgrade");
    let (st, _) = s.post("/engine.io/", &sid, b"4x").await;
    assert_eq!(st, 400);
    // The session still works on the websocket.
    works_on_the_websocket(&mut ws).await;
}

#[tokio::test]
async fn a_get_overtaking_the_upgrade_packet_gets_the_answer_it_would_get_after_it() {
    // The protocol's test suite sends `2probe`, `5` and a polling GET at
    // once; the GET may be here before the websocket's `5` is read.
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open("/engine.io/").await;
    let mut ws = ws_connect(&s, "/engine.io/", Some(&sid)).await.unwrap();
    ws.send(Message::text("2probe")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "3probe");
    let get = polling_get(&s, "/engine.io/", &sid);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !get.is_finished(),
        "the GET waits for the upgrade's outcome"
    );
    ws.send(Message::text("5")).await.unwrap();
    let (st, _) = tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st, 400, "polling after the upgrade");
}

#[tokio::test]
async fn a_pending_get_overtaken_by_probe_and_upgrade_sent_together_gets_400() {
    // The suite sends `2probe`, `5` and a GET at once; when the GET is read
    // first it waits, and the `5` read with the probe must still win.
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open("/engine.io/").await;
    let mut ws = ws_connect(&s, "/engine.io/", Some(&sid)).await.unwrap();
    let pending = polling_get(&s, "/engine.io/", &sid);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // One write for both frames.
    ws.feed(Message::text("2probe")).await.unwrap();
    ws.feed(Message::text("5")).await.unwrap();
    ws.flush().await.unwrap();
    assert_eq!(next_text(&mut ws).await, "3probe");
    let (st, _) = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st, 400);
    works_on_the_websocket(&mut ws).await;
}

#[tokio::test]
async fn a_get_during_an_upgrade_without_its_upgrade_packet_gets_a_noop_soon() {
    // The suite's "successfully upgrades" check: after `3probe` the client
    // polls once more and sends `5` only once that GET is answered.
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open("/engine.io/").await;
    let mut ws = ws_connect(&s, "/engine.io/", Some(&sid)).await.unwrap();
    ws.send(Message::text("2probe")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "3probe");
    let start = std::time::Instant::now();
    let (st, body) = s.get("/engine.io/", &sid).await;
    assert_eq!((st, body.as_slice()), (200, &b"6"[..]));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    ws.send(Message::text("5")).await.unwrap();
    works_on_the_websocket(&mut ws).await;
}

#[tokio::test]
async fn a_client_that_never_pongs_is_closed_after_the_ping_timeout() {
    let s = Server::start(fast_heartbeats()).await;
    let sid = s.open(SIO).await;
    let (st, body) = s.get(SIO, &sid).await;
    assert_eq!((st, body.as_slice()), (200, &b"2"[..]), "the ping");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (st, _) = s.get(SIO, &sid).await;
    assert_eq!(st, 400);
    assert!(s.ctx.sessions.is_empty());

    // Answering pings keeps it alive.
    let sid = s.open(SIO).await;
    for _ in 0..3 {
        let (_, body) = s.get(SIO, &sid).await;
        assert_eq!(body, b"2");
        assert_eq!(s.post(SIO, &sid, b"3").await.0, 200);
    }
    assert_eq!(s.ctx.sessions.len(), 1);
}

#[tokio::test]
async fn a_session_is_gone_pinginterval_plus_pingtimeout_after_its_opening() {
    // The Engine.IO test suite's check: a client that fetches nothing (so
    // never sees the ping) asks again exactly then, and gets 400. (The
    // session's timer may fire a tick late; a request past the deadline is
    // refused all the same.)
    let config = fast_heartbeats();
    let wait = Duration::from_millis(config.ping_interval_ms + config.ping_timeout_ms);
    let s = Server::start(config).await;
    for _ in 0..5 {
        let sid = s.open(SIO).await;
        tokio::time::sleep(wait).await;
        assert_eq!(s.get(SIO, &sid).await.0, 400);
    }
}

#[tokio::test]
async fn a_posted_close_ends_the_session() {
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open(SIO).await;
    assert_eq!(s.post(SIO, &sid, b"1").await.0, 200);
    // Past the short linger a GET racing the close would still find.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.get(SIO, &sid).await.0, 400);

    // Within that linger, anything but the racing GET is for a session
    // the client ended: a POST is refused as unknown (the reference has
    // forgotten the session), not answered 200 with its packets dropped.
    let sid = s.open(SIO).await;
    assert_eq!(s.post(SIO, &sid, b"1").await.0, 200);
    let (st, body) = s.post(SIO, &sid, b"40").await;
    assert_eq!(st, 400);
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], 1, "Session ID unknown");
    let upgrade = ws_connect(&s, SIO, Some(&sid)).await;
    assert!(
        upgrade.as_ref().is_err_and(|e| e.contains("400")),
        "an upgrade of a closed session is refused: {:?}",
        upgrade.map(|_| ())
    );
    // The GET sent with the close still gets its noop.
    let (st, body) = s.get(SIO, &sid).await;
    assert_eq!((st, body.as_slice()), (200, &b"6"[..]));
}

#[tokio::test]
async fn a_posted_close_releases_the_pending_get_with_a_noop() {
    // As the reference server (and the Engine.IO protocol's test suite):
    // the client that closed is not told to close.
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open(SIO).await;
    let pending = polling_get(&s, SIO, &sid);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(s.post(SIO, &sid, b"1").await.0, 200);
    let (st, body) = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((st, body.as_slice()), (200, &b"6"[..]));
    // That noop forgot the session.
    assert_eq!(s.get(SIO, &sid).await.0, 400);

    // A GET that comes right after the close (a client sending both at
    // once, the GET overtaken) is released the same way, once.
    let sid = s.open(SIO).await;
    assert_eq!(s.post(SIO, &sid, b"1").await.0, 200);
    let (st, body) = s.get(SIO, &sid).await;
    assert_eq!((st, body.as_slice()), (200, &b"6"[..]));
    assert_eq!(s.get(SIO, &sid).await.0, 400);
}

#[tokio::test]
async fn garbage_and_oversize_payloads_close_only_their_session() {
    let s = Server::start(PushConfig {
        max_payload: 1000,
        ..PushConfig::default()
    })
    .await;
    let bystander = s.open(SIO).await;
    assert_eq!(s.post(SIO, &bystander, b"40").await.0, 200);
    let garbage: [&[u8]; 5] = [
        b"9zz",
        &[0xff, 0xfe, 0],
        b"4a\x1e\x1e",
        b"bnot base64!",
        b"5extra",
    ];
    for g in garbage {
        let sid = s.open(SIO).await;
        assert_eq!(s.post(SIO, &sid, g).await.0, 400, "{g:?}");
        assert_eq!(s.get(SIO, &sid).await.0, 400, "{g:?} left the session open");
    }
    let sid = s.open(SIO).await;
    assert_eq!(s.post(SIO, &sid, &vec![b'4'; 1001]).await.0, 413);
    assert_eq!(s.get(SIO, &sid).await.0, 400);
    // Socket.IO packets that break the protocol close the session too.
    for bad in [
        &b"42[\"no connect yet\"]"[..],
        b"40\x1e42\"not an array\"",
        b"40\x1e4312",
        b"40\x1e49",
    ] {
        let sid = s.open(SIO).await;
        assert_eq!(s.post(SIO, &sid, bad).await.0, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (st, body) = s.get(SIO, &sid).await;
        assert!(st == 400 || body.ends_with(b"1"), "{bad:?}: {st} {body:?}");
    }
    // Oversize and garbage websocket frames close that websocket.
    let mut ws = ws_connect(&s, SIO, None).await.unwrap();
    assert!(next_text(&mut ws).await.starts_with("0{"));
    ws.send(Message::text("x".repeat(2000))).await.ok();
    assert_eq!(next_text(&mut ws).await, "<closed>");
    let mut ws = ws_connect(&s, SIO, None).await.unwrap();
    assert!(next_text(&mut ws).await.starts_with("0{"));
    ws.send(Message::text("9garbage")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "<closed>");
    // The bystander never noticed.
    let (st, body) = s.get(SIO, &bystander).await;
    assert_eq!(st, 200);
    assert!(
        body.starts_with(b"40{\"sid\""),
        "{:?}",
        String::from_utf8_lossy(&body)
    );
}

#[tokio::test]
async fn a_socket_io_connection_that_never_connects_a_namespace_is_closed() {
    let s = Server::start(PushConfig {
        connect_timeout_ms: 300,
        ..PushConfig::default()
    })
    .await;
    let idle = s.open("/socket.io/").await;
    let joined = s.open("/socket.io/").await;
    assert_eq!(s.post("/socket.io/", &joined, b"40").await.0, 200);
    assert!(s.get("/socket.io/", &joined).await.1.starts_with(b"40"));
    tokio::time::sleep(Duration::from_millis(900)).await;
    // The one that never sent a CONNECT is gone; the other stays.
    assert_eq!(s.post("/socket.io/", &idle, b"40").await.0, 400);
    assert_eq!(s.post("/socket.io/", &joined, b"41").await.0, 200);
    // `/engine.io/` has no namespaces: never closed for it.
    let plain = s.open("/engine.io/").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(s.post("/engine.io/", &plain, b"4x").await.0, 200);
}
