//! Hostile input: garbage, a 3 GB declared length, a gzip bomb, truncated
//! and oversize values and too many connections each close only the
//! offending connection, with a counted reason, while the server keeps
//! serving (and acking) everyone else.

mod common;

use std::time::Duration;

use common::*;
use tidegate_forward::codec::encode::{gzip, write_packed_forward, EntriesWrap, MessageOption};
use tidegate_forward::codec::EventTime;
use tidegate_forward::{ClientOptions, ForwardClient, ForwardConfig};
use tidegate_hub::{Hub, ListenerMetrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

/// Sends `bytes` and expects the server to close the connection without
/// sending anything back.
async fn expect_closed(addr: std::net::SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut b = [0u8; 16];
    match tokio::time::timeout(WAIT, s.read(&mut b))
        .await
        .expect("server must close")
    {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("server answered {:?} instead of closing", &b[..n]),
    }
}

/// Waits until `kind` was counted once.
async fn counted(m: &ListenerMetrics, kind: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while m.error_count(kind) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "error {kind} never counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A healthy client still gets its chunk acked.
async fn still_serving(addr: std::net::SocketAddr) {
    let mut c = ForwardClient::connect(addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("ok", EventTime::new(1, 0), &record(1), Some("alive"))
        .await
        .unwrap();
    c.wait_ack("alive", WAIT).await.unwrap();
}

#[tokio::test]
async fn garbage_bytes_close_that_connection_only() {
    let hub = Hub::default();
    let srv = start(hub.clone(), ForwardConfig::default()).await;
    let m = hub.metrics().listener("forward");
    // A healthy connection opened before the garbage keeps working after it.
    let mut before = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    expect_closed(srv.addr, &[0x93, 0xa1, b't', 0xc1, 0xc1, 0xc1]).await;
    counted(&m, "bad_msgpack").await;
    before
        .send_message("ok", EventTime::new(1, 0), &record(1), Some("b"))
        .await
        .unwrap();
    before.wait_ack("b", WAIT).await.unwrap();
    still_serving(srv.addr).await;
}

#[tokio::test]
async fn a_3_gb_declared_length_is_refused_before_buffering() {
    let hub = Hub::default();
    let srv = start(hub.clone(), ForwardConfig::default()).await;
    let m = hub.metrics().listener("forward");
    // [ "t", str32 of 3,000,000,000 bytes … ] — only the header is sent.
    let mut bytes = vec![0x93, 0xa1, b't', 0xdb];
    bytes.extend_from_slice(&3_000_000_000u32.to_be_bytes());
    bytes.extend_from_slice(b"abc");
    expect_closed(srv.addr, &bytes).await;
    counted(&m, "chunk_too_large").await;
    still_serving(srv.addr).await;
}

#[tokio::test]
async fn a_gzip_bomb_is_stopped_at_the_decompression_limit() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let config = ForwardConfig {
        max_decompressed_bytes: 1 << 20,
        ..Default::default()
    };
    let srv = start(hub.clone(), config).await;
    let m = hub.metrics().listener("forward");
    // 64 MiB of zeros inside a valid-looking entry stream, gzipped to ~64 KiB.
    let bomb = gzip(&vec![0u8; 64 << 20]);
    let mut frame = Vec::new();
    let opt = MessageOption {
        chunk: Some("bomb"),
        size: None,
        gzip: true,
    };
    write_packed_forward(&mut frame, "t", &bomb, EntriesWrap::Bin, &opt);
    expect_closed(srv.addr, &frame).await;
    counted(&m, "decompressed_too_large").await;
    still_serving(srv.addr).await;
    // Only the healthy client's record was published; the bomb was never acked.
    assert_eq!(recv_n(&mut sub, 1).await[0].topic, "logs.ok");
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_and_counted() {
    let hub = Hub::default();
    let mut config = ForwardConfig::default();
    config.listener.max_connections = 2;
    let srv = start(hub.clone(), config).await;
    let m = hub.metrics().listener("forward");
    let mut a = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let _b = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    // Make sure both are accepted before the third arrives.
    a.send_message("ok", EventTime::new(1, 0), &record(1), Some("a"))
        .await
        .unwrap();
    a.wait_ack("a", WAIT).await.unwrap();
    expect_closed(srv.addr, &[0xc0]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while m.refused_count("max_connections") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "refusal never counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.send_message("ok", EventTime::new(1, 0), &record(1), Some("a2"))
        .await
        .unwrap();
    a.wait_ack("a2", WAIT).await.unwrap();
}

#[tokio::test]
async fn invalid_events_are_skipped_and_counted_without_closing() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let srv = start(hub.clone(), ForwardConfig::default()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    // Forward mode with one record that is not a map, one good record.
    let frame = [
        0x93, 0xa1, b't', 0x92, 0x92, 0x01, 0xa1, b'x', 0x92, 0x01, 0x80, 0x81, 0xa5, b'c', b'h',
        b'u', b'n', b'k', 0xa1, b'k',
    ];
    c.send_raw(&frame).await.unwrap();
    c.wait_ack("k", WAIT).await.unwrap();
    assert_eq!(recv_n(&mut sub, 1).await[0].payload.as_ref(), b"{}");
    assert_eq!(
        hub.metrics()
            .listener("forward")
            .error_count("invalid_event"),
        1
    );
    // A top-level value that is no message (a map) is skipped too.
    c.send_raw(&[0x80]).await.unwrap();
    c.send_message("t", EventTime::new(1, 0), &record(2), Some("after"))
        .await
        .unwrap();
    c.wait_ack("after", WAIT).await.unwrap();
    assert_eq!(
        hub.metrics()
            .listener("forward")
            .error_count("invalid_message"),
        1
    );
}

/// Sends the next chunk on `c` and waits for its ack.
async fn ack_next(c: &mut ForwardClient, n: &mut usize) {
    *n += 1;
    let chunk = format!("h{n}");
    c.send_message("ok", EventTime::new(1, 0), &record(*n), Some(&chunk))
        .await
        .unwrap();
    c.wait_ack(&chunk, WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_truncated_and_oversize_input_close_only_their_connection() {
    let hub = Hub::default();
    let config = ForwardConfig {
        max_chunk_bytes: 1 << 20,
        ..Default::default()
    };
    let srv = start(hub.clone(), config).await;
    let m = hub.metrics().listener("forward");
    // One well-behaved connection lives through all of it.
    let mut healthy = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let mut acked = 0;
    ack_next(&mut healthy, &mut acked).await;

    let mut oversize_header = vec![0x93, 0xa1, b't', 0xdb];
    oversize_header.extend_from_slice(&(2u32 << 20).to_be_bytes());
    // A JSON string that never ends, past the frame limit with real bytes.
    let mut oversize_json = b"[\"t\", 1, {\"k\": \"".to_vec();
    oversize_json.extend_from_slice(&vec![b'a'; (1 << 20) + 4096]);
    let cases: [(&str, Vec<u8>); 6] = [
        ("bad_msgpack", vec![0x93, 0xa1, b't', 0xc1, 0xc1, 0xc1]),
        ("bad_json", b"[\"t\", 1, }".to_vec()),
        ("too_deep", vec![0x91; 200]),
        ("chunk_too_large", oversize_header),
        ("chunk_too_large", oversize_json),
        ("unsupported_compression", {
            let mut f = Vec::new();
            // ["t", bin8 "", {"compressed": "zstd"}]
            f.extend_from_slice(&[0x93, 0xa1, b't', 0xc4, 0x00, 0x81, 0xaa]);
            f.extend_from_slice(b"compressed");
            f.extend_from_slice(&[0xa4]);
            f.extend_from_slice(b"zstd");
            f
        }),
    ];
    for (kind, bytes) in cases {
        let before = m.error_count(kind);
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        // The server may close before everything is written.
        let _ = s.write_all(&bytes).await;
        let mut b = [0u8; 16];
        match tokio::time::timeout(WAIT, s.read(&mut b))
            .await
            .unwrap_or_else(|_| panic!("{kind}: connection not closed"))
        {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!("{kind}: server answered {:?}", &b[..n]),
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        while m.error_count(kind) == before {
            assert!(tokio::time::Instant::now() < deadline, "{kind} not counted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ack_next(&mut healthy, &mut acked).await;
    }

    // Truncated: half a message, then the client closes its side.
    let mut frame = Vec::new();
    tidegate_forward::codec::encode::write_message(
        &mut frame,
        "t",
        EventTime::new(1, 0),
        tidegate_forward::codec::encode::TimeForm::FixExt8,
        &record(9),
        &MessageOption {
            chunk: Some("cut"),
            ..Default::default()
        },
    );
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(&frame[..frame.len() / 2]).await.unwrap();
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut rest))
        .await
        .expect("truncated connection closed")
        .unwrap();
    assert!(rest.is_empty(), "a truncated chunk was answered: {rest:?}");
    counted(&m, "truncated").await;
    ack_next(&mut healthy, &mut acked).await;

    // Only the healthy connection is left, and nothing of the others is
    // still held in the budget.
    let deadline = tokio::time::Instant::now() + WAIT;
    while m.open_connections() != 1 || hub.budget().in_use() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "open {} in use {}",
            m.open_connections(),
            hub.budget().in_use()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
