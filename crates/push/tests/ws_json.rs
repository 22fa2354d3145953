//! The `/ws` JSON protocol with a raw websocket client: subscribe (accepted
//! and refused), publish JSON and binary, receive messages (binary as a
//! binary frame after its header), unsubscribe, errors answered; and
//! `POST /v1/publish` reaching a `/ws` subscriber.

mod common;

use std::time::Duration;

use common::Server;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next(ws: &mut Ws) -> Message {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(m)) => return m,
            other => panic!("socket ended: {other:?}"),
        }
    }
}

async fn next_json(ws: &mut Ws) -> Value {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected text, got {other:?}"),
    }
}

#[tokio::test]
async fn subscribe_publish_receive_and_errors() {
    let s = Server::start(PushConfig::default()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"op":"subscribe","id":1,"patterns":["w.>","bad..x"]}"#,
    ))
    .await
    .unwrap();
    let v = next_json(&mut ws).await;
    assert_eq!(v["op"], "subscribed");
    assert_eq!(v["accepted"], json!(["w.>"]));
    assert_eq!(v["refused"][0]["pattern"], "bad..x");

    ws.send(Message::text(
        r#"{"op":"publish","id":2,"topic":"w.a","payload":{"k":[1,2]}}"#,
    ))
    .await
    .unwrap();
    let mut seen = [next_json(&mut ws).await, next_json(&mut ws).await];
    seen.sort_by_key(|v| v["op"].as_str().unwrap().to_owned());
    assert_eq!(
        seen[0],
        json!({"op":"message","topic":"w.a","payload":{"k":[1,2]}})
    );
    assert_eq!(seen[1], json!({"op":"published","id":2}));

    ws.send(Message::text(
        r#"{"op":"publish","id":3,"topic":"w.b","binary":true}"#,
    ))
    .await
    .unwrap();
    ws.send(Message::binary(vec![0xffu8, 0, 7])).await.unwrap();
    let mut got_bin = false;
    for _ in 0..3 {
        match next(&mut ws).await {
            Message::Binary(b) => {
                assert_eq!(&b[..], &[0xff, 0, 7]);
                got_bin = true;
            }
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                assert!(
                    v["op"] == "published"
                        || v == json!({"op":"message","topic":"w.b","binary":true}),
                    "{v}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(got_bin);

    // POST /v1/publish reaches the subscriber.
    let (st, _) = s
        .request("POST", "/v1/publish?topic=w.http", b"from http")
        .await;
    assert_eq!(st, 200);
    assert_eq!(
        next_json(&mut ws).await,
        json!({"op":"message","topic":"w.http","payload":"from http"})
    );
    let (st, body) = s.request("POST", "/v1/publish?topic=bad..t", b"x").await;
    assert_eq!(st, 400);
    let refusal: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(refusal["ok"], false);
    // No topic at all: the same JSON refusal, naming what is missing.
    let (st, body) = s.request("POST", "/v1/publish", b"x").await;
    assert_eq!(st, 400);
    let refusal: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(refusal["ok"], false);
    assert!(
        refusal["reason"].as_str().unwrap().contains("topic="),
        "{refusal}"
    );

    ws.send(Message::text("not json")).await.unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "error");
    ws.send(Message::text(
        r#"{"op":"unsubscribe","id":4,"patterns":["w.>","nope"]}"#,
    ))
    .await
    .unwrap();
    let v = next_json(&mut ws).await;
    assert_eq!(
        (v["accepted"].clone(), v["refused"][0]["pattern"].clone()),
        (json!(["w.>"]), json!("nope"))
    );
}

/// A websocket handshake on a raw TCP connection (so nothing answers the
/// server's pings); returns the stream after the 101 head.
async fn raw_ws(s: &Server, path: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut t = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    t.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(
            t.read(&mut b).await.unwrap(),
            1,
            "closed during the handshake"
        );
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&head)
    );
    t
}

#[tokio::test]
async fn a_ws_client_that_never_pongs_is_closed_and_one_that_does_stays() {
    use tokio::io::AsyncReadExt;
    let s = Server::start(common::fast_heartbeats()).await;
    // 300 ms interval + 300 ms timeout: the silent client is closed soon
    // after 600 ms, having been sent a ping (0x89) and a close (0x88) with
    // code 1001.
    let mut dead = raw_ws(&s, "/ws").await;
    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), dead.read_to_end(&mut seen))
        .await
        .expect("the server closes a connection that never pongs")
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(seen.first(), Some(&0x89), "a ping first: {seen:?}");
    let close = seen.iter().position(|b| *b == 0x88).expect("a close frame");
    assert_eq!(&seen[close + 2..close + 4], &1001u16.to_be_bytes());

    // A client that reads (tungstenite answers pings) outlives several
    // ping timeouts and is still served.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut pings = 0;
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, ws.next()).await {
        match m.unwrap() {
            Message::Ping(_) => pings += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(pings >= 2, "{pings} pings");
    ws.send(Message::text(
        r#"{"op":"subscribe","id":1,"patterns":["alive"]}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "subscribed");
}

#[tokio::test]
async fn an_oversize_or_garbage_frame_closes_only_that_connection() {
    let s = Server::start(PushConfig {
        max_payload: 1000,
        ..PushConfig::default()
    })
    .await;
    let url = format!("ws://{}/ws", s.addr);
    let (mut bystander, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    bystander
        .send(Message::text(
            r#"{"op":"subscribe","id":1,"patterns":["o.>"]}"#,
        ))
        .await
        .unwrap();
    assert_eq!(next_json(&mut bystander).await["op"], "subscribed");

    let (mut big, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    big.send(Message::text("x".repeat(2000))).await.ok();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match big.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "an oversize frame left the connection open");

    // Garbage that parses as no request is answered, not fatal.
    let (mut odd, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    odd.send(Message::binary(vec![0u8, 1, 2])).await.unwrap();
    assert_eq!(next_json(&mut odd).await["op"], "error");
    odd.send(Message::text("{\"op\":")).await.unwrap();
    assert_eq!(next_json(&mut odd).await["op"], "error");

    let (st, _) = s.request("POST", "/v1/publish?topic=o.k", b"1").await;
    assert_eq!(st, 200);
    assert_eq!(
        next_json(&mut bystander).await,
        json!({"op":"message","topic":"o.k","payload":1})
    );
}
