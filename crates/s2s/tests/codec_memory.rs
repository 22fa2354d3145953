//! What decoding FlowFiles holds in memory, seen from outside: a RAW
//! transaction holds its bytes in the hub's in-flight budget until it ends;
//! one that cannot fit, or announces more than its limit, closes only its own
//! connection and is counted as `limit`; compressed HTTP flow-files take what
//! they inflate to.

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{input_client, port_id, start, test_config, wait_until};
use tidegate_hub::{Hub, InflightBudget, RouteTable};
use tidegate_s2s::codec::{encode_compressed, encode_packet, encode_packet_header, DataPacket};

const T: Duration = Duration::from_secs(10);

fn flowfile(size: usize) -> DataPacket {
    DataPacket {
        attributes: vec![("filename".into(), "f".into())],
        content: Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>()),
    }
}

fn hub_with_budget(bytes: usize) -> Hub {
    Hub::with_budget(RouteTable::default(), InflightBudget::new(bytes))
}

#[tokio::test]
async fn a_raw_transaction_holds_its_packet_bytes_until_it_finishes() {
    let hub = hub_with_budget(64 << 20);
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let p = flowfile(1 << 20);
    let mut c = input_client(srv.raw).await;
    c.begin_send().await.unwrap();
    c.send(&p).await.unwrap();
    c.flush().await.unwrap();
    let size = p.encoded_len();
    wait_until("the packet is held", T, || hub.budget().in_use() >= size).await;
    c.confirm().await.unwrap();
    c.complete().await.unwrap();
    wait_until("everything is given back", T, || hub.budget().in_use() == 0).await;
    let mut got = Vec::new();
    sub.recv_many(&mut got, 1).await.unwrap();
    assert_eq!(got[0].payload, p.content);
}

#[tokio::test]
async fn a_raw_transaction_larger_than_the_budget_closes_only_its_connection() {
    let hub = hub_with_budget(1 << 20);
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let mut c = input_client(srv.raw).await;
    assert!(c.send_transaction(&[flowfile(4 << 20)]).await.is_err());
    wait_until("counted as a limit", T, || {
        srv.ports.metrics().error_count("limit") == 1
    })
    .await;
    wait_until("its bytes are given back", T, || hub.budget().in_use() == 0).await;
    // Another connection is served as usual.
    let mut c = input_client(srv.raw).await;
    c.send_transaction(&[flowfile(100 << 10)]).await.unwrap();
    let mut got = Vec::new();
    sub.recv_many(&mut got, 1).await.unwrap();
    assert_eq!(got[0].payload.len(), 100 << 10);
    assert!(sub.is_empty());
}

#[tokio::test]
async fn a_packet_announcing_more_than_the_transaction_limit_is_refused_before_its_content() {
    let mut cfg = test_config();
    cfg.max_transaction_bytes = 1 << 20;
    let hub = hub_with_budget(64 << 20);
    let srv = start(cfg, hub.clone()).await;
    let mut c = input_client(srv.raw).await;
    c.begin_send().await.unwrap();
    let mut header = BytesMut::new();
    encode_packet_header(&[], 2 << 20, &mut header);
    c.write_raw(&header);
    c.flush().await.unwrap();
    // No content follows: the server closes on the header alone.
    assert!(c.read_response().await.is_err());
    assert_eq!(srv.ports.metrics().error_count("limit"), 1);
    assert_eq!(hub.budget().in_use(), 0);
}

/// A bare HTTP/1.1 request; returns the status and the whole response.
async fn request(
    addr: std::net::SocketAddr,
    head: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut r = format!(
        "{head} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
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
    (text[9..12].parse().unwrap(), text)
}

#[tokio::test]
async fn compressed_http_flow_files_take_what_they_inflate_to() {
    let hub = hub_with_budget(256 << 10);
    let srv = start(test_config(), hub.clone()).await;
    let base = format!(
        "/nifi-api/data-transfer/input-ports/{}/transactions",
        port_id("input")
    );
    let v = [("x-nifi-site-to-site-protocol-version", "1")];
    let (status, created) = request(srv.http, &format!("POST {base}"), &v, b"").await;
    assert_eq!(status, 201, "{created}");
    let tx = created
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("location:"))
        .and_then(|l| l.trim().rsplit('/').next())
        .unwrap()
        .to_string();
    // 1 MiB of zeros: a few kilobytes on the wire, four times the budget
    // once inflated.
    let p = DataPacket {
        attributes: vec![],
        content: Bytes::from(vec![0u8; 1 << 20]),
    };
    let (mut plain, mut wire) = (BytesMut::new(), BytesMut::new());
    encode_packet(&p, &mut plain);
    encode_compressed(&plain, &mut wire);
    assert!(wire.len() < 64 << 10);
    let headers = [v[0], ("x-nifi-site-to-site-use-compression", "true")];
    let (status, resp) = request(
        srv.http,
        &format!("POST {base}/{tx}/flow-files"),
        &headers,
        &wire,
    )
    .await;
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("in-flight byte budget"), "{resp}");
    assert_eq!(srv.ports.metrics().error_count("limit"), 1);
    assert_eq!(hub.budget().in_use(), 0);
}
