//! The repository's Lua scripts (scripts/kv/put.lua, get.lua) driven by
//! stock `wrk` (scripts/setup/kv.sh installs it) against a real node:
//! every request answered 2xx, and the keys put.lua wrote are there with
//! their 1 KiB values. A short bounded run: this checks the scripts, it
//! measures nothing.

#[path = "kv_util.rs"]
mod kv_util;

use std::process::Command;

use kv_util::*;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/kv");
const THREADS: usize = 2;

fn wrk(node: &Node, script: &str, args: &[&str]) -> String {
    let out = Command::new("wrk")
        .args([
            "-t",
            &THREADS.to_string(),
            "-c",
            "8",
            "-d",
            "2s",
            "--timeout",
            "5s",
            "-s",
        ])
        .arg(format!("{SCRIPTS}/{script}"))
        .arg(format!("http://{}", node.addr))
        .arg("--")
        .args(args)
        .output()
        .expect("wrk is not installed: run scripts/setup/kv.sh");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wrk failed: {text}");
    assert!(!text.contains("Non-2xx"), "errors: {text}");
    assert!(!text.contains("Socket errors"), "socket errors: {text}");
    text
}

fn requests(text: &str) -> u64 {
    text.lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no request count in {text}"))
}

#[test]
fn stock_wrk_runs_the_put_and_get_scripts_without_errors() {
    let mut n = cluster(1, "").pop().unwrap();
    n.start();
    let put = wrk(&n, "put.lua", &[&THREADS.to_string(), "&ack=1&from=1"]);
    assert!(requests(&put) > 0, "{put}");
    let least: usize = put
        .lines()
        .find_map(|l| l.strip_prefix("kv put: requests sent per thread (least) "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no summary line in {put}"));
    // Requests still in flight when wrk stopped may be unanswered: skip
    // the last connection's worth per thread.
    let written = least.saturating_sub(8) * THREADS;
    assert!(written > 10, "{put}");
    for id in [0, written / 2, written - 1] {
        let (status, body) = n.req("GET", &entity(&format!("k{id}"), ""), b"");
        assert_eq!((status, body.len()), (200, 1024), "k{id}");
    }
    let get = wrk(&n, "get.lua", &[&written.to_string()]);
    assert!(requests(&get) > 0, "{get}");
}
