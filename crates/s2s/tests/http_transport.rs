//! The HTTP transport and discovery with the crate's own client and plain
//! HTTP requests: discovery body, peers, create/flow-files/commit, TTL
//! extension, cancel, bad checksum, unknown port and transaction, output
//! port with checksum check; and the requests NiFi refuses (wrong `Accept`
//! or `Content-Type`, no protocol version, unknown or expired transaction)
//! refused the same way. Transactions a client abandons are rolled back by
//! the periodic sweep, without waiting for another request, and none lives
//! past `max_transaction_ms` however often it is extended.

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{at_least, next, start, test_config, wait_until};
use tidegate_hub::{Hub, InflightBudget, Message, RouteTable};
use tidegate_s2s::client::{discover, HttpS2sClient};
use tidegate_s2s::codec::{encode_compressed, encode_packet, DataPacket};

const T: Duration = Duration::from_secs(5);

fn pkt(content: &[u8]) -> DataPacket {
    DataPacket {
        attributes: vec![("k".into(), "v".into())],
        content: Bytes::copy_from_slice(content),
    }
}

const VERSION: (&str, &str) = ("x-nifi-site-to-site-protocol-version", "1");

/// A bare HTTP/1.1 request with the protocol version header NiFi requires.
async fn req(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut all = vec![VERSION];
    all.extend_from_slice(headers);
    req_exact(addr, method, path, &all, body).await
}

/// A bare HTTP/1.1 request over a fresh connection with exactly `headers`;
/// returns status, head and body.
async fn req_exact(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    s.write_all(r.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status: u16 = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}

fn location(head: &str) -> String {
    let l = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("location:"))
        .unwrap();
    let url = l.split_once(':').unwrap().1.trim();
    url[url.find("/nifi-api/").unwrap()..].to_string()
}

#[tokio::test]
async fn discovery_lists_ports_and_raw_port() {
    let srv = start(test_config(), Hub::default()).await;
    let d = discover(srv.http, T).await.unwrap();
    assert_eq!(d.raw_port, Some(srv.raw.port()));
    assert_eq!(d.http_port, Some(srv.http.port()));
    assert!(!d.secure);
    assert_eq!(d.input_id("input"), Some(srv.ports.inputs()[0].id.as_str()));
    assert_eq!(
        d.output_id("output"),
        Some(srv.ports.outputs()[0].id.as_str())
    );
    let (st, _, body) = req(srv.http, "GET", "/nifi-api/controller", &[], b"").await;
    assert_eq!(st, 200);
    assert!(body.contains("\"remoteSiteListeningPort\""));
    let (st, _, _) = req_exact(srv.http, "GET", "/nifi-api/site-to-site/peers", &[], b"").await;
    assert_eq!(st, 400, "peers needs the protocol version header");
    let (st, _, body) = req(srv.http, "GET", "/nifi-api/site-to-site/peers", &[], b"").await;
    assert_eq!(st, 200);
    assert!(
        body.contains(&format!("\"port\":{}", srv.http.port())),
        "{body}"
    );
}

#[tokio::test]
async fn a_transaction_commits_once_after_delete() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    for gzip in [false, true] {
        let mut c = HttpS2sClient::connect(srv.http, &id, gzip, T)
            .await
            .unwrap();
        c.create().await.unwrap();
        c.send(&pkt(b""));
        c.send(&pkt(&vec![3u8; 200_000]));
        c.confirm().await.unwrap();
        assert!(sub.is_empty(), "nothing before the commit");
        assert!(!c.complete().await.unwrap());
        let got = at_least(&sub, 2).await;
        assert_eq!(got[1].payload.len(), 200_000);
        assert_eq!(got[0].attribute("k"), Some("v"));
        assert!(sub.is_empty());
    }
    let mut c = HttpS2sClient::connect(srv.http, &id, false, T)
        .await
        .unwrap();
    c.create().await.unwrap();
    c.send(&pkt(b"x"));
    c.confirm().await.unwrap();
    c.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sub.is_empty(), "cancelled");
}

