//! Replication across 2 and 3 real `tidegate serve` nodes: writes, deletes
//! and overwrites missed by a stopped node are seen through quorum reads
//! once it is back; too few replicas give a 504 within
//! `replica_timeout_ms`; `from=F` stores exactly F copies; a non-owner
//! never answers from its own data; internal writes need the cluster's
//! signature.

#[path = "kv_util.rs"]
mod kv_util;

use std::time::{Duration, Instant};

use kv_util::*;

fn get(n: &Node, key: &str, q: &str) -> (u16, Vec<u8>) {
    n.req("GET", &entity(key, q), b"")
}

#[test]
fn two_nodes_see_missed_writes_deletes_overwrites_and_recreates() {
    let mut nodes = started(2, "");
    let (q1, q2) = ("&from=2&ack=1", "&from=2&ack=2");
    for k in 0..4 {
        let key = format!("key{k}");
        // missed write
        nodes[1].stop();
        assert_eq!(nodes[0].req("PUT", &entity(&key, q1), b"v1").0, 201);
        // (a 504 write may still land on the replicas that answered, as in
        // Dynamo and Cassandra: probe with another key)
        assert_eq!(
            nodes[0].req("PUT", &entity("probe", q2), b"x").0,
            504,
            "B is down"
        );
        nodes[1].start();
        assert_eq!(
            get(&nodes[1], &key, q2),
            (200, b"v1".to_vec()),
            "missed write"
        );
        // missed delete: the tombstone wins over B's value
        nodes[1].stop();
        assert_eq!(nodes[0].req("DELETE", &entity(&key, q1), b"").0, 202);
        nodes[1].start();
        assert_eq!(get(&nodes[1], &key, q2).0, 404, "missed delete");
        // recreate after delete, both up
        assert_eq!(nodes[1].req("PUT", &entity(&key, q2), b"v2").0, 201);
        assert_eq!(get(&nodes[0], &key, q2), (200, b"v2".to_vec()), "recreate");
        // missed overwrite
        nodes[0].stop();
        assert_eq!(nodes[1].req("PUT", &entity(&key, q1), b"v3").0, 201);
        nodes[0].start();
        assert_eq!(
            get(&nodes[0], &key, q2),
            (200, b"v3".to_vec()),
            "missed overwrite"
        );
        // PUT 1/2 through A, a later PUT 1/2 through B wins everywhere
        assert_eq!(nodes[0].req("PUT", &entity(&key, q1), b"a").0, 201);
        assert_eq!(nodes[1].req("PUT", &entity(&key, q1), b"b").0, 201);
        for n in &nodes {
            assert_eq!(get(n, &key, q2), (200, b"b".to_vec()));
        }
    }
}

#[test]
fn three_nodes_with_one_down_keep_quorum_and_converge() {
    let mut nodes = started(3, "");
    let q = "&from=3&ack=2";
    for down in 0..3 {
        let key = format!("k{down}");
        let up: Vec<usize> = (0..3).filter(|&i| i != down).collect();
        assert_eq!(nodes[up[0]].req("PUT", &entity(&key, q), b"old").0, 201);
        nodes[down].kill();
        assert_eq!(nodes[up[0]].req("PUT", &entity(&key, q), b"new").0, 201);
        assert_eq!(nodes[up[1]].req("DELETE", &entity("gone", q), b"").0, 202);
        assert_eq!(get(&nodes[up[1]], &key, q), (200, b"new".to_vec()));
        assert_eq!(
            nodes[up[0]]
                .req("PUT", &entity("probe", "&from=3&ack=3"), b"x")
                .0,
            504
        );
        nodes[down].start();
        // Every coordinator, the restarted one included, returns the newest.
        for n in &nodes {
            assert_eq!(get(n, &key, "&from=3&ack=3"), (200, b"new".to_vec()));
        }
        // Reads with the node that missed the write among a quorum of two.
        for n in &nodes {
            assert_eq!(get(n, &key, q), (200, b"new".to_vec()));
        }
    }
}

#[test]
fn unreachable_replicas_give_504_within_the_timeout() {
    // The third "node" accepts connections and never answers.
    let silent = SilentPeer::bind("127.0.0.1:0".parse().unwrap());
    let silent_url = format!("\"http://{}\"", silent.addr);
    let mut nodes = cluster(2, "replica_timeout_ms = 300\n");
    for n in &mut nodes {
        n.config = n
            .config
            .replacen("nodes = [", &format!("nodes = [{silent_url}, "), 1);
        n.start();
    }
    for i in 0..6 {
        let key = format!("t{i}");
        let t = Instant::now();
        let (status, _) = nodes[0].req("PUT", &entity(&key, "&from=3&ack=3"), b"v");
        let took = t.elapsed();
        assert_eq!(status, 504);
        assert!(
            took >= Duration::from_millis(250),
            "504 before the timeout: {took:?}"
        );
        assert!(took < Duration::from_millis(1500), "504 too late: {took:?}");
        let t = Instant::now();
        assert_eq!(get(&nodes[1], &key, "&from=3&ack=3").0, 504);
        assert!(t.elapsed() < Duration::from_millis(1500));
        // ack below the reachable replicas succeeds.
        assert_eq!(
            nodes[0].req("PUT", &entity(&key, "&from=3&ack=2"), b"v").0,
            201
        );
        assert_eq!(get(&nodes[1], &key, "&from=3&ack=2"), (200, b"v".to_vec()));
    }
    assert!(metric(&nodes[0], "tidegate_kv_not_enough_replicas_total") >= 6.0);
    // Both real nodes down: fast 504 on the last one standing.
    nodes[1].kill();
    let t = Instant::now();
    assert_eq!(
        nodes[0].req("PUT", &entity("z", "&from=3&ack=2"), b"v").0,
        504
    );
    assert!(t.elapsed() < Duration::from_millis(1500));
    drop(nodes);
    drop(silent);
}

