//! `[push] auth = "jwt"`: a token with the wrong signature, expired, or
//! missing is refused (Socket.IO CONNECT_ERROR, `/ws` close 1008 with the
//! reason, 401 on `/v1/publish`); a good token may subscribe and publish
//! only within its `subscribe` / `publish` claims. Both HS256 (a shared
//! secret) and RS256 (a configured public key; the key pair in tests/keys
//! exists only for these tests).

mod common;

use std::time::Duration;

use common::Server;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tidegate_push::auth::jwt::sign;
use tidegate_push::config::AuthMode;
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::Message;

const SIO: &str = "/socket.io/";
const SECRET: &[u8] = b"test-secret";

fn config() -> PushConfig {
    PushConfig {
        auth: AuthMode::Jwt,
        jwt_secret: String::from_utf8(SECRET.to_vec()).unwrap(),
        ..PushConfig::default()
    }
}

fn token(exp_in: i64, secret: &[u8]) -> String {
    let now = tidegate_push::auth::now_s() as i64;
    sign(
        &json!({"sub": "u1", "exp": now + exp_in, "subscribe": ["a.>"], "publish": ["a.pub"]}),
        secret,
    )
}

/// CONNECTs with `auth` and returns the server's answer packet.
async fn sio_connect(s: &Server, auth: Value) -> (String, String) {
    let sid = s.open(SIO).await;
    let body = format!("40{auth}");
    assert_eq!(s.post(SIO, &sid, body.as_bytes()).await.0, 200);
    let (_, got) = s.get(SIO, &sid).await;
    (sid, String::from_utf8(got).unwrap())
}

