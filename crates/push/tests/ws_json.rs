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
    let (st, _) = s.request("POST", "/v1/publish?topic=bad..t", b"x").await;
    assert_eq!(st, 400);

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
