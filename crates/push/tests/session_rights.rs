//! What a session may receive stays what its tokens and subscriptions
//! allow, across the edges where queued messages and recovered state
//! outlive the request that made them:
//! - messages queued for a Socket.IO namespace that leaves (or
//!   unsubscribes) never come out as events of another namespace of the
//!   same connection (which may hold a token that does not allow them);
//! - a session recovered with a new token keeps only the subscriptions
//!   that token allows, in the replay and live;
//! - a takeover refused because the session belongs to another subject
//!   leaves that session alone (connected, subscribed, receiving).

mod common;

use std::time::Duration;

use common::{next_json, pid_of, Server, Ws};
use futures::SinkExt;
use serde_json::json;
use tidegate_hub::Message as HubMessage;
use tidegate_push::auth::jwt::sign;
use tidegate_push::config::AuthMode;
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::Message;

const SIO: &str = "/socket.io/";
const SECRET: &[u8] = b"rights-secret";

fn config() -> PushConfig {
    PushConfig {
        auth: AuthMode::Jwt,
        jwt_secret: String::from_utf8(SECRET.to_vec()).unwrap(),
        recovery_window_ms: 10_000,
        recovery_history: 1024,
        namespaces: vec!["/b".into()],
        ..PushConfig::default()
    }
}

/// A token for `sub` that may subscribe to `patterns`.
fn token(sub: &str, patterns: &[&str]) -> String {
    let exp = tidegate_push::auth::now_s() + 600;
    sign(
        &json!({"sub": sub, "exp": exp, "subscribe": patterns}),
        SECRET,
    )
}

async fn publish(s: &Server, topic: &str, body: &str) {
    s.ctx
        .hub
        .publish(HubMessage::new(topic, body.to_owned()))
        .await
        .unwrap();
}

