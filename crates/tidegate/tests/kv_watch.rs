//! Every accepted KV write, value or tombstone, is published on the hub:
//! a wire subscriber to `kv.>` sees each one with the exact key, the
//! operation and the value; keys that are not topic tokens map to
//! `kv.h.<hash>` (see crates/kv/src/watch.rs).

#[path = "kv_util.rs"]
mod kv_util;

use std::time::Duration;

use kv_util::*;
use tidegate_wire::client::WireClient;

#[tokio::test]
async fn a_wire_subscriber_sees_every_accepted_write() {
    let mut n = cluster(1, "").pop().unwrap();
    // Not the node's own [http] port, which is picked but not bound yet.
    let wire = free_addrs(2).into_iter().find(|a| *a != n.addr).unwrap();
    n.wire = Some(wire);
    n.start();
    let mut c = WireClient::connect(wire).await.unwrap();
    c.subscribe("kv.>").await.unwrap();
    c.ping().await.unwrap();

    assert_eq!(n.req("PUT", &entity("user-1", ""), b"hello").0, 201);
    assert_eq!(n.req("PUT", "/v0/entity?id=a.b%20c", b"x").0, 201);
    assert_eq!(n.req("DELETE", &entity("user-1", ""), b"").0, 202);
    assert_eq!(n.req("PUT", &entity("bad", "&ack=9"), b"refused").0, 400);

    let mut got = Vec::new();
    for _ in 0..3 {
        let m = tokio::time::timeout(Duration::from_secs(5), c.recv_message())
            .await
            .expect("a write was not published")
            .unwrap();
        got.push((
            m.topic.to_string(),
            m.key.clone().unwrap_or_default(),
            m.attribute("kv.op").unwrap_or_default().to_owned(),
            m.payload.clone(),
        ));
    }
    assert_eq!(got[0].0, "kv.k.user-1");
    assert_eq!(
        (&got[0].1[..], &got[0].2[..], &got[0].3[..]),
        (&b"user-1"[..], "put", &b"hello"[..])
    );
    assert!(got[1].0.starts_with("kv.h."), "{}", got[1].0);
    assert_eq!((&got[1].1[..], &got[1].3[..]), (&b"a.b c"[..], &b"x"[..]));
    assert_eq!(
        (got[2].0.as_str(), got[2].2.as_str()),
        ("kv.k.user-1", "delete")
    );
    assert!(got[2].3.is_empty());
    // Nothing for the refused request.
    let more = tokio::time::timeout(Duration::from_millis(300), c.recv_message()).await;
    assert!(more.is_err(), "a refused write was published");
}
