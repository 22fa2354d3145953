//! `tidegate bench push` as a user runs it, with tiny parameters: it
//! starts its own `tidegate serve`, connects the users, makes the
//! subscribe storm, publishes stamped messages and counts what every
//! subscriber received — over polling, websocket and `/ws`, beside the
//! npm socket.io anchor (installed by `scripts/setup/push-bench.sh`), and
//! in the idle-session memory mode. These check behaviour, never speed.

mod common;

use serde_json::Value;

fn bench_push(args: &[&str]) -> Value {
    common::bench_json(&[&["push"], args].concat())
}

/// 6 users x 5 of 12 topics, 2 passes: every user receives 10 messages.
const SMALL: [&str; 12] = [
    "--users",
    "6",
    "--subs",
    "5",
    "--topics",
    "12",
    "--messages",
    "10",
    "--publish-rate",
    "2000",
    "--drain-ms",
    "5000",
];

/// Every message every user subscribed to arrived, with a latency.
fn check_delivered(r: &Value) {
    assert_eq!(r["sessions"], 6, "{r}");
    assert_eq!(r["expected"], 60, "{r}");
    assert_eq!(r["delivered"], 60, "{r}");
    assert_eq!(r["published"], 24, "{r}");
    assert!(r["msgs_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["subscribe_s"].as_f64().unwrap() > 0.0, "{r}");
    let l = &r["latency_us"];
    assert!(l["p999"].as_f64().unwrap() > 0.0, "{r}");
    assert!(
        l["max"].as_f64().unwrap() >= l["p50"].as_f64().unwrap(),
        "{r}"
    );
    assert!(r["errors"].as_object().unwrap().is_empty(), "{r}");
}

fn run(transport: &str) -> Value {
    let mut args = SMALL.to_vec();
    args.extend(["--transport", transport]);
    let v = bench_push(&args);
    assert_eq!(v["scenario"], "push", "{v}");
    assert_eq!(v["window"]["delivered"], 60, "{v}");
    assert!(v["server"]["rss_kb_max"].as_u64().unwrap() > 0, "{v}");
    check_delivered(&v["extra"]);
    v
}

#[test]
fn bench_push_delivers_every_message_over_polling() {
    run("polling");
}

#[test]
fn bench_push_delivers_every_message_over_websocket() {
    run("websocket");
}

#[test]
fn bench_push_delivers_every_message_over_plain_ws() {
    run("ws");
}

#[test]
fn bench_push_runs_the_same_load_against_the_npm_socketio_server() {
    let mut args = SMALL.to_vec();
    args.extend(["--transport", "websocket", "--anchor", "socketio"]);
    let v = bench_push(&args);
    check_delivered(&v["extra"]);
    let a = &v["extra"]["anchor"]["result"];
    check_delivered(a);
    assert!(a["server"]["rss_kb_max"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["extra"]["ratio_vs_anchor"]["msgs_per_s"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{v}"
    );
}

#[test]
fn bench_push_measures_memory_per_idle_session() {
    let v = bench_push(&["--idle-sessions", "50", "--transport", "websocket"]);
    assert_eq!(v["unit"], "session", "{v}");
    assert_eq!(v["extra"]["held"], 50, "{v}");
    assert_eq!(v["extra"]["failed"], 0, "{v}");
    let after = v["extra"]["rss_after_kb"].as_u64().unwrap();
    let before = v["extra"]["rss_before_kb"].as_u64().unwrap();
    assert!(before > 0 && after > 0, "{v}");
}
