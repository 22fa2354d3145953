//! The RAW listener's timeouts from the listener block: a new connection
//! that never sends, and a pooled one that goes silent, are closed after
//! `idle_timeout_ms`; a client that sends
//! part of a handshake or of a FlowFile packet and then nothing is closed
//! after `read_timeout_ms` (the slowloris guard), counted, with nothing
//! published. A transaction whose client sends each field just within the
//! read timeout, or reads what it is sent too slowly, is closed after
//! `max_transaction_ms`, its budget given back (input) or its messages
//! requeued (output).

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::{closed_within, flowfile, input_client, port_id, start, test_config, wait_until};
use tidegate_hub::{Hub, Message};
use tidegate_s2s::client::{ClientOptions, RawClient};
use tidegate_s2s::codec::{encode_request, encode_response, RequestType, ResponseCode};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Longer than any timeout these tests set, by far.
const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_silent_pooled_connection_is_closed_by_the_idle_timeout() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 300;
    cfg.listener.read_timeout_ms = 60_000;
    let srv = start(cfg, Hub::default()).await;
    let metrics = srv.ports.metrics().clone();

    let started = tokio::time::Instant::now();
    let client = input_client(srv.raw).await;
    assert_eq!(metrics.open_connections(), 1);
    wait_until("idle connection closed", LIMIT, || {
        metrics.open_connections() == 0
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "closed before the idle timeout: {:?}",
        started.elapsed()
    );
    drop(client);
}

#[tokio::test]
async fn part_of_a_handshake_then_nothing_is_closed_by_the_read_timeout() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 60_000;
    cfg.listener.read_timeout_ms = 300;
    let srv = start(cfg, Hub::default()).await;
    let metrics = srv.ports.metrics().clone();

    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    // The magic bytes and the first two bytes of the protocol offer's name.
    s.write_all(b"NiFi\x00\x17").await.unwrap();
    let took = closed_within(&mut s, LIMIT)
        .await
        .expect("a stalled handshake is closed");
    assert!(took >= Duration::from_millis(250), "{took:?}");
    wait_until("timeout counted", LIMIT, || {
        metrics.error_count("read_timeout") == 1
    })
    .await;
}

#[tokio::test]
async fn part_of_a_packet_then_nothing_is_closed_by_the_read_timeout() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 60_000;
    cfg.listener.read_timeout_ms = 300;
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;
    let metrics = srv.ports.metrics().clone();

    let mut c = input_client(srv.raw).await;
    c.begin_send().await.unwrap();
    // Two of the four bytes of the packet's attribute count.
    c.write_raw(&[0, 0]);
    c.flush().await.unwrap();
    let answered = tokio::time::timeout(LIMIT, c.read_response()).await;
    assert!(
        matches!(answered, Ok(Err(_))),
        "the server closes the stalled transaction: {answered:?}"
    );
    wait_until("timeout counted", LIMIT, || {
        metrics.error_count("read_timeout") == 1
    })
    .await;
    assert!(
        sub.is_empty(),
        "nothing of a stalled transaction is published"
    );
}

#[tokio::test]
async fn a_connection_that_never_sends_is_closed_by_the_idle_timeout() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 300;
    cfg.listener.read_timeout_ms = 60_000;
    let srv = start(cfg, Hub::default()).await;

    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    let took = closed_within(&mut s, LIMIT)
        .await
        .expect("a silent new connection is closed by the idle timeout");
    assert!(took >= Duration::from_millis(250), "{took:?}");
    let metrics = srv.ports.metrics().clone();
    wait_until("idle timeout counted", LIMIT, || {
        metrics.error_count("idle_timeout") == 1
    })
    .await;
    assert_eq!(metrics.error_count("read_timeout"), 0);
}