#[tokio::test]
async fn ttl_extension_bad_checksum_and_unknowns() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    let base = format!("/nifi-api/data-transfer/input-ports/{id}/transactions");
    let (st, head, body) = req(srv.http, "POST", &base, &[], b"").await;
    assert_eq!(st, 201, "{body}");
    assert!(head
        .to_ascii_lowercase()
        .contains("x-location-uri-intent: transaction-url"));
    assert!(head
        .to_ascii_lowercase()
        .contains("x-nifi-site-to-site-server-transaction-ttl: 30"));
    let tx = location(&head);
    let (st, _, body) = req(srv.http, "PUT", &tx, &[], b"").await;
    assert_eq!(st, 200);
    assert!(body.contains("\"responseCode\":10"), "{body}");
    let mut packets = BytesMut::new();
    encode_packet(&pkt(b"contents on client 1"), &mut packets);
    let (st, _, body) = req(
        srv.http,
        "POST",
        &format!("{tx}/flow-files"),
        &[("content-type", "application/octet-stream")],
        &packets,
    )
    .await;
    assert_eq!(st, 202);
    assert_eq!(
        body.trim().len(),
        body.trim().parse::<u32>().unwrap().to_string().len()
    );
    let (st, _, body) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=19"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 200);
    assert!(body.contains("\"responseCode\":15"), "{body}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(sub.is_empty(), "bad checksum rolled back");
    let (st, _, _) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=12"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 404, "the transaction is gone");
    let (st, _, body) = req(
        srv.http,
        "POST",
        "/nifi-api/data-transfer/input-ports/nope/transactions",
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 404);
    assert!(body.contains("\"responseCode\":200"), "{body}");
    // A truncated packet is refused and rolled back.
    let (_, head, _) = req(srv.http, "POST", &base, &[], b"").await;
    let tx = location(&head);
    let (st, _, _) = req(
        srv.http,
        "POST",
        &format!("{tx}/flow-files"),
        &[],
        &packets[..packets.len() - 1],
    )
    .await;
    assert_eq!(st, 400);
    assert_eq!(srv.ports.metrics().error_count("bad_frame"), 1);
}

#[tokio::test]
async fn output_port_over_http_checks_the_checksum() {
    let hub = Hub::default();
    let srv = start(test_config(), hub.clone()).await;
    let id = srv.ports.outputs()[0].id.clone();
    let base = format!("/nifi-api/data-transfer/output-ports/{id}/transactions");
    let (_, head, _) = req(srv.http, "POST", &base, &[], b"").await;
    let tx = location(&head);
    let (st, _, body) = req(srv.http, "GET", &format!("{tx}/flow-files"), &[], b"").await;
    assert_eq!((st, body.as_str()), (200, ""), "no data");
    hub.publish(Message::new("s2s.output", "hello"))
        .await
        .unwrap();
    let (st, _, body) = req(srv.http, "GET", &format!("{tx}/flow-files"), &[], b"").await;
    assert_eq!(st, 202);
    assert!(body.ends_with("hello"));
    let (st, _, body) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=12&checksum=1"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 400);
    assert!(body.contains("\"responseCode\":19"), "{body}");
    assert_eq!(srv.ports.outputs()[0].len(), 1, "requeued");
    let (_, head, _) = req(srv.http, "POST", &base, &[], b"").await;
    let tx = location(&head);
    let (_, _, _) = req(srv.http, "GET", &format!("{tx}/flow-files"), &[], b"").await;
    let mut plain = BytesMut::new();
    encode_packet(
        &DataPacket {
            attributes: vec![],
            content: Bytes::from_static(b"hello"),
        },
        &mut plain,
    );
    let crc = crc32fast::hash(&plain).to_string();
    let (st, _, body) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=12&checksum={crc}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"flowFileSent\":1"), "{body}");
    assert!(srv.ports.outputs()[0].is_empty());
}

/// Opens a transaction on input port `id` with plain requests; its path.
async fn open_tx(addr: std::net::SocketAddr, id: &str) -> String {
    let base = format!("/nifi-api/data-transfer/input-ports/{id}/transactions");
    let (st, head, body) = req(addr, "POST", &base, &[("accept", "application/json")], b"").await;
    assert_eq!(st, 201, "{body}");
    location(&head)
}

