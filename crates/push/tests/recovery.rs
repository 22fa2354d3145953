//! Connection state recovery with the stock `socket.io-client` (npm) and a
//! raw `/ws` client: after a dropped connection, a client that comes back
//! within `recovery_window_ms` with its session id and last offset has
//! `recovered` set, its subscriptions back, and every message published
//! while it was away exactly once and in order, then the live ones; past
//! the window, or having missed a message the hub's history let go (it
//! keeps `recovery_history` per topic), or more than a replay may carry,
//! it gets a clean start (not recovered, nothing replayed, nothing
//! subscribed).

mod common;

use std::time::Duration;

use common::{js_peer, next_json, pid_of, Server, Ws};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tidegate_hub::Message as HubMessage;
use tidegate_push::PushConfig;
use tokio_tungstenite::tungstenite::Message;

fn recovering(window_ms: u64, history: usize) -> PushConfig {
    PushConfig {
        recovery_window_ms: window_ms,
        recovery_history: history,
        ..PushConfig::default()
    }
}

/// The peer's report: (recovered, event numbers in arrival order, offsets).
async fn run(s: &Server, transport: &str, missed: usize, pause_ms: u64) -> (bool, Vec<u64>, Value) {
    let line = js_peer(
        "recovery",
        s.url(),
        &[transport, &missed.to_string(), &pause_ms.to_string()],
    )
    .await;
    let v: Value = serde_json::from_str(&line).unwrap();
    let got = v["got"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    (v["recovered"].as_bool().unwrap(), got, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_io_client_recovers_every_missed_message_once_in_order() {
    let s = Server::start(recovering(10_000, 1024)).await;
    for transport in ["websocket", "polling"] {
        let (recovered, got, v) = run(&s, transport, 5, 0).await;
        assert!(recovered, "{transport}: {v}");
        // 3 before the drop, 5 missed, 2 after: each once, in order.
        assert_eq!(got, (1..=10).collect::<Vec<u64>>(), "{transport}: {v}");
        let offsets: Vec<u64> = v["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().parse().unwrap())
            .collect();
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "{transport}: offsets {offsets:?}"
        );
    }
    assert_eq!(s.ctx.recovery.recovered(), 2);
    assert_eq!(s.ctx.recovery.not_recovered(), 0);
    let metrics = s.ctx.hub.metrics().render();
    assert!(
        metrics.contains("tidegate_push_recovered_total 2")
            && metrics.contains("tidegate_push_not_recovered_total 0"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_window_the_client_starts_clean() {
    let s = Server::start(recovering(300, 1024)).await;
    let (recovered, got, v) = run(&s, "websocket", 3, 1000).await;
    assert!(!recovered, "{v}");
    // Nothing replayed; the 2 after the reconnect arrive on the new
    // subscription.
    assert_eq!(got, [1, 2, 3, 7, 8], "{v}");
    assert_eq!(s.ctx.recovery.not_recovered(), 1);
    // The expired session is gone: nothing parked, nothing registered but
    // the live one (closed by now as well).
    assert_eq!(s.ctx.recovery.parked(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_more_than_the_history_is_a_clean_start() {
    let s = Server::start(recovering(10_000, 4)).await;
    let (recovered, got, v) = run(&s, "websocket", 6, 0).await;
    assert!(!recovered, "{v}");
    assert_eq!(got, [1, 2, 3, 10, 11], "{v}");
    assert_eq!(s.ctx.recovery.not_recovered(), 1);
}

#[tokio::test]
async fn without_recovery_events_carry_no_offset_and_connect_no_pid() {
    let s = Server::start(PushConfig::default()).await;
    let sid = s.open("/socket.io/").await;
    assert_eq!(s.post("/socket.io/", &sid, b"40").await.0, 200);
    let (_, body) = s.get("/socket.io/", &sid).await;
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.starts_with("40{\"sid\"") && !body.contains("pid"),
        "{body}"
    );
    s.post("/socket.io/", &sid, br#"421["subscribe",["n.x"]]"#)
        .await;
    assert!(s.get("/socket.io/", &sid).await.1.starts_with(b"431"));
    s.ctx
        .hub
        .publish(HubMessage::new("n.x", "1"))
        .await
        .unwrap();
    let (_, body) = s.get("/socket.io/", &sid).await;
    assert_eq!(String::from_utf8(body).unwrap(), r#"42["n.x",1]"#);
}

async fn ws_connect(s: &Server) -> (Ws, String) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", s.addr))
        .await
        .unwrap();
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["op"], "session", "{hello}");
    let id = hello["session"].as_str().unwrap().to_owned();
    (ws, id)
}

async fn publish(s: &Server, n: u64) {
    s.ctx
        .hub
        .publish(HubMessage::new("w.r", json!({ "n": n }).to_string()))
        .await
        .unwrap();
}

#[tokio::test]
async fn ws_client_recovers_from_an_offset() {
    let s = Server::start(recovering(10_000, 1024)).await;
    let (mut ws, session) = ws_connect(&s).await;
    ws.send(Message::text(
        r#"{"op":"subscribe","id":1,"patterns":["w.>"]}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["op"], "subscribed");
    for n in 1..=2 {
        publish(&s, n).await;
        let m = next_json(&mut ws).await;
        assert_eq!(
            (m["payload"]["n"].as_u64(), m["offset"].as_u64()),
            (Some(n), Some(n))
        );
    }
    drop(ws);
    tokio::time::sleep(Duration::from_millis(100)).await;
    for n in 3..=5 {
        publish(&s, n).await;
    }
    let (mut ws, _) = ws_connect(&s).await;
    let ask = json!({"op": "recover", "id": 9, "session": session, "offset": 2});
    ws.send(Message::text(ask.to_string())).await.unwrap();
    let r = next_json(&mut ws).await;
    assert_eq!(r["op"], "recovered", "{r}");
    assert_eq!(r["recovered"], true, "{r}");
    assert_eq!(r["session"], session.as_str(), "{r}");
    publish(&s, 6).await;
    for n in 3..=6 {
        let m = next_json(&mut ws).await;
        assert_eq!(m["op"], "message", "{m}");
        assert_eq!(
            (m["payload"]["n"].as_u64(), m["offset"].as_u64()),
            (Some(n), Some(n)),
            "{m}"
        );
    }
    // Nothing else (no duplicate) follows.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_json(&mut ws))
            .await
            .is_err()
    );

    // A third connection takes the session over from the live second one,
    // which is closed with the reason.
    let (mut third, _) = ws_connect(&s).await;
    let ask = json!({"op": "recover", "session": session, "offset": 6});
    third.send(Message::text(ask.to_string())).await.unwrap();
    assert_eq!(next_json(&mut third).await["recovered"], true);
    let closed = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap();
    match closed {
        Some(Ok(Message::Close(Some(f)))) => assert!(f.reason.contains("recovered"), "{f:?}"),
        other => panic!("the old connection got {other:?}"),
    }
    publish(&s, 7).await;
    let m = next_json(&mut third).await;
    assert_eq!(
        (m["payload"]["n"].as_u64(), m["offset"].as_u64()),
        (Some(7), Some(7)),
        "{m}"
    );

    // An unknown session, or one asked for after a subscribe, is refused
    // with why and the connection goes on as a fresh session.
    let (mut ws, fresh) = ws_connect(&s).await;
    ws.send(Message::text(
        r#"{"op":"recover","session":"nope","offset":0}"#,
    ))
    .await
    .unwrap();
    let r = next_json(&mut ws).await;
    assert_eq!(r["recovered"], false, "{r}");
    assert_eq!(r["session"], fresh.as_str());
    assert!(r["reason"].as_str().unwrap().contains("unknown"), "{r}");
    assert_eq!(s.ctx.recovery.recovered(), 2);
}

/// Publishes `body` on `topic`.
async fn publish_on(s: &Server, topic: &str, body: &str) {
    s.ctx
        .hub
        .publish(HubMessage::new(topic, body.to_owned()))
        .await
        .unwrap();
}

#[tokio::test]
async fn offsets_are_the_hubs_and_a_replay_respects_each_subscriptions_start() {
    let s = Server::start(recovering(10_000, 1024)).await;
    let (mut a, session) = ws_connect(&s).await;
    let (mut b, _) = ws_connect(&s).await;
    for ws in [&mut a, &mut b] {
        ws.send(Message::text(
            r#"{"op":"subscribe","id":1,"patterns":["t.one"]}"#,
        ))
        .await
        .unwrap();
        assert_eq!(next_json(ws).await["op"], "subscribed");
    }
    publish_on(&s, "t.one", "1").await;
    // The same event carries the same offset in every session.
    let (ma, mb) = (next_json(&mut a).await, next_json(&mut b).await);
    assert_eq!(ma["offset"], mb["offset"], "{ma} {mb}");
    let seen = ma["offset"].as_u64().unwrap();
    // Published before `a` subscribed to it: never replayed to `a`.
    publish_on(&s, "t.two", "early").await;
    a.send(Message::text(
        r#"{"op":"subscribe","id":2,"patterns":["t.two"]}"#,
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut a).await["op"], "subscribed");
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish_on(&s, "t.two", "late").await;
    publish_on(&s, "t.three", "other").await;
    publish_on(&s, "t.one", "2").await;

    let (mut a, _) = ws_connect(&s).await;
    let ask = json!({"op": "recover", "session": session, "offset": seen});
    a.send(Message::text(ask.to_string())).await.unwrap();
    assert_eq!(next_json(&mut a).await["recovered"], true);
    let mut got = Vec::new();
    let mut offsets = Vec::new();
    for _ in 0..2 {
        let m = next_json(&mut a).await;
        got.push(m["payload"].to_string());
        offsets.push(m["offset"].as_u64().unwrap());
    }
    assert_eq!(got, [r#""late""#, "2"]);
    assert!(offsets[0] > seen && offsets[1] > offsets[0], "{offsets:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_json(&mut a))
            .await
            .is_err(),
        "nothing else: not the early message, not another topic, no duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_namespace_of_a_recovered_connection_gets_its_own_missed_events() {
    let s = Server::start(PushConfig {
        namespaces: vec!["/n".into()],
        ..recovering(10_000, 1024)
    })
    .await;
    let line = js_peer("recovery-namespaces", s.url(), &[]).await;
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["recovered"], json!([true, true]), "{v}");
    assert_eq!(v["got"]["r"], json!([1, 2, 3, 4, 5]), "{v}");
    assert_eq!(v["got"]["q"], json!([1, 2, 3, 4, 5]), "{v}");
}

#[tokio::test]
async fn a_namespace_that_cannot_be_replayed_starts_clean_while_the_other_recovers() {
    const SIO: &str = "/socket.io/";
    let s = Server::start(PushConfig {
        namespaces: vec!["/n".into()],
        ..recovering(10_000, 4)
    })
    .await;
    let get = |sid: String| {
        let s = &s;
        async move { String::from_utf8(s.get(SIO, &sid).await.1).unwrap() }
    };
    let sid = s.open(SIO).await;
    s.post(SIO, &sid, b"40\x1e40/n,").await;
    let answers = get(sid.clone()).await;
    let pid = pid_of(&answers).expect("a pid with recovery on");
    s.post(SIO, &sid, br#"421["subscribe",["a.x"]]"#).await;
    s.post(SIO, &sid, br#"42/n,2["subscribe",["b.x"]]"#).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    get(sid.clone()).await;
    // "/" gets a.x at offsets 1..=6 (the history keeps 3..=6 of a.x),
    // "/n" gets b.x at offset 7.
    for i in 0..6 {
        s.ctx
            .hub
            .publish(HubMessage::new("a.x", i.to_string()))
            .await
            .unwrap();
    }
    s.ctx
        .hub
        .publish(HubMessage::new("b.x", "1"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let got = get(sid.clone()).await;
    assert!(got.ends_with(r#"42/n,["b.x",1,"7"]"#), "{got}");
    s.post(SIO, &sid, b"1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let sid = s.open(SIO).await;
    let ask = format!(r#"40/n,{{"pid":"{pid}","offset":"7"}}"#);
    s.post(SIO, &sid, ask.as_bytes()).await;
    let answer = get(sid.clone()).await;
    assert_eq!(pid_of(&answer).as_deref(), Some(pid.as_str()), "{answer}");
    // "/" saw only offset 1: a.x at 2 is no longer kept.
    let ask = format!(r#"40{{"pid":"{pid}","offset":"1"}}"#);
    s.post(SIO, &sid, ask.as_bytes()).await;
    let answer = get(sid.clone()).await;
    assert!(answer.starts_with("40{\"sid\""), "{answer}");
    assert_eq!(pid_of(&answer), None, "{answer}");
    // "/" lost its subscription; "/n" goes on live.
    s.ctx
        .hub
        .publish(HubMessage::new("a.x", "7"))
        .await
        .unwrap();
    s.ctx
        .hub
        .publish(HubMessage::new("b.x", "2"))
        .await
        .unwrap();
    assert_eq!(get(sid.clone()).await, r#"42/n,["b.x",2,"9"]"#);
}

#[tokio::test]
async fn a_replay_too_large_for_the_outbox_is_a_clean_start_not_a_dead_session() {
    const SIO: &str = "/socket.io/";
    let s = Server::start(recovering(10_000, 10_000)).await;
    let get = |sid: String| {
        let s = &s;
        async move { String::from_utf8(s.get(SIO, &sid).await.1).unwrap() }
    };
    let sid = s.open(SIO).await;
    s.post(SIO, &sid, b"40").await;
    let pid = pid_of(&get(sid.clone()).await).expect("a pid with recovery on");
    s.post(SIO, &sid, br#"421["subscribe",["big.x"]]"#).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    get(sid.clone()).await;
    s.post(SIO, &sid, b"1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..=tidegate_push::recovery::MAX_REPLAY {
        s.ctx
            .hub
            .publish(HubMessage::new("big.x", i.to_string()))
            .await
            .unwrap();
    }
    let sid = s.open(SIO).await;
    let ask = format!(r#"40{{"pid":"{pid}","offset":"0"}}"#);
    s.post(SIO, &sid, ask.as_bytes()).await;
    let answer = get(sid.clone()).await;
    assert!(answer.starts_with("40{"), "{answer}");
    assert!(
        pid_of(&answer).is_some_and(|p| p != pid),
        "a new pid: {answer}"
    );
    assert_eq!(s.ctx.recovery.not_recovered(), 1);
    // The session lives on: it can subscribe and receive.
    s.post(SIO, &sid, br#"421["subscribe",["big.y"]]"#).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        get(sid.clone()).await.starts_with("431["),
        "the subscribe ack"
    );
    s.ctx
        .hub
        .publish(HubMessage::new("big.y", "1"))
        .await
        .unwrap();
    assert!(get(sid.clone()).await.starts_with(r#"42["big.y",1,""#));
}

#[tokio::test]
async fn a_reconnect_takes_over_a_session_whose_old_connection_is_not_yet_noticed() {
    const SIO: &str = "/socket.io/";
    let s = Server::start(recovering(10_000, 1024)).await;
    let get = |sid: String| {
        let s = &s;
        async move { String::from_utf8(s.get(SIO, &sid).await.1).unwrap() }
    };
    let old = s.open(SIO).await;
    s.post(SIO, &old, b"40").await;
    let pid = pid_of(&get(old.clone()).await).unwrap();
    s.post(SIO, &old, br#"421["subscribe",["t.>"]]"#).await;
    assert!(get(old.clone()).await.starts_with("431"));
    for i in 1..=2 {
        s.ctx
            .hub
            .publish(HubMessage::new("t.x", i.to_string()))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        get(old.clone()).await,
        "42[\"t.x\",1,\"1\"]\u{1e}42[\"t.x\",2,\"2\"]"
    );
    // The client's network dies: 3 and 4 reach the old session's outbox,
    // never the client; the server has not noticed anything.
    for i in 3..=4 {
        s.ctx
            .hub
            .publish(HubMessage::new("t.x", i.to_string()))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(s.ctx.sessions.get(&old).is_some());

    let new = s.open(SIO).await;
    let ask = format!(r#"40{{"pid":"{pid}","offset":"2"}}"#);
    s.post(SIO, &new, ask.as_bytes()).await;
    let got = get(new.clone()).await;
    let parts: Vec<&str> = got.split('\u{1e}').collect();
    assert_eq!(pid_of(parts[0]).as_deref(), Some(pid.as_str()), "{got}");
    assert_eq!(
        &parts[1..],
        ["42[\"t.x\",3,\"3\"]", "42[\"t.x\",4,\"4\"]"],
        "{got}"
    );
    // The old connection is closed; the new one goes on, no duplicate.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(s.ctx.sessions.get(&old).is_none());
    s.ctx
        .hub
        .publish(HubMessage::new("t.x", "5"))
        .await
        .unwrap();
    assert_eq!(get(new.clone()).await, "42[\"t.x\",5,\"5\"]");
}
