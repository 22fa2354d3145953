//! The `python-socketio` client (PyPI, installed by scripts/setup/push.sh)
//! over polling, websocket and the default polling → websocket upgrade:
//! connect with auth, subscribe, publish with an ack, receive the event
//! named after the topic.

mod common;

use std::process::Command;

use common::Server;
use tidegate_push::PushConfig;

const SCRIPT: &str = r#"
import json, sys, threading, socketio
url, transports = sys.argv[1], sys.argv[2].split(",")
sio = socketio.Client(reconnection=False)
got, ev = [], threading.Event()
@sio.on("*")
def any_event(event, data):
    got.append([event, data]); ev.set()
sio.connect(url, transports=transports, auth={"token": "py"}, wait_timeout=5)
sub = sio.call("subscribe", ["py.>", "bad..x"], timeout=5)
assert sub["accepted"] == ["py.>"], sub
assert sub["refused"][0]["pattern"] == "bad..x", sub
ack = sio.call("publish", ("py.a", {"n": 7}), timeout=5)
assert ack == {"ok": True}, ack
assert ev.wait(5), "no event"
print(json.dumps({"got": got, "transport": sio.transport()}))
sio.disconnect()
"#;

async fn run(url: String, transports: &str) -> serde_json::Value {
    let transports = transports.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
            .args(["-c", SCRIPT, &url, &transports])
            .output()
            .expect("running python3 (bash scripts/setup/push.sh installs python-socketio)")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "python-socketio failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_str(&line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_socketio_client_subscribes_publishes_and_receives() {
    let s = Server::start(PushConfig::default()).await;
    for (transports, want) in [
        ("polling", "polling"),
        ("websocket", "websocket"),
        ("polling,websocket", "websocket"),
    ] {
        let v = run(s.url(), transports).await;
        assert_eq!(
            v["got"],
            serde_json::json!([["py.a", {"n": 7}]]),
            "{transports}"
        );
        assert_eq!(v["transport"], want, "{transports}");
    }
}