#[tokio::test]
async fn a_message_trickled_slower_than_the_read_timeout_is_closed() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 60_000;
    cfg.listener.read_timeout_ms = 500;
    let srv = start(cfg, Hub::default()).await;
    let metrics = srv.ports.metrics().clone();

    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    s.write_all(b"NiFi").await.unwrap();
    // The protocol offer, one byte every 100 ms: each read is quick, the
    // message as a whole (28 bytes, 2.8 s) is not.
    let mut offer = vec![0u8, 22];
    offer.extend_from_slice(b"SocketFlowFileProtocol");
    offer.extend_from_slice(&6i32.to_be_bytes());
    let started = tokio::time::Instant::now();
    for b in offer {
        if s.write_all(&[b]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if metrics.error_count("read_timeout") > 0 {
            break;
        }
    }
    wait_until("trickle closed", LIMIT, || {
        metrics.error_count("read_timeout") == 1
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(2_000),
        "held for {:?} while trickling",
        started.elapsed()
    );
    assert!(closed_within(&mut s, LIMIT).await.is_some());
}

#[tokio::test]
async fn header_fields_trickled_within_the_read_timeout_are_cut_off_at_max_transaction_ms() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 60_000;
    cfg.listener.read_timeout_ms = 500;
    cfg.max_transaction_ms = 1_500;
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;
    let metrics = srv.ports.metrics().clone();

    let mut c = input_client(srv.raw).await;
    let started = tokio::time::Instant::now();
    c.begin_send().await.unwrap();
    // A 1 MiB FlowFile, held in the budget while the transaction is open.
    c.send(&flowfile(&vec![7u8; 1 << 20])).await.unwrap();
    let mut more = BytesMut::new();
    encode_response(ResponseCode::ContinueTransaction, None, &mut more);
    // The next FlowFile announces 25,000 attributes...
    more.extend_from_slice(&25_000u32.to_be_bytes());
    c.write_raw(&more);
    c.flush().await.unwrap();
    wait_until("the first FlowFile is held", LIMIT, || {
        hub.budget().in_use() >= 1 << 20
    })
    .await;
    // ...then gets one name or value (`len=1, "k"`) every 200 ms, each a
    // whole field well within the 500 ms read timeout.
    while metrics.error_count("transaction_timeout") == 0 && started.elapsed() < LIMIT {
        c.write_raw(&[0, 0, 0, 1, b'k']);
        if c.flush().await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_until("the deadline counted", LIMIT, || {
        metrics.error_count("transaction_timeout") == 1
    })
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1_400) && took < Duration::from_millis(4_000),
        "closed after {took:?}, not at max_transaction_ms"
    );
    assert_eq!(
        metrics.error_count("read_timeout"),
        0,
        "every field came within the read timeout"
    );
    let answered = tokio::time::timeout(LIMIT, c.read_response()).await;
    assert!(
        matches!(answered, Ok(Err(_))),
        "the connection is closed: {answered:?}"
    );
    wait_until("the budget is given back", LIMIT, || {
        hub.budget().in_use() == 0
    })
    .await;
    assert!(
        sub.is_empty(),
        "nothing of an unconfirmed transaction is published"
    );

    // The port serves the next client as usual.
    let mut c = input_client(srv.raw).await;
    c.send_transaction(&[flowfile(b"next")]).await.unwrap();
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"next");
}

#[tokio::test]
async fn an_output_transaction_read_too_slowly_is_requeued_at_max_transaction_ms() {
    let mut cfg = test_config();
    cfg.listener.idle_timeout_ms = 60_000;
    cfg.listener.read_timeout_ms = 60_000;
    cfg.max_transaction_ms = 1_000;
    let hub = Hub::default();
    let srv = start(cfg, hub.clone()).await;
    let metrics = srv.ports.metrics().clone();
    // 64 MiB: far more than the socket buffers take, so sending it blocks
    // while the client does not read.
    for i in 0..64 {
        hub.publish(Message::new("s2s.output", vec![i as u8; 1 << 20]))
            .await
            .unwrap();
    }
    let port = &srv.ports.outputs()[0];
    assert_eq!(port.len(), 64);

    let mut c = RawClient::connect(srv.raw, Some(&port_id("output")), ClientOptions::default())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut req = BytesMut::new();
    encode_request(RequestType::ReceiveFlowfiles, &mut req);
    c.write_raw(&req);
    c.flush().await.unwrap();
    wait_until("the batch is taken", LIMIT, || port.len() < 64).await;
    wait_until("the deadline counted", LIMIT, || {
        metrics.error_count("transaction_timeout") == 1
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(4_000),
        "{:?}",
        started.elapsed()
    );
    wait_until("every message requeued", LIMIT, || port.len() == 64).await;
}
