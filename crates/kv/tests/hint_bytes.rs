//! Hinted handoff's byte bound (`[kv] max_hint_bytes_per_node`) through
//! the store as a node runs it: a coordinator (A, called directly) and a
//! replica (B, serving the KV routes) behind a gate that answers 503
//! while it is "down", so A's writes to it fail at once and become hints,
//! and A's replay keeps them until the gate opens.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper::StatusCode;
use tidegate_kv::engine::hint_bytes;
use tidegate_kv::record::HEADER_BYTES;
use tidegate_kv::{api, KvConfig, KvStore, SyncPolicy};

/// The byte bound of A's hints for B.
const BOUND: u64 = 100_000;
/// A large value: two hints of it fit under [`BOUND`], three do not.
const BIG: usize = 40_000;
/// A small value.
const SMALL: usize = 100;
/// The longest any wait below may take.
const WAIT: Duration = Duration::from_secs(20);

/// What a hint of `key` with a `len`-byte value counts for (the stored
/// record: header and value; a write without `ttl_ms` has no expiry).
fn size(key: &str, len: usize) -> u64 {
    hint_bytes(key.len(), HEADER_BYTES + len)
}

/// The config of node `me` of `nodes`, in `dir`.
fn config(dir: &std::path::Path, nodes: &[String], me: usize) -> KvConfig {
    KvConfig {
        data_dir: dir.join(format!("node{me}")),
        self_url: Some(nodes[me].clone()),
        nodes: nodes.to_vec(),
        cluster_secret: Some("secret".into()),
        sync: SyncPolicy::None,
        replica_timeout_ms: 2_000,
        anti_entropy_interval_ms: 0,
        max_hint_bytes_per_node: BOUND,
        ..KvConfig::default()
    }
}

/// Waits until `done` holds, failing the test after [`WAIT`].
async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A PUT of `len` bytes to `key` through A with `ack=1&from=2`: A's own
/// copy answers it, B's becomes a hint while B is down.
async fn put(a: &KvStore, key: &str, len: usize) {
    let value = Bytes::from(vec![b'v'; len]);
    a.write(Bytes::from(key.to_owned()), Some(value), None, 1, 2)
        .await
        .unwrap();
}

/// Hints A stored or dropped so far.
fn hinted(a: &KvStore) -> u64 {
    a.metrics().hints_stored.get() + a.metrics().hints_dropped.get()
}

/// (keys, bytes) of A's pending hints, from its gauges.
fn pending(a: &KvStore) -> (i64, i64) {
    let m = a.metrics();
    (m.hints_pending.get(), m.hints_pending_bytes.get())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_stop_at_the_byte_bound_small_ones_are_kept_delivery_frees_it_and_a_restart_counts_it(
) {
    let dir = tempfile::tempdir().unwrap();
    // A is never called over HTTP; its listener only holds its port.
    let a_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nodes = [&a_listener, &b_listener].map(|l| format!("http://{}", l.local_addr().unwrap()));

    let b = KvStore::open(&config(dir.path(), &nodes, 1), None).unwrap();
    let up = Arc::new(AtomicBool::new(false));
    let gate = up.clone();
    let app = api::router(b.clone()).layer(middleware::from_fn(move |req: Request, next: Next| {
        let up = gate.load(Ordering::SeqCst);
        async move {
            let r: Response = if up {
                next.run(req).await
            } else {
                StatusCode::SERVICE_UNAVAILABLE.into_response()
            };
            r
        }
    }));
    tokio::spawn(async move { axum::serve(b_listener, app).await.unwrap() });

    let a_config = config(dir.path(), &nodes, 0);
    let a = KvStore::open(&a_config, None).unwrap();

    // Three large values: the first two fill the bound, the third would
    // pass it and is dropped.
    for k in ["big1", "big2", "big3"] {
        put(&a, k, BIG).await;
    }
    until("3 hints kept or dropped", || hinted(&a) == 3).await;
    let big = 2 * size("big1", BIG) as i64;
    assert_eq!(a.metrics().hints_dropped.get(), 1);
    assert_eq!(pending(&a), (2, big));

    // Small values still fit under it, and are kept.
    let smalls: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
    for k in &smalls {
        put(&a, k, SMALL).await;
    }
    until("13 hints kept or dropped", || hinted(&a) == 13).await;
    let small = 10 * size("s0", SMALL) as i64;
    assert_eq!(a.metrics().hints_dropped.get(), 1, "no small one dropped");
    assert_eq!(pending(&a), (12, big + small));

    // A restarts: the hints on disk are counted, and hold the bound.
    assert!(a.shutdown(WAIT).await);
    // Its replay task may be in a round: the engine closes once it ends,
    // and two engines must not share a directory.
    let engine = Arc::downgrade(a.engine());
    drop(a);
    until("A's engine closed", || engine.strong_count() == 0).await;
    let a = KvStore::open(&a_config, None).unwrap();
    assert_eq!(pending(&a), (12, big + small), "counted at start");
    put(&a, "big4", BIG).await;
    until("big4 dropped", || a.metrics().hints_dropped.get() == 1).await;
    assert_eq!(pending(&a), (12, big + small));

    // B comes back: every hint is delivered and the bound is free again.
    up.store(true, Ordering::SeqCst);
    until("every hint delivered", || pending(&a) == (0, 0)).await;
    assert_eq!(a.metrics().hints_delivered.get(), 12);
    let mut bigs_on_b = 0;
    for k in ["big1", "big2", "big3", "big4"] {
        if b.local_get(Bytes::from(k)).await.unwrap().is_some() {
            bigs_on_b += 1;
        }
    }
    assert_eq!(bigs_on_b, 2, "the two large hints kept");
    for k in &smalls {
        let got = b.local_get(Bytes::from(k.clone())).await.unwrap();
        assert!(got.is_some(), "{k} delivered");
    }

    // B is down again: two large values are hinted again, none dropped.
    up.store(false, Ordering::SeqCst);
    for k in ["big5", "big6"] {
        put(&a, k, BIG).await;
    }
    until("2 more hints kept", || a.metrics().hints_stored.get() == 2).await;
    assert_eq!(a.metrics().hints_dropped.get(), 1);
    assert_eq!(pending(&a), (2, big));
}
