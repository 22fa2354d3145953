//! Server shutdown (`PushContext::shutdown` cancelled): a `/ws` client gets
//! the messages already queued for it, then close code 1001; an Engine.IO
//! session over websocket gets them, its close packet `1` and close 1001;
//! over polling, the pending GET (or the next one) ends with `1`; new
//! handshakes are refused with 503.

mod common;

use std::time::Duration;

use common::{next_json, parse_response, Server, Ws};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tidegate_hub::Message as HubMessage;
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

/// Messages published just before the shutdown.
const N: usize = 50;

async fn publish_n(s: &Server, topic: &str) {
    for i in 0..N {
        let m = HubMessage::new(topic, format!("{{\"n\":{i}}}").into_bytes());
        s.ctx.hub.publish(m).await.unwrap();
    }
}

/// `GET path` on a new connection, from a task of its own.
async fn get_at(addr: std::net::SocketAddr, path: &str) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    c.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).await.unwrap();
    parse_response(&raw)
}

/// Text frames until the close frame: (texts, close code and reason).
async fn until_close(ws: &mut Ws) -> (Vec<String>, Option<(u16, String)>) {
    let mut texts = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a frame within 5 s");
        match m {
            Some(Ok(Message::Text(t))) => texts.push(t.to_string()),
            Some(Ok(Message::Close(f))) => {
                let f = f.map(|f| (u16::from(f.code), f.reason.to_string()));
                return (texts, f);
            }
            Some(Ok(_)) => continue,
            other => panic!("socket ended without a close frame: {other:?}"),
        }
    }
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

    publish_n(&s, "down.ws").await;
    s.ctx.shutdown.cancel();
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
    assert!(open.to_text().unwrap().starts_with("0{"), "{open:?}");
    ws.send(Message::text(
        r#"4{"op":"subscribe","id":1,"patterns":["down.>"]}"#,
    ))
    .await
    .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(reply.to_text().unwrap().contains("subscribed"), "{reply:?}");

    publish_n(&s, "down.eio").await;
    s.ctx.shutdown.cancel();
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
            get_at(addr, &format!("{path}?EIO=4&transport=polling&sid={sid}")).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    publish_n(&s, "down.poll").await;
    s.ctx.shutdown.cancel();

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
