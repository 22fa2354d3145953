//! Bytes that are not Site-to-Site close only the connection that sent
//! them, counted as `bad_frame`; a client on another connection is served
//! throughout, and nothing it was told is committed goes missing.

mod common;

use std::time::Duration;

use common::{closed_within, flowfile, input_client, start, test_config, wait_until};
use tidegate_hub::Hub;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn garbage_closes_only_its_own_connection() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let metrics = srv.ports.metrics().clone();
    let mut good = input_client(srv.raw).await;
    good.send_transaction(&[flowfile(b"before")]).await.unwrap();

    // An HTTP request where the magic bytes belong.
    let mut bad = TcpStream::connect(srv.raw).await.unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut bad, LIMIT).await.is_some());

    // A valid handshake, then a request type that does not exist.
    let mut odd = input_client(srv.raw).await;
    odd.write_raw(&[0, 4, b'N', b'O', b'P', b'E']);
    odd.flush().await.unwrap();
    assert!(odd.read_response().await.is_err());

    wait_until("both counted", LIMIT, || {
        metrics.error_count("bad_frame") == 2
    })
    .await;
    good.send_transaction(&[flowfile(b"after")]).await.unwrap();
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"before");
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"after");
    assert!(sub.is_empty());
    wait_until("only the good connection open", LIMIT, || {
        metrics.open_connections() == 1
    })
    .await;
}
