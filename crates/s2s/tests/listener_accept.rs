//! The RAW listener on the listener core, at accept: a client outside the
//! `allow` networks and one connection beyond `max_connections` are closed
//! before any Site-to-Site byte is read, and counted by reason, while the
//! connections already served carry on.

mod common;

use std::time::Duration;

use common::{closed_within, flowfile, input_client, start, test_config, wait_until};
use tidegate_hub::Hub;
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_client_outside_the_allow_list_is_refused_at_accept() {
    let mut cfg = test_config();
    cfg.listener.allow = vec!["10.0.0.0/8".parse().unwrap()];
    let srv = start(cfg, Hub::default()).await;
    let metrics = srv.ports.metrics().clone();

    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    assert!(
        closed_within(&mut s, LIMIT).await.is_some(),
        "127.0.0.1 is not in 10.0.0.0/8: closed"
    );
    wait_until("refusal counted", LIMIT, || {
        metrics.refused_count("not_allowed") == 1
    })
    .await;
    assert_eq!(metrics.open_connections(), 0, "never served");
}

#[tokio::test]
async fn one_connection_beyond_max_connections_is_refused_and_the_others_are_served() {
    let mut cfg = test_config();
    cfg.listener.max_connections = 2;
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;
    let metrics = srv.ports.metrics().clone();

    let mut a = input_client(srv.raw).await;
    let mut b = input_client(srv.raw).await;
    let mut extra = TcpStream::connect(srv.raw).await.unwrap();
    assert!(
        closed_within(&mut extra, LIMIT).await.is_some(),
        "the third connection is closed at accept"
    );
    wait_until("refusal counted", LIMIT, || {
        metrics.refused_count("max_connections") == 1
    })
    .await;

    // The two within the limit are served as before.
    a.send_transaction(&[flowfile(b"a")]).await.unwrap();
    b.send_transaction(&[flowfile(b"b")]).await.unwrap();
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"a");
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"b");

    // A closed connection frees its slot.
    a.shutdown().await;
    wait_until("slot freed", LIMIT, || metrics.open_connections() == 1).await;
    let mut c = input_client(srv.raw).await;
    c.send_transaction(&[flowfile(b"c")]).await.unwrap();
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"c");
    assert_eq!(metrics.refused_count("max_connections"), 1);
}