#[tokio::test]
async fn requests_nifi_refuses_are_refused_the_same_way() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    let base = format!("/nifi-api/data-transfer/input-ports/{id}/transactions");
    let mut packets = BytesMut::new();
    encode_packet(&pkt(b"strict"), &mut packets);
    let octets = ("content-type", "application/octet-stream");

    // No protocol version: 400 with an ABORT entity, no transaction made.
    let (st, _, body) = req_exact(srv.http, "POST", &base, &[], b"").await;
    assert_eq!(st, 400, "{body}");
    assert!(
        body.contains("Protocol version was not specified"),
        "{body}"
    );
    assert!(body.contains("\"responseCode\":250"), "{body}");
    // Creating a transaction produces JSON: text/plain only is 406.
    let (st, _, _) = req(srv.http, "POST", &base, &[("accept", "text/plain")], b"").await;
    assert_eq!(st, 406);

    let tx = open_tx(srv.http, &id).await;
    let flow_files = format!("{tx}/flow-files");
    // The flow-files POST produces text/plain: the Accept the bench once
    // sent (JSON only) is what NiFi answers 406 to.
    let json = ("accept", "application/json");
    let (st, _, _) = req(srv.http, "POST", &flow_files, &[json, octets], &packets).await;
    assert_eq!(st, 406);
    // It consumes octet-stream.
    let (st, _, _) = req(
        srv.http,
        "POST",
        &flow_files,
        &[("content-type", "application/json")],
        &packets,
    )
    .await;
    assert_eq!(st, 415);
    // Both refusals left the transaction as it was: NiFi's client headers work.
    let (st, _, body) = req(
        srv.http,
        "POST",
        &flow_files,
        &[("accept", "text/plain"), octets],
        &packets,
    )
    .await;
    assert_eq!(st, 202, "{body}");
    // Commit consumes octet-stream and produces JSON.
    let commit = format!("{tx}?responseCode=12");
    let (st, _, _) = req(
        srv.http,
        "DELETE",
        &commit,
        &[("accept", "text/plain")],
        b"",
    )
    .await;
    assert_eq!(st, 406);
    let (st, _, _) = req_exact(srv.http, "DELETE", &commit, &[], b"").await;
    assert_eq!(st, 400, "commit without the protocol version");
    let (st, _, body) = req(srv.http, "DELETE", &commit, &[json], b"").await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        next(&sub, "the committed FlowFile \"strict\"")
            .await
            .payload,
        &b"strict"[..]
    );

    // An unknown transaction: 404 + ABORT on every verb.
    let ghost = format!("{base}/00000000-0000-0000-0000-000000000000");
    for (method, path) in [
        ("PUT", ghost.clone()),
        ("POST", format!("{ghost}/flow-files")),
        ("DELETE", format!("{ghost}?responseCode=12")),
    ] {
        let (st, _, body) = req(srv.http, method, &path, &[octets], &packets).await;
        assert_eq!(st, 404, "{method} {path}: {body}");
        assert!(body.contains("Transaction was not found"), "{body}");
    }
}

#[tokio::test]
async fn an_expired_transaction_is_unknown_to_every_request() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let mut config = test_config();
    config.http_transaction_ttl_secs = 1;
    let srv = start(config, hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    let mut packets = BytesMut::new();
    encode_packet(&pkt(b"late"), &mut packets);
    let octets = ("content-type", "application/octet-stream");

    // Expired before its FlowFiles.
    let tx = open_tx(srv.http, &id).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (st, _, _) = req(
        srv.http,
        "POST",
        &format!("{tx}/flow-files"),
        &[octets],
        &packets,
    )
    .await;
    assert_eq!(st, 404);
    let (st, _, _) = req(srv.http, "PUT", &tx, &[], b"").await;
    assert_eq!(st, 404, "too late to extend");

    // Expired between its FlowFiles and the commit: not committed.
    let tx = open_tx(srv.http, &id).await;
    let (st, _, _) = req(
        srv.http,
        "POST",
        &format!("{tx}/flow-files"),
        &[octets],
        &packets,
    )
    .await;
    assert_eq!(st, 202);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (st, _, _) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=12"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 404);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(sub.is_empty(), "an expired transaction is rolled back");

    // Kept alive by PUTs, the same transaction outlives its TTL.
    let tx = open_tx(srv.http, &id).await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let (st, _, _) = req(srv.http, "PUT", &tx, &[], b"").await;
        assert_eq!(st, 200);
    }
    let (st, _, _) = req(
        srv.http,
        "POST",
        &format!("{tx}/flow-files"),
        &[octets],
        &packets,
    )
    .await;
    assert_eq!(st, 202);
    let (st, _, _) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=12"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        next(&sub, "the committed FlowFile \"late\"").await.payload,
        &b"late"[..]
    );
}

