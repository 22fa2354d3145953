//! Read repair on 3 real nodes: a replica that missed a write or a delete
//! while it was down holds the newest version in its own data after one
//! quorum read that saw it stale — no client write needed.

#[path = "kv_util.rs"]
mod kv_util;

use std::time::{Duration, Instant};

use kv_util::*;

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_quorum_read_repairs_a_replica_that_missed_a_write_or_a_delete() {
    let mut nodes = started(3, "");
    let all = "&from=3&ack=3";
    assert_eq!(nodes[0].req("PUT", &entity("del", all), b"v").0, 201);
    nodes[2].kill();
    assert_eq!(
        nodes[0].req("PUT", &entity("new", "&from=3&ack=2"), b"n").0,
        201
    );
    assert_eq!(
        nodes[0]
            .req("DELETE", &entity("del", "&from=3&ack=2"), b"")
            .0,
        202
    );
    nodes[2].start();
    assert!(
        !holds(&nodes[2], "new"),
        "the write reached the stopped node"
    );
    assert!(
        holds(&nodes[2], "del"),
        "the delete reached the stopped node"
    );

    // Reads through a node that is not the stale one.
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
}
