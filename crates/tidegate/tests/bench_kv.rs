//! `tidegate bench kv` as a user runs it, against real `tidegate serve`
//! nodes: a tiny fixed-rate run against a node this test started (the
//! report holds real counts and latencies, and the keys really were
//! written), a run that measured nothing (every GET of a key never written
//! answers 404) exits non-zero instead of printing zeros, and the bench's
//! own cluster, fill, rate search and nginx anchor in one small command.
//! This checks behaviour, never speed.

#[path = "kv_util.rs"]
mod kv_util;

use std::process::Output;

use kv_util::*;
use serde_json::Value;

fn bench_raw(args: &[&str]) -> Output {
    common::bench_output(&[&["kv"], args].concat())
}

fn bench(args: &[&str]) -> Value {
    common::bench_json(&[&["kv"], args].concat())
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{} missing in {v}", path.join(".")))
}

#[test]
fn a_fixed_rate_run_against_a_started_node_reports_what_it_measured() {
    let nodes = started(1, "");
    let target = nodes[0].addr.to_string();
    let common = [
        "--target",
        &target,
        "--rate",
        "400",
        "--connections",
        "4",
        "--duration",
        "1",
        "--warmup",
        "0.3",
        "--timeout-ms",
        "30000",
    ];
    let put = bench(
        &[
            &common[..],
            &["--op", "put", "--value-bytes", "100", "--keys", "100"],
        ]
        .concat(),
    );
    assert_eq!(put["scenario"], "kv", "{put}");
    assert!(put["errors"].as_object().unwrap().is_empty(), "{put}");
    // 400/s over a 1 s window: about 400 due (the schedule, not the
    // server's speed, decides), every one sent in time answered 201.
    let due = f(&put, &["window", "due"]);
    assert!((390.0..=410.0).contains(&due), "{put}");
    assert_eq!(put["window"]["delivered"], put["window"]["sent"], "{put}");
    assert!(f(&put, &["window", "delivered"]) > 0.0, "{put}");
    assert!(f(&put, &["rate"]) > 0.0, "{put}");
    let l = &put["latency_us"];
    assert!(
        f(l, &["p50"]) > 0.0 && f(l, &["max"]) >= f(l, &["p99"]),
        "{put}"
    );
    assert_eq!(put["extra"]["rows"][0]["server"], "kv", "{put}");
    // The first request of each connection (keys k0..k3) is due at the
    // start, so it was sent whatever the machine's load: each key is there
    // with a 100-byte value.
    for k in 0..4 {
        let (status, body) = nodes[0].req("GET", &format!("/v0/entity?id=k{k}"), b"");
        assert_eq!((status, body.len()), (200, 100), "k{k}");
    }

    let get = bench(&[&common[..], &["--op", "get", "--keys", "4"]].concat());
    assert!(get["errors"].as_object().unwrap().is_empty(), "{get}");
    assert!(f(&get, &["window", "delivered"]) > 0.0, "{get}");
    assert_eq!(get["window"]["delivered"], get["window"]["sent"], "{get}");
}

#[test]
fn a_run_that_measured_nothing_fails() {
    let nodes = started(1, "");
    let target = nodes[0].addr.to_string();
    // Nothing was written: every GET answers 404, none is delivered.
    let out = bench_raw(&[
        "--target",
        &target,
        "--op",
        "get",
        "--rate",
        "200",
        "--connections",
        "2",
        "--duration",
        "0.5",
        "--warmup",
        "0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("measured nothing"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).expect("the JSON object is still printed");
    assert!(
        v["errors"]["status_404"].as_u64().is_some_and(|n| n > 0),
        "{v}"
    );
    assert!(v["latency_us"].is_object(), "404s are answers, timed: {v}");

    // No server at all: the bench cannot even connect.
    let dead = free_addr().to_string();
    let out = bench_raw(&["--target", &dead, "--duration", "0.2", "--warmup", "0"]);
    assert!(!out.status.success());
}

#[test]
fn the_bench_starts_its_own_cluster_fills_it_searches_a_rate_and_runs_the_nginx_anchor() {
    let v = bench(&[
        "--nodes",
        "2",
        "--ack",
        "2",
        "--from",
        "2",
        "--op",
        "mixed",
        "--prefill-bytes",
        "100k",
        "--value-bytes",
        "1000",
        "--connections",
        "4",
        "--rate",
        "200",
        "--find-rate",
        "1000",
        "--find-steps",
        "2",
        "--duration",
        "0.5",
        "--warmup",
        "0.2",
        "--timeout-ms",
        "30000",
        "--anchor",
        "nginx",
    ]);
    // 100 kB per node of 1000-byte values, both nodes hold every key.
    assert_eq!(v["extra"]["prefill"]["keys"], 100, "{v}");
    assert_eq!(v["extra"]["prefill"]["written"], 100, "{v}");
    let disk = v["extra"]["disk_bytes_per_node"].as_array().unwrap();
    assert_eq!(disk.len(), 2, "{v}");
    assert!(disk.iter().all(|d| d.as_u64().unwrap() > 0), "{v}");
    // Two search steps per server: 200/s, then 400/s if 200/s kept the p90
    // under the (generous) bound with everything delivered, else 100/s —
    // whichever the machine's load made it, the search followed its rule.
    let rows = v["extra"]["rows"].as_array().unwrap();
    let servers: Vec<&str> = rows.iter().map(|r| r["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["kv", "kv", "nginx", "nginx"], "{v}");
    let bests = [&v["extra"]["best_rate"], &v["extra"]["anchor"]["best_rate"]];
    for (pair, best) in rows.chunks(2).zip(bests) {
        let (first, second) = (&pair[0], &pair[1]);
        assert_eq!(f(first, &["offered_rate"]), 200.0, "{v}");
        let passed = first["within_bound"].as_bool().unwrap();
        let next = if passed { 400.0 } else { 100.0 };
        assert_eq!(f(second, &["offered_rate"]), next, "{v}");
        let best_expected = match (passed, second["within_bound"].as_bool().unwrap()) {
            (_, true) => Some(next as u64),
            (true, false) => Some(200),
            (false, false) => None,
        };
        assert_eq!(best.as_u64(), best_expected, "{v}");
    }
    let anchor = &v["extra"]["anchor"];
    assert!(f(anchor, &["rate"]) > 0.0, "{v}");
    assert!(f(anchor, &["rate_ratio"]) > 0.0, "{v}");
    assert!(
        anchor["server"]["rss_kb_max"]
            .as_u64()
            .is_some_and(|r| r > 0),
        "{v}"
    );
    assert!(
        v["server"]["rss_kb_max"].as_u64().is_some_and(|r| r > 0),
        "{v}"
    );
}

#[test]
fn a_local_cluster_runs_the_server_binary_named_by_the_environment() {
    // `TIDEGATE_BENCH_SERVER` names the server build a same-command
    // comparison runs; `--nodes` once ignored it and ran this binary.
    let missing = "/nonexistent/tidegate-under-test";
    let out = std::process::Command::new(common::EXE)
        .args([
            "bench",
            "kv",
            "--nodes",
            "1",
            "--duration",
            "0.2",
            "--warmup",
            "0",
        ])
        .env("TIDEGATE_BENCH_SERVER", missing)
        .output()
        .expect("run tidegate bench");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("starting `tidegate serve`"), "{stderr}");
}
