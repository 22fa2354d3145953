//! `tidegate bench <scenario>` as a user runs it: each scenario, with small
//! parameters, starts its own `tidegate serve` child, drives it, and prints
//! the common JSON object with real figures (this checks behaviour, never
//! speed).

mod common;

use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    common::bench_json(args)
}

/// The keys every scenario's object carries, with figures from a real run.
fn check_common(v: &Value, scenario: &str) {
    assert_eq!(v["scenario"], scenario, "{v}");
    assert!(v["params"].is_object(), "{v}");
    for k in ["sent", "received", "duration_s", "rate"] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {v}");
    }
    assert!(v["errors"].is_object(), "{v}");
    for k in [
        "mean", "p50", "p90", "p99", "p999", "p9999", "p99999", "max",
    ] {
        assert!(
            v["latency_us"][k].as_f64().is_some(),
            "latency_us.{k} in {v}"
        );
    }
    assert!(
        v["latency_us"]["max"].as_f64().unwrap() >= v["latency_us"]["p50"].as_f64().unwrap(),
        "{v}"
    );
    // The spawned server was sampled from /proc.
    assert!(
        v["server"]["rss_kb_max"].as_u64().is_some_and(|r| r > 0),
        "{v}"
    );
    assert!(v["server"]["cpu_pct_avg"].as_f64().is_some(), "{v}");
}

#[test]
fn bench_echo_reports_round_trips_from_a_spawned_server() {
    let v = bench(&[
        "echo",
        "--rate",
        "20000",
        "--messages",
        "40000",
        "--warmup",
        "50",
    ]);
    check_common(&v, "echo");
    assert_eq!(v["sent"], 40000, "{v}");
}

#[test]
fn bench_forward_reports_acked_records_from_a_spawned_server() {
    let v = bench(&["forward", "--rate", "20000", "--duration", "2", "--ack"]);
    check_common(&v, "forward");
    assert!(v["errors"].as_object().unwrap().is_empty(), "{v}");
}

#[test]
fn bench_s2s_reports_transactions_from_a_spawned_server() {
    let v = bench(&[
        "s2s",
        "--clients",
        "20",
        "--tx",
        "5",
        "--packets",
        "5",
        "--interval-ms",
        "20",
    ]);
    check_common(&v, "s2s");
    assert!(v["errors"].as_object().unwrap().is_empty(), "{v}");
}
