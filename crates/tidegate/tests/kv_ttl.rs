//! TTL on PUT (`ttl_ms`) on real nodes: the value reads as 200 until its
//! expiry and 404 after it, on every node; every replica stores the same
//! expiry (it travels in the record); the range stream skips it; it is
//! purged like a tombstone once the grace period after its expiry is over;
//! a later PUT without `ttl_ms` never expires; bad `ttl_ms` values are 400.

#[path = "kv_util.rs"]
mod kv_util;

use std::time::{Duration, Instant};

use kv_util::*;

fn record(node: &Node, key: &str) -> Option<tidegate_kv::Record> {
    match internal(node, SECRET, "GET", key, b"") {
        (200, body) => Some(tidegate_kv::Record::decode(body.into()).unwrap()),
        (404, _) => None,
        (status, _) => panic!("internal GET answered {status}"),
    }
}

#[test]
fn a_ttl_value_expires_on_every_replica_and_is_purged_after_the_grace_period() {
    let ttl = Duration::from_millis(3000);
    let nodes = started(
        3,
        "anti_entropy_interval_ms = 300\ntombstone_grace_ms = 1000\n",
    );
    let written = Instant::now();
    let path = entity("t", &format!("&ttl_ms={}&ack=3", ttl.as_millis()));
    assert_eq!(nodes[0].req("PUT", &path, b"short-lived").0, 201);
    assert_eq!(
        nodes[0].req("PUT", &entity("keep", "&ack=3"), b"forever").0,
        201
    );
    for n in &nodes {
        assert_eq!(
            n.req("GET", &entity("t", "&ack=3"), b""),
            (200, b"short-lived".to_vec())
        );
    }
    assert!(
        written.elapsed() < ttl,
        "too slow to see the value before its expiry"
    );
    // Every replica stores the same expiry, the stamp plus the TTL.
    let first = record(&nodes[0], "t").unwrap();
    assert_eq!(first.expires_at - first.timestamp, ttl.as_nanos() as u64);
    assert_eq!(first.replicas, 3);
    for n in &nodes[1..] {
        assert_eq!(record(n, "t").unwrap(), first);
    }

    std::thread::sleep(ttl.saturating_sub(written.elapsed()) + Duration::from_millis(100));
    for n in &nodes {
        assert_eq!(
            n.req("GET", &entity("t", "&ack=3"), b"").0,
            404,
            "expired on {}",
            n.addr
        );
        assert_eq!(n.req("GET", &entity("t", "&from=1&ack=1"), b"").0, 404);
        assert!(!holds(n, "t"), "the range stream shows an expired value");
        assert!(holds(n, "keep"));
    }
    // Purged everywhere once the grace period after the expiry is over
    // (kept until then, like a tombstone, so an older version elsewhere
    // cannot come back).
    let deadline = Instant::now() + Duration::from_secs(15);
    while nodes.iter().any(|n| record(n, "t").is_some()) {
        assert!(
            Instant::now() < deadline,
            "the expired value was never purged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for n in &nodes {
        assert_eq!(
            n.req("GET", &entity("keep", ""), b""),
            (200, b"forever".to_vec())
        );
    }
    // Written again without a TTL: it stays.
    assert_eq!(nodes[1].req("PUT", &entity("t", "&ack=3"), b"again").0, 201);
    assert_eq!(record(&nodes[2], "t").unwrap().expires_at, 0);
    assert_eq!(
        nodes[2].req("GET", &entity("t", ""), b""),
        (200, b"again".to_vec())
    );
}

#[test]
fn overwriting_a_ttl_value_without_ttl_keeps_it_and_bad_ttls_are_400() {
    let mut n = cluster(1, "").pop().unwrap();
    n.start();
    assert_eq!(n.req("PUT", &entity("k", "&ttl_ms=400"), b"a").0, 201);
    assert_eq!(n.req("PUT", &entity("k", ""), b"b").0, 201);
    assert_eq!(n.req("PUT", &entity("gone", "&ttl_ms=400"), b"x").0, 201);
    assert_eq!(n.req("GET", &entity("gone", ""), b""), (200, b"x".to_vec()));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(n.req("GET", &entity("k", ""), b""), (200, b"b".to_vec()));
    assert_eq!(n.req("GET", &entity("gone", ""), b"").0, 404);
    for bad in ["0", "x", "-5", "", "1.5"] {
        let (status, _) = n.req("PUT", &entity("k", &format!("&ttl_ms={bad}")), b"v");
        assert_eq!(status, 400, "ttl_ms={bad}");
    }
    assert_eq!(n.req("GET", &entity("k", ""), b""), (200, b"b".to_vec()));
}