async fn get(s: &Server, sid: &str) -> String {
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), s.get(SIO, sid))
        .await
        .expect("a long-poll answer within 10 s");
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_queued_for_a_namespace_that_leaves_reach_no_other_namespace() {
    let s = Server::start(config()).await;
    let sid = s.open(SIO).await;
    let (ta, tb) = (token("u", &["a.>"]), token("u", &["b.>"]));
    let connect = format!(r#"40{{"token":"{ta}"}}{}40/b,{{"token":"{tb}"}}"#, '\u{1e}');
    s.post(SIO, &sid, connect.as_bytes()).await;
    let mut answers = String::new();
    while answers.matches("40").count() < 2 {
        answers += &get(&s, &sid).await;
    }
    s.post(SIO, &sid, br#"421["subscribe",["a.x"]]"#).await;
    assert!(get(&s, &sid).await.starts_with("431"));
    s.post(SIO, &sid, br#"42/b,2["subscribe",["b.x"]]"#).await;
    assert!(get(&s, &sid).await.starts_with("43/b,2"));
    // Many more than one long-poll answer carries, none read yet.
    for i in 0..1500 {
        publish(&s, "b.x", &i.to_string()).await;
    }
    s.post(SIO, &sid, b"41/b,").await;
    publish(&s, "a.x", "\"end\"").await;
    let mut seen = String::new();
    while !seen.contains(r#"42["a.x","end","#) {
        let got = get(&s, &sid).await;
        assert!(
            !got.contains(r#"42["b.x""#),
            "a message of /b delivered on /: {}",
            &got[..got.len().min(300)]
        );
        seen = got;
    }

    // Unsubscribing one namespace while another stays subscribed: the
    // same.
    s.post(SIO, &sid, format!(r#"40/b,{{"token":"{tb}"}}"#).as_bytes())
        .await;
    assert!(get(&s, &sid).await.starts_with("40/b,"));
    s.post(SIO, &sid, br#"42/b,3["subscribe",["b.x"]]"#).await;
    assert!(get(&s, &sid).await.starts_with("43/b,3"));
    for i in 0..1500 {
        publish(&s, "b.x", &i.to_string()).await;
    }
    s.post(SIO, &sid, br#"42/b,4["unsubscribe",["b.x"]]"#).await;
    publish(&s, "a.x", "\"end2\"").await;
    let mut seen = String::new();
    while !seen.contains(r#"42["a.x","end2","#) {
        let got = get(&s, &sid).await;
        assert!(
            !got.contains(r#"42["b.x""#),
            "a message of /b delivered on /: {}",
            &got[..got.len().min(300)]
        );
        seen = got;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_io_session_recovered_with_a_narrower_token_keeps_only_what_it_allows() {
    let s = Server::start(config()).await;
    let sid = s.open(SIO).await;
    let wide = token("u", &["a.>", "c.>"]);
    s.post(SIO, &sid, format!(r#"40{{"token":"{wide}"}}"#).as_bytes())
        .await;
    let pid = pid_of(&get(&s, &sid).await).expect("a pid with recovery on");
    s.post(SIO, &sid, br#"421["subscribe",["a.x","c.x"]]"#)
        .await;
    assert!(get(&s, &sid).await.starts_with("431"));
    s.post(SIO, &sid, b"1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish(&s, "a.x", "1").await;
    publish(&s, "c.x", "1").await;

    let narrow = token("u", &["c.>"]);
    let sid = s.open(SIO).await;
    let ask = format!(r#"40{{"token":"{narrow}","pid":"{pid}","offset":"0"}}"#);
    s.post(SIO, &sid, ask.as_bytes()).await;
    let mut answer = get(&s, &sid).await;
    assert_eq!(pid_of(&answer).as_deref(), Some(pid.as_str()), "{answer}");
    while !answer.contains(r#"42["c.x",1,"#) {
        answer += &get(&s, &sid).await;
    }
    assert!(!answer.contains("a.x"), "replayed a.x: {answer}");
    publish(&s, "a.x", "2").await;
    publish(&s, "c.x", "2").await;
    let live = get(&s, &sid).await;
    assert!(live.starts_with(r#"42["c.x",2,"#), "{live}");
    assert!(!live.contains("a.x"), "live a.x: {live}");
}

/// A `/ws` connection with `token`, and its session id.
async fn ws_connect(s: &Server, token: &str) -> (Ws, String) {
    let url = format!("ws://{}/ws?token={token}", s.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["op"], "session", "{hello}");
    (ws, hello["session"].as_str().unwrap().to_owned())
}

async fn ws_subscribe(ws: &mut Ws, patterns: &[&str]) {
    let ask = json!({"op": "subscribe", "patterns": patterns});
    ws.send(Message::text(ask.to_string())).await.unwrap();
    let r = next_json(ws).await;
    assert_eq!(r["accepted"], json!(patterns), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_session_recovered_with_a_narrower_token_keeps_only_what_it_allows() {
    let s = Server::start(config()).await;
    let (mut ws, session) = ws_connect(&s, &token("u", &["a.>", "c.>"])).await;
    ws_subscribe(&mut ws, &["a.x", "c.x"]).await;
    drop(ws);
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish(&s, "a.x", "1").await;
    publish(&s, "c.x", "1").await;

    let (mut ws, _) = ws_connect(&s, &token("u", &["c.>"])).await;
    let ask = json!({"op": "recover", "session": session, "offset": 0});
    ws.send(Message::text(ask.to_string())).await.unwrap();
    let r = next_json(&mut ws).await;
    assert_eq!(r["recovered"], true, "{r}");
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["topic"].as_str(), m["payload"].as_u64()),
        (Some("c.x"), Some(1)),
        "{m}"
    );
    publish(&s, "a.x", "2").await;
    publish(&s, "c.x", "2").await;
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["topic"].as_str(), m["payload"].as_u64()),
        (Some("c.x"), Some(2)),
        "{m}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_json(&mut ws))
            .await
            .is_err(),
        "nothing of a.x follows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_refused_for_another_subject_leaves_the_session_alone() {
    let s = Server::start(config()).await;
    let (mut victim, session) = ws_connect(&s, &token("victim", &["a.>"])).await;
    ws_subscribe(&mut victim, &["a.x"]).await;

    let (mut other, _) = ws_connect(&s, &token("other", &["a.>"])).await;
    let ask = json!({"op": "recover", "session": session, "offset": 0});
    other.send(Message::text(ask.to_string())).await.unwrap();
    let r = next_json(&mut other).await;
    assert_eq!(r["recovered"], false, "{r}");
    assert!(
        r["reason"].as_str().unwrap().contains("another subject"),
        "{r}"
    );

    // The victim was not asked for its state: still connected, still
    // subscribed, and still recoverable by its own subject.
    publish(&s, "a.x", "1").await;
    let m = next_json(&mut victim).await;
    assert_eq!(
        (m["topic"].as_str(), m["payload"].as_u64()),
        (Some("a.x"), Some(1)),
        "{m}"
    );

    // The same over Socket.IO: another subject's CONNECT with the pid
    // starts clean and the session goes on.
    let sid = s.open(SIO).await;
    let mine = token("victim", &["a.>"]);
    s.post(SIO, &sid, format!(r#"40{{"token":"{mine}"}}"#).as_bytes())
        .await;
    let pid = pid_of(&get(&s, &sid).await).expect("a pid");
    s.post(SIO, &sid, br#"421["subscribe",["a.y"]]"#).await;
    assert!(get(&s, &sid).await.starts_with("431"));
    let thief = s.open(SIO).await;
    let theirs = token("other", &["a.>"]);
    let ask = format!(r#"40{{"token":"{theirs}","pid":"{pid}","offset":"0"}}"#);
    s.post(SIO, &thief, ask.as_bytes()).await;
    let answer = get(&s, &thief).await;
    assert!(pid_of(&answer).is_some_and(|p| p != pid), "{answer}");
    publish(&s, "a.y", "1").await;
    let got = get(&s, &sid).await;
    assert!(got.starts_with(r#"42["a.y",1,"#), "{got}");
}
