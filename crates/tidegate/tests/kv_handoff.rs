//! Hinted handoff on 2 real nodes: writes and deletes a replica missed
//! while it was down reach it once it is back — with no client read (the
//! check looks at the replica's own data) and even when the coordinator
//! itself restarted in between (hints are on its disk); a hint the replica
//! refuses is dropped without holding back the ones after it.

#[path = "kv_util.rs"]
mod kv_util;

use std::time::{Duration, Instant};

use kv_util::*;

/// Anti-entropy off, so only the mechanism under test can fix a replica.
const NO_ANTI_ENTROPY: &str = "anti_entropy_interval_ms = 0\n";

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_replica_gets_the_writes_it_missed_when_it_comes_back() {
    let mut nodes = started(2, NO_ANTI_ENTROPY);
    let one = "&from=2&ack=1";
    assert_eq!(
        nodes[0].req("PUT", &entity("del", "&from=2&ack=2"), b"v").0,
        201
    );
    nodes[1].kill();
    for i in 0..5 {
        assert_eq!(
            nodes[0].req("PUT", &entity(&format!("h{i}"), one), b"x").0,
            201
        );
    }
    assert_eq!(nodes[0].req("DELETE", &entity("del", one), b"").0, 202);
    // The coordinator restarts: its hints are on disk.
    nodes[0].stop();
    nodes[0].start();
    nodes[1].start();
    for i in 0..5 {
        eventually(&format!("h{i} not handed off"), || {
            holds(&nodes[1], &format!("h{i}"))
        });
    }
    eventually("the delete not handed off", || !holds(&nodes[1], "del"));
    eventually("hints still pending", || {
        metric(&nodes[0], "tidegate_kv_hints_pending") == 0.0
    });
    assert_eq!(metric(&nodes[0], "tidegate_kv_hints_delivered_total"), 6.0);
}

#[test]
fn a_copy_still_in_flight_when_the_coordinator_stops_leaves_a_hint() {
    let mut nodes = cluster(2, NO_ANTI_ENTROPY);
    // Node 1's address answers nothing: node 0's copy for it waits out
    // the replica timeout (1 s) after the client was answered from node
    // 0's own copy.
    let silent = SilentPeer::bind(nodes[1].addr);
    nodes[0].start();
    assert_eq!(
        nodes[0]
            .req("PUT", &entity("late", "&from=2&ack=1"), b"v")
            .0,
        201
    );
    // Stopped at once, with the copy still in flight: only a shutdown that
    // waits for it keeps the hint.
    nodes[0].stop();
    drop(silent);
    nodes[1].start();
    assert!(!holds(&nodes[1], "late"), "the unread copy arrived anyway");
    nodes[0].start();
    eventually(
        "the copy in flight at shutdown never reached node 1",
        || holds(&nodes[1], "late"),
    );
}

#[test]
fn a_hint_its_replica_refuses_is_dropped_and_the_later_ones_still_arrive() {
    let mut nodes = cluster(2, NO_ANTI_ENTROPY);
    // Node 1 takes far smaller bodies than node 0: a value node 0 accepts
    // can be over what node 1 takes in a node-to-node request (its limit
    // plus the framing allowance, ~4.3 MiB), so node 1 answers it 413.
    nodes[1].http = "max_body_bytes = 65536".into();
    nodes.iter_mut().for_each(Node::start);
    nodes[1].kill();
    let one = "&from=2&ack=1";
    let big = vec![b'b'; 6 << 20];
    // The refused hints come first in key order.
    for i in 1..=3 {
        assert_eq!(
            nodes[0].req("PUT", &entity(&format!("a{i}"), one), &big).0,
            201
        );
    }
    for i in 1..=5 {
        assert_eq!(
            nodes[0].req("PUT", &entity(&format!("z{i}"), one), b"z").0,
            201
        );
    }
    // The failed copies become hints in the background.
    eventually("hints not kept", || {
        metric(&nodes[0], "tidegate_kv_hints_pending") == 8.0
    });
    nodes[1].start();
    for i in 1..=5 {
        eventually(&format!("z{i} held back behind a refused hint"), || {
            holds(&nodes[1], &format!("z{i}"))
        });
    }
    eventually("hints still pending", || {
        metric(&nodes[0], "tidegate_kv_hints_pending") == 0.0
    });
    assert_eq!(metric(&nodes[0], "tidegate_kv_hints_delivered_total"), 5.0);
    assert_eq!(metric(&nodes[0], "tidegate_kv_hints_refused_total"), 3.0);
    assert_eq!(metric(&nodes[0], "tidegate_kv_hints_dropped_total"), 0.0);
    assert!(!holds(&nodes[1], "a1"));
}
