//! Driving the stock Fluency client (`FluencySender.java`, run in Java's
//! single-file source mode) and counting what of its run reached Kafka.
//! Include with `#[path = "common/fluency.rs"] mod fluency;`.

#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::message::{Message as _, OwnedMessage};
use serde_json::Value;
use tidegate_kafka::testing::{fluency_classpath, java_dir, read_topic, record_count};

/// Starts Fluency sending `count` records `{"run", "seq", "msg"}` with tag
/// `tag` to `addr` at `rate` records/s (0: as fast as it can), PackedForward
/// with ack. It exits 0 only once every chunk was acknowledged.
pub fn fluency(addr: SocketAddr, tag: &str, count: u64, rate: u64, run: &str) -> Child {
    let cp = fluency_classpath().expect("fluency classpath (run scripts/setup/kafka.sh)");
    Command::new("java")
        .arg("-cp")
        .arg(cp)
        .arg(java_dir().join("fluency").join("FluencySender.java"))
        .args([
            addr.ip().to_string(),
            addr.port().to_string(),
            tag.to_owned(),
            count.to_string(),
            rate.to_string(),
            run.to_owned(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run java (run scripts/setup/kafka.sh)")
}

/// Waits (at most `limit`) for Fluency to exit having had every chunk
/// acknowledged; panics with its output otherwise.
pub async fn fluency_done(child: Child, limit: Duration) {
    let pid = child.id();
    let waited = tokio::time::timeout(
        limit,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(out) = waited else {
        // Do not leave the JVM behind.
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("fluency did not finish within {limit:?}");
    };
    let out = out.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: String = stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success() && stdout.contains("SENT"),
        "fluency failed: {}\n{stdout}\n{tail}",
        out.status
    );
}

/// Every record in `topic` (at least `min`, waiting up to `limit` for them).
pub async fn read_back(
    bootstrap: &str,
    topic: &str,
    min: usize,
    limit: Duration,
) -> Vec<OwnedMessage> {
    let (b, t) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + limit;
        let mut n = 0;
        while Instant::now() < deadline {
            n = record_count(&b, &t).unwrap_or(0) as usize;
            if n >= min {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        read_topic(
            &b,
            &t,
            n.max(min),
            deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(10),
        )
    })
    .await
    .unwrap()
    .expect("read the topic back")
}

/// How many times each `seq` of run `run` occurs in `records`.
pub fn seq_counts(records: &[OwnedMessage], run: &str) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for r in records {
        let v: Value =
            serde_json::from_slice(r.payload().expect("a payload")).expect("a JSON payload");
        if v["run"] == run {
            *out.entry(v["seq"].as_u64().expect("seq")).or_default() += 1;
        }
    }
    out
}

/// The `seq`s in `0..n` that `counts` lacks.
pub fn missing_seqs(counts: &BTreeMap<u64, usize>, n: u64) -> Vec<u64> {
    (0..n).filter(|s| !counts.contains_key(s)).collect()
}