#[test]
fn a_put_with_from_f_stores_exactly_f_copies() {
    let nodes = started(3, "");
    for f in 1..=3 {
        for k in 0..10 {
            let key = format!("f{f}k{k}");
            let coordinator = &nodes[k % 3];
            assert_eq!(
                coordinator
                    .req("PUT", &entity(&key, &format!("&from={f}&ack={f}")), b"v")
                    .0,
                201
            );
            let copies = nodes.iter().filter(|n| holds(n, &key)).count();
            assert_eq!(copies, f, "{key}: {copies} copies for from={f}");
            for n in &nodes {
                assert_eq!(get(n, &key, &format!("&from={f}&ack={f}")).0, 200);
            }
        }
    }
}

#[test]
fn a_non_owner_never_answers_from_its_own_data() {
    let nodes = started(3, "");
    for k in 0..10 {
        let key = format!("own{k}");
        assert_eq!(
            nodes[0].req("PUT", &entity(&key, "&from=3&ack=3"), b"v").0,
            201
        );
        // Only the owner learns of the delete.
        assert_eq!(
            nodes[1]
                .req("DELETE", &entity(&key, "&from=1&ack=1"), b"")
                .0,
            202
        );
        let stale = nodes.iter().filter(|n| holds(n, &key)).count();
        assert_eq!(stale, 2, "the two non-owners still hold the old value");
        for n in &nodes {
            assert_eq!(
                get(n, &key, "&from=1&ack=1").0,
                404,
                "answered from stale data"
            );
        }
    }
}

#[test]
fn forged_or_unsigned_internal_writes_are_refused() {
    let nodes = started(2, "");
    assert_eq!(nodes[0].req("PUT", &entity("victim", ""), b"good").0, 201);
    let forged = tidegate_kv::Record::value(u64::MAX, "evil".into()).encode();
    for n in &nodes {
        assert_eq!(internal(n, "wrong-secret", "PUT", "victim", &forged).0, 403);
        assert_eq!(
            n.req(
                "PUT",
                &format!("{}?id=victim", tidegate_kv::client::INTERNAL_PATH),
                &forged
            )
            .0,
            403,
            "unsigned"
        );
        assert_eq!(internal(n, "wrong-secret", "GET", "victim", b"").0, 403);
    }
    for n in &nodes {
        assert_eq!(get(n, "victim", ""), (200, b"good".to_vec()));
    }
    // Signed with the secret but for the other node (a captured request
    // replayed elsewhere): refused.
    assert_eq!(
        internal_signed_for(&nodes[0], nodes[1].addr, SECRET, "PUT", "victim", &forged).0,
        403
    );
    // The same request with the cluster's secret is what a coordinator sends.
    assert_eq!(internal(&nodes[0], SECRET, "PUT", "victim", &forged).0, 201);
    assert_eq!(
        get(&nodes[0], "victim", "&from=2&ack=2"),
        (200, b"evil".to_vec())
    );
}

/// A client body of up to `[http] max_body_bytes` is accepted, so it must
/// reach every replica: a replica batch carries it with its key and
/// framing (over the limit by a few bytes), and with a small limit a batch
/// of many small writes is larger than any one body.
#[test]
fn bodies_up_to_max_body_bytes_replicate_and_batches_are_not_refused_by_the_limit() {
    let mut nodes = cluster(3, "");
    for n in &mut nodes {
        n.http = "max_body_bytes = 65536".into();
        n.start();
    }
    let full = vec![b'x'; 65536];
    assert_eq!(
        nodes[0]
            .req("PUT", &entity("full", "&ack=3&from=3"), &full)
            .0,
        201
    );
    for n in &nodes {
        assert!(holds(n, "full"), "a replica lacks the full-size value");
    }
    // Many concurrent 1 KiB writes: batches of them exceed 64 KiB.
    let addr = nodes[0].addr;
    let writers: Vec<_> = (0..16)
        .map(|t| {
            std::thread::spawn(move || {
                let mut refused = Vec::new();
                for i in 0..100 {
                    let path = entity(&format!("w{t}-{i}"), "&ack=3&from=3");
                    let (status, _) = request(addr, "PUT", &path, &[b'v'; 1024]);
                    if status != 201 {
                        refused.push(status);
                    }
                }
                refused
            })
        })
        .collect();
    for w in writers {
        let refused = w.join().unwrap();
        assert!(refused.is_empty(), "PUTs answered {refused:?}");
    }
}
