//! The HTTP transport and discovery with the crate's own client and plain
//! HTTP requests: discovery body, peers, create/flow-files/commit, TTL
//! extension, cancel, bad checksum, unknown port and transaction, output
//! port with checksum check.

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{start, test_config};
use tidegate_hub::{Hub, Message};
use tidegate_s2s::client::{discover, HttpS2sClient};
use tidegate_s2s::codec::{encode_packet, DataPacket};

const T: Duration = Duration::from_secs(5);

fn pkt(content: &[u8]) -> DataPacket {
    DataPacket {
        attributes: vec![("k".into(), "v".into())],
        content: Bytes::copy_from_slice(content),
    }
}

/// A bare HTTP/1.1 request over a fresh connection; returns status and body.
async fn req(
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
    let (st, _, _) = req(srv.http, "GET", "/nifi-api/site-to-site/peers", &[], b"").await;
    assert_eq!(st, 400, "peers needs the protocol version header");
    let (st, _, body) = req(
        srv.http,
        "GET",
        "/nifi-api/site-to-site/peers",
        &[("x-nifi-site-to-site-protocol-version", "1")],
        b"",
    )
    .await;
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
        let mut got = Vec::new();
        while got.len() < 2 {
            sub.recv_many(&mut got, 10).await.unwrap();
        }
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