#[tokio::test]
async fn socket_io_connect_refuses_missing_forged_and_expired_tokens() {
    let s = Server::start(config()).await;
    let cases = [
        (json!({}), "a token is required"),
        (json!({"token": token(60, b"wrong")}), "bad token signature"),
        (json!({"token": token(-1, SECRET)}), "token expired"),
        (json!({"token": "garbage"}), "malformed token"),
    ];
    for (auth, why) in cases {
        let (_, got) = sio_connect(&s, auth).await;
        assert_eq!(got, format!(r#"44{{"message":"{why}"}}"#));
    }
}

#[tokio::test]
async fn a_good_token_subscribes_and_publishes_only_within_its_claims() {
    let s = Server::start(config()).await;
    let (sid, got) = sio_connect(&s, json!({"token": token(60, SECRET)})).await;
    assert!(got.starts_with(r#"40{"sid":"#), "{got}");
    s.post(SIO, &sid, br#"421["subscribe",["a.x","a.>","b.x",">"]]"#)
        .await;
    let (_, got) = s.get(SIO, &sid).await;
    let v: Value = serde_json::from_slice(&got[3..]).unwrap();
    assert_eq!(v[0]["accepted"], json!(["a.x", "a.>"]));
    let refused: Vec<&str> = v[0]["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["pattern"].as_str().unwrap())
        .collect();
    assert_eq!(refused, ["b.x", ">"]);
    assert_eq!(v[0]["refused"][0]["reason"], "not allowed by the token");
    s.post(SIO, &sid, br#"422["publish","a.other",1]"#).await;
    let (_, got) = s.get(SIO, &sid).await;
    assert_eq!(
        got,
        br#"432[{"ok":false,"reason":"not allowed by the token"}]"#
    );
    s.post(SIO, &sid, br#"423["publish","a.pub",1]"#).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (_, got) = s.get(SIO, &sid).await;
    let got = String::from_utf8(got).unwrap();
    assert!(
        got.contains(r#"433[{"ok":true}]"#) && got.contains(r#"42["a.pub",1]"#),
        "{got}"
    );
}

#[tokio::test]
async fn ws_and_http_publish_check_the_token() {
    let s = Server::start(config()).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
    {
        Some(Ok(Message::Close(Some(f)))) => {
            assert_eq!(
                (u16::from(f.code), f.reason.as_str()),
                (1008, "a token is required")
            )
        }
        other => panic!("{other:?}"),
    }
    let url = format!("ws://{}/ws?token={}", s.addr, token(60, SECRET));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws.send(Message::text(
        r#"{"op":"subscribe","patterns":["a.b","z"]}"#,
    ))
    .await
    .unwrap();
    let Some(Ok(Message::Text(t))) = ws.next().await else {
        panic!()
    };
    let v: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        (v["accepted"].clone(), v["refused"][0]["pattern"].clone()),
        (json!(["a.b"]), json!("z"))
    );

    assert_eq!(
        s.request("POST", "/v1/publish?topic=a.pub", b"x").await.0,
        401
    );
    let bad = format!("/v1/publish?topic=a.pub&token={}", token(60, b"nope"));
    assert_eq!(s.request("POST", &bad, b"x").await.0, 401);
    let good = token(60, SECRET);
    assert_eq!(
        s.request(
            "POST",
            &format!("/v1/publish?topic=a.pub&token={good}"),
            b"x"
        )
        .await
        .0,
        200
    );
    assert_eq!(
        s.request(
            "POST",
            &format!("/v1/publish?topic=a.other&token={good}"),
            b"x"
        )
        .await
        .0,
        403
    );
    // Plain Engine.IO sessions need the token in the handshake.
    assert_eq!(
        s.request("GET", "/engine.io/?EIO=4&transport=polling", b"")
            .await
            .0,
        403
    );
    let (st, _) = s
        .request(
            "GET",
            &format!("/engine.io/?EIO=4&transport=polling&token={good}"),
            b"",
        )
        .await;
    assert_eq!(st, 200);
}

const RSA_PRIVATE: &str = include_str!("keys/rs256_private.pem");
const RSA_PUBLIC: &str = include_str!("keys/rs256_public.pem");
const OTHER_PRIVATE: &str = include_str!("keys/other_private.pem");

fn rs256(exp_in: i64, private_pem: &str) -> String {
    let now = tidegate_push::auth::now_s() as i64;
    tidegate_push::auth::jwt::sign_rs256(
        &json!({"sub": "u9", "exp": now + exp_in, "subscribe": ["a.>"], "publish": []}),
        private_pem,
    )
    .unwrap()
}

#[tokio::test]
async fn rs256_tokens_are_checked_against_the_configured_public_key() {
    let s = Server::start(PushConfig {
        auth: AuthMode::Jwt,
        jwt_public_key: RSA_PUBLIC.into(),
        ..PushConfig::default()
    })
    .await;
    let cases = [
        (
            json!({"token": rs256(60, OTHER_PRIVATE)}),
            "bad token signature",
        ),
        (json!({"token": rs256(-1, RSA_PRIVATE)}), "token expired"),
        (
            json!({"token": token(60, SECRET)}),
            "unsupported token algorithm (accepted: RS256)",
        ),
    ];
    for (auth, why) in cases {
        let (_, got) = sio_connect(&s, auth).await;
        assert_eq!(got, format!(r#"44{{"message":"{why}"}}"#));
    }
    let (sid, got) = sio_connect(&s, json!({"token": rs256(60, RSA_PRIVATE)})).await;
    assert!(got.starts_with(r#"40{"sid":"#), "{got}");
    s.post(SIO, &sid, br#"421["subscribe",["a.x","b.x"]]"#)
        .await;
    let (_, got) = s.get(SIO, &sid).await;
    let v: Value = serde_json::from_slice(&got[3..]).unwrap();
    assert_eq!(v[0]["accepted"], json!(["a.x"]));
    assert_eq!(v[0]["refused"][0]["pattern"], "b.x");
    assert_eq!(v[0]["refused"][0]["reason"], "not allowed by the token");
    // /v1/publish: the token allows no publishing at all.
    let path = format!("/v1/publish?topic=a.x&token={}", rs256(60, RSA_PRIVATE));
    assert_eq!(s.request("POST", &path, b"x").await.0, 403);
}
