//! Read repair on 3 real nodes: a replica that missed a write or a delete
//! holds the newest version in its own data after one quorum read that saw
//! it stale — no client write and no hint needed.

#[path = "kv_util.rs"]
mod kv_util;

use std::time::{Duration, Instant};

use kv_util::*;

/// Anti-entropy off, so only the mechanism under test can fix a replica.
const NO_ANTI_ENTROPY: &str = "anti_entropy_interval_ms = 0\n";

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_quorum_read_repairs_a_replica_that_missed_a_write_or_a_delete() {
    let nodes = started(3, NO_ANTI_ENTROPY);
    // Stale states planted with signed internal writes (no hints exist for
    // them, so only read repair can fix node 2): "new" is on nodes 0 and 1
    // only; "del" is deleted on 0 and 1 and an older value on 2.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let value = tidegate_kv::Record::value(now, "n".into()).encode();
    let old = tidegate_kv::Record::value(now - 1_000, "old".into()).encode();
    let tombstone = tidegate_kv::Record::tombstone(now).encode();
    for n in &nodes[..2] {
        assert_eq!(internal(n, SECRET, "PUT", "new", &value).0, 201);
        assert_eq!(internal(n, SECRET, "PUT", "del", &tombstone).0, 201);
    }
    assert_eq!(internal(&nodes[2], SECRET, "PUT", "del", &old).0, 201);
    assert!(!holds(&nodes[2], "new"));
    assert!(holds(&nodes[2], "del"));

    let all = "&from=3&ack=3";
    assert_eq!(
        nodes[1].req("GET", &entity("new", all), b""),
        (200, b"n".to_vec())
    );
    assert_eq!(nodes[1].req("GET", &entity("del", all), b"").0, 404);
    eventually("missed write not repaired", || holds(&nodes[2], "new"));
    eventually("missed delete not repaired", || !holds(&nodes[2], "del"));
    assert!(metric(&nodes[1], "tidegate_kv_read_repairs_total") >= 2.0);
    let (status, record) = internal(&nodes[2], SECRET, "GET", "del", b"");
    assert_eq!(status, 200);
    assert!(
        tidegate_kv::Record::decode(record.into())
            .unwrap()
            .tombstone
    );
    // Repaired by the read alone: no hint was stored anywhere.
    assert_eq!(metric(&nodes[2], "tidegate_kv_hints_stored_total"), 0.0);
}

#[test]
fn a_read_with_a_larger_from_does_not_copy_a_key_beyond_its_own_from() {
    let nodes = started(3, NO_ANTI_ENTROPY);
    assert_eq!(
        nodes[0]
            .req("PUT", &entity("single", "&from=1&ack=1"), b"1")
            .0,
        201
    );
    let owner = nodes.iter().position(|n| holds(n, "single")).unwrap();
    // A read over all three: two of them answer "absent", which is not
    // stale for a key written to one replica.
    for n in &nodes {
        assert_eq!(
            n.req("GET", &entity("single", "&from=3&ack=3"), b""),
            (200, b"1".to_vec())
        );
    }
    std::thread::sleep(Duration::from_millis(500)); // repairs run in the background
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(holds(n, "single"), i == owner, "node {i}");
    }
    // A replica holding an older version is still repaired.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let other = (owner + 1) % 3;
    let old = tidegate_kv::Record::value(now - 1_000_000_000_000, "old".into()).with_replicas(3);
    assert_eq!(
        internal(&nodes[other], SECRET, "PUT", "single", &old.encode()).0,
        201
    );
    assert_eq!(
        nodes[other].req("GET", &entity("single", "&from=3&ack=3"), b""),
        (200, b"1".to_vec())
    );
    eventually("the stale replica was not repaired", || {
        let (status, body) = internal(&nodes[other], SECRET, "GET", "single", b"");
        status == 200 && tidegate_kv::Record::decode(body.into()).unwrap().value == "1"
    });
}
