//! Anti-entropy on 3 real nodes: a node whose data directory was wiped
//! gets back every key it replicates from the others' hash trees — with no
//! client read anywhere (checked in its own data through the local-only
//! range endpoint, and with every node's read-repair counter at 0) — and
//! keys written with a smaller `from` keep exactly that many copies. Also
//! the interplay with the tombstone purge: anti-entropy carries a
//! tombstone to a replica still holding the old value within the grace
//! period, and once every copy is purged the value does not come back.

#[path = "kv_util.rs"]
mod kv_util;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kv_util::*;

fn eventually(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The live keys with `prefix` in `node`'s own data (one chunk
/// `key\nvalue` per entry).
fn local_keys(node: &Node, prefix: &str) -> BTreeSet<String> {
    let raw = raw_get(
        node.addr,
        &format!("/v0/entities?start={prefix}&end={prefix}~"),
    );
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    chunks(&raw[split + 4..])
        .expect("a chunked body")
        .iter()
        .map(|c| {
            let key = c.split(|&b| b == b'\n').next().unwrap();
            String::from_utf8(key.to_vec()).unwrap()
        })
        .collect()
}

/// How many nodes hold `key` in their own data.
fn copies(nodes: &[Node], key: &str) -> usize {
    nodes.iter().filter(|n| holds(n, key)).count()
}

#[test]
fn a_wiped_replica_converges_without_any_client_read() {
    const N: usize = 300;
    let mut nodes = started(3, "anti_entropy_interval_ms = 500\n");
    for i in 0..N {
        let node = &nodes[i % 3];
        let (status, _) = node.req(
            "PUT",
            &entity(&format!("ae{i:04}"), ""),
            format!("value-{i}").as_bytes(),
        );
        assert_eq!(status, 201);
    }
    for i in 0..30 {
        let node = &nodes[i % 3];
        assert_eq!(
            node.req("PUT", &entity(&format!("one{i:02}"), "&from=1&ack=1"), b"1")
                .0,
            201
        );
        assert_eq!(
            node.req("PUT", &entity(&format!("two{i:02}"), "&from=2&ack=2"), b"2")
                .0,
            201
        );
    }
    let (status, _) = nodes[0].req("PUT", &entity("ttl", "&ttl_ms=600000&ack=3"), b"t");
    assert_eq!(status, 201);
    // Every replica took the writes (ack=2 answers before the third).
    eventually(
        "node 2 never held every key",
        Duration::from_secs(10),
        || local_keys(&nodes[2], "ae").len() == N,
    );
    let before: Vec<usize> = (0..30)
        .map(|i| copies(&nodes, &format!("two{i:02}")))
        .collect();
    assert!(before.iter().all(|&c| c == 2), "{before:?}");
    let ones_on_2 = local_keys(&nodes[2], "one");

    // Node 2 loses its disk.
    nodes[2].stop();
    std::fs::remove_dir_all(nodes[2].data_dir()).unwrap();
    nodes[2].start();

    eventually(
        "the wiped node did not get its keys back",
        Duration::from_secs(30),
        || local_keys(&nodes[2], "ae").len() == N,
    );
    let (_, mine) = nodes[2].req("GET", "/v0/entities?start=ae&end=af", b"");
    let (_, theirs) = nodes[0].req("GET", "/v0/entities?start=ae&end=af", b"");
    assert_eq!(
        mine, theirs,
        "same keys and values as a node that never left"
    );

    // A TTL value comes back with its expiry.
    let record = |n: &Node| {
        let (status, body) = internal(n, SECRET, "GET", "ttl", b"");
        assert_eq!(status, 200);
        tidegate_kv::Record::decode(body.into()).unwrap()
    };
    eventually(
        "the TTL value did not come back",
        Duration::from_secs(10),
        || internal(&nodes[2], SECRET, "GET", "ttl", b"").0 == 200,
    );
    assert_ne!(record(&nodes[2]).expires_at, 0);
    assert_eq!(record(&nodes[2]), record(&nodes[0]));

    // `from` is respected: a from=2 key is back on exactly 2 nodes, a from=1
    // key is never copied (those that lived only on node 2 are gone).
    for i in 0..30 {
        let two = format!("two{i:02}");
        eventually(
            &format!("{two} not on 2 nodes"),
            Duration::from_secs(10),
            || copies(&nodes, &two) == 2,
        );
        let one = format!("one{i:02}");
        let expected = usize::from(!ones_on_2.contains(&one));
        assert_eq!(copies(&nodes, &one), expected, "{one}");
    }

    assert!(metric(&nodes[2], "tidegate_kv_ae_keys_repaired_total") >= N as f64);
    assert!(metric(&nodes[2], "tidegate_kv_ae_ranges_differing_total") > 0.0);
    assert!(metric(&nodes[2], "tidegate_kv_ae_ranges_compared_total") > 0.0);
    // No client read happened, so nothing was repaired by reads: the keys
    // came back through anti-entropy alone (no write reached node 2 while
    // it was down, so no hint was waiting for it either).
    for n in &nodes {
        assert_eq!(metric(n, "tidegate_kv_read_repairs_total"), 0.0);
    }
}

#[test]
fn a_tombstone_reaches_a_stale_replica_within_the_grace_period_and_stays_dead_after_the_purge() {
    let grace = Duration::from_millis(6000);
    let nodes = started(
        3,
        &format!(
            "anti_entropy_interval_ms = 300\ntombstone_grace_ms = {}\n",
            grace.as_millis()
        ),
    );
    // Planted with signed internal writes, so neither hints nor a client
    // write can fix node 2: nodes 0 and 1 hold the delete, node 2 the
    // older value.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let old = tidegate_kv::Record::value(now - 1_000_000, "old".into()).with_replicas(3);
    let tombstone = tidegate_kv::Record::tombstone(now).with_replicas(3);
    for n in &nodes[..2] {
        assert_eq!(
            internal(n, SECRET, "PUT", "del", &tombstone.encode()).0,
            201
        );
    }
    assert_eq!(
        internal(&nodes[2], SECRET, "PUT", "del", &old.encode()).0,
        201
    );
    assert!(holds(&nodes[2], "del"));

    // Within the grace period, anti-entropy carries the tombstone to node 2
    // (and never the value to nodes 0 and 1).
    let planted = Instant::now();
    eventually(
        "the tombstone did not reach node 2",
        Duration::from_secs(10),
        || {
            for n in &nodes[..2] {
                assert!(!holds(n, "del"), "anti-entropy spread the deleted value");
            }
            !holds(&nodes[2], "del")
        },
    );
    assert!(
        planted.elapsed() < grace,
        "too slow to show anything about the grace period"
    );
    let (status, record) = internal(&nodes[2], SECRET, "GET", "del", b"");
    assert_eq!(status, 200);
    assert!(
        tidegate_kv::Record::decode(record.into())
            .unwrap()
            .tombstone
    );

    // Past the grace period every copy is purged; with anti-entropy running
    // all along, the value never comes back on any node.
    eventually(
        "the tombstones were never purged",
        Duration::from_secs(20),
        || {
            for n in &nodes {
                assert!(
                    !holds(n, "del"),
                    "the deleted value came back on {}",
                    n.addr
                );
            }
            nodes
                .iter()
                .all(|n| internal(n, SECRET, "GET", "del", b"").0 == 404)
        },
    );
    std::thread::sleep(Duration::from_millis(1500)); // several passes more
    for n in &nodes {
        assert!(
            !holds(n, "del"),
            "the deleted value came back on {}",
            n.addr
        );
        assert_eq!(internal(n, SECRET, "GET", "del", b"").0, 404);
    }
    let repaired: f64 = nodes
        .iter()
        .map(|n| metric(n, "tidegate_kv_ae_keys_repaired_total"))
        .sum();
    assert!(repaired >= 1.0);
}

#[test]
fn anti_entropy_requests_need_the_cluster_signature() {
    let nodes = started(2, "anti_entropy_interval_ms = 0\n");
    let peer = format!("http://{}", nodes[1].addr);
    let tree = format!(
        "/v0/internal/tree?peer={}",
        tidegate_kv::client::percent_encode(peer.as_bytes())
    );
    assert_eq!(nodes[0].req("GET", &tree, b"").0, 403);
    let entries = format!(
        "/v0/internal/entries?peer={}",
        tidegate_kv::client::percent_encode(peer.as_bytes())
    );
    assert_eq!(nodes[0].req("POST", &entries, &[0, 1]).0, 403);
}