#[tokio::test]
async fn the_client_extends_a_transaction_older_than_half_its_ttl() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let mut config = test_config();
    config.http_transaction_ttl_secs = 1;
    let srv = start(config, hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    let mut c = HttpS2sClient::connect(srv.http, &id, false, T)
        .await
        .unwrap();
    c.create().await.unwrap();
    assert_eq!(c.ttl(), Duration::from_secs(1));
    c.send(&pkt(b"slow"));
    // 1.2 s without a transfer request, more than the TTL: the PUT that
    // keep_alive sends after half of it is what keeps the transaction.
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.keep_alive().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.confirm().await.unwrap();
    assert!(!c.complete().await.unwrap());
    assert_eq!(
        next(&sub, "the committed FlowFile \"slow\"").await.payload,
        &b"slow"[..]
    );
}

#[tokio::test]
async fn abandoned_flow_files_give_their_budget_back_after_the_ttl_with_no_other_request() {
    let hub = Hub::with_budget(RouteTable::default(), InflightBudget::new(64 << 20));
    let sub = hub.subscribe("s2s.input").unwrap();
    let mut config = test_config();
    config.http_transaction_ttl_secs = 1;
    let srv = start(config, hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    // 1 MiB of zeros, compressed: what it inflates to is held in the budget
    // (the bytes on the wire are the [http] server's, not metered here).
    let p = DataPacket {
        attributes: vec![],
        content: Bytes::from(vec![0u8; 1 << 20]),
    };
    let (mut plain, mut wire) = (BytesMut::new(), BytesMut::new());
    encode_packet(&p, &mut plain);
    encode_compressed(&plain, &mut wire);
    let headers = [
        ("content-type", "application/octet-stream"),
        ("x-nifi-site-to-site-use-compression", "true"),
    ];

    let tx = open_tx(srv.http, &id).await;
    let opened = tokio::time::Instant::now();
    let (st, _, _) = req(
        srv.http,
        "POST",
        &format!("{tx}/flow-files"),
        &headers,
        &wire,
    )
    .await;
    assert_eq!(st, 202);
    assert!(
        hub.budget().in_use() >= (1 << 20) - wire.len(),
        "the FlowFiles are held: {}",
        hub.budget().in_use()
    );
    // The client goes away: no commit, no other request from anyone.
    wait_until("the budget is given back", Duration::from_secs(5), || {
        hub.budget().in_use() == 0
    })
    .await;
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(4_000),
        "given back {took:?} after the transaction opened, TTL 1 s"
    );
    assert_eq!(srv.ports.metrics().error_count("transaction_expired"), 1);
    let (st, _, _) = req(
        srv.http,
        "DELETE",
        &format!("{tx}?responseCode=12"),
        &[],
        b"",
    )
    .await;
    assert_eq!(st, 404, "too late to commit");
    assert!(sub.is_empty());
}

#[tokio::test]
async fn abandoned_output_messages_go_back_to_their_port_with_no_other_request() {
    let hub = Hub::default();
    let mut config = test_config();
    config.http_transaction_ttl_secs = 1;
    let srv = start(config, hub.clone()).await;
    let port = &srv.ports.outputs()[0];
    let base = format!(
        "/nifi-api/data-transfer/output-ports/{}/transactions",
        port.id
    );
    hub.publish(Message::new("s2s.output", "abandoned"))
        .await
        .unwrap();
    let (_, head, _) = req(srv.http, "POST", &base, &[], b"").await;
    let tx = location(&head);
    let (st, _, body) = req(srv.http, "GET", &format!("{tx}/flow-files"), &[], b"").await;
    assert_eq!(st, 202);
    assert!(body.ends_with("abandoned"));
    assert!(port.is_empty(), "taken by the transaction");
    wait_until("the message is requeued", Duration::from_secs(5), || {
        port.len() == 1
    })
    .await;
}

#[tokio::test]
async fn extending_does_not_keep_a_transaction_past_max_transaction_ms() {
    let hub = Hub::default();
    let mut config = test_config();
    config.http_transaction_ttl_secs = 1;
    config.max_transaction_ms = 1_500;
    let srv = start(config, hub.clone()).await;
    let id = srv.ports.inputs()[0].id.clone();
    let tx = open_tx(srv.http, &id).await;
    let opened = tokio::time::Instant::now();
    let gone = loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (st, _, _) = req(srv.http, "PUT", &tx, &[], b"").await;
        if st != 200 {
            assert_eq!(st, 404);
            break opened.elapsed();
        }
        assert!(opened.elapsed() < T, "extended for {:?}", opened.elapsed());
    };
    assert!(
        gone >= Duration::from_millis(1_400) && gone < Duration::from_millis(4_000),
        "gone after {gone:?}"
    );
}
