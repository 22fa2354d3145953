//! `[push] conformance = true` as the Socket.IO protocol's own test suite
//! (socketio/socket.io-protocol, `test-suite/`) sees it: the `auth` event
//! after every namespace CONNECT carries the handshake's payload, `{}`
//! when there was none, in a websocket message after the CONNECT reply.
//! (The suite itself, run against `tidegate serve`, is in docs/push.md,
//! "Conformance"; it is not vendored here.)

mod common;

use std::time::Duration;

use common::Server;
use futures::{SinkExt, StreamExt};
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::Message;

async fn next_text(ws: &mut common::Ws) -> String {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message within 5 s")
        {
            Some(Ok(Message::Text(t))) => return t.to_string(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn every_connect_is_followed_by_the_auth_event_with_its_payload() {
    let s = Server::start(PushConfig {
        conformance: true,
        ..PushConfig::default()
    })
    .await;
    for (connect, reply_prefix, auth) in [
        ("40", "40{", r#"42["auth",{}]"#),
        (
            r#"40{"token":"123"}"#,
            "40{",
            r#"42["auth",{"token":"123"}]"#,
        ),
        ("40/custom,", "40/custom,{", r#"42/custom,["auth",{}]"#),
        (
            r#"40/custom,{"token":"abc"}"#,
            "40/custom,{",
            r#"42/custom,["auth",{"token":"abc"}]"#,
        ),
    ] {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!(
            "ws://{}/socket.io/?EIO=4&transport=websocket",
            s.addr
        ))
        .await
        .unwrap();
        assert!(next_text(&mut ws).await.starts_with("0{"));
        ws.send(Message::text(connect)).await.unwrap();
        let reply = next_text(&mut ws).await;
        assert!(reply.starts_with(reply_prefix), "{connect}: {reply}");
        assert_eq!(next_text(&mut ws).await, auth, "{connect}");
    }
}

#[tokio::test]
async fn over_polling_the_auth_event_comes_with_the_connect_reply() {
    let s = Server::start(PushConfig {
        conformance: true,
        ..PushConfig::default()
    })
    .await;
    let sid = s.open("/socket.io/").await;
    assert_eq!(s.post("/socket.io/", &sid, b"40").await.0, 200);
    let (st, body) = s.get("/socket.io/", &sid).await;
    assert_eq!(st, 200);
    let body = String::from_utf8(body).unwrap();
    let packets: Vec<&str> = body.split('\x1e').collect();
    assert!(packets[0].starts_with("40{"), "{body}");
    assert_eq!(packets.get(1), Some(&r#"42["auth",{}]"#), "{body}");
}
