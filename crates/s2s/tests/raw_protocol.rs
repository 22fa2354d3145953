//! The RAW listener driven byte by byte and by the crate's own client:
//! golden handshake bytes, commit only after the route's acknowledgement,
//! destination full, bad checksum, cancel, EOF at every point of a
//! transaction, limits, output ports and compression.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{at_least, next, start, test_config};
use parking_lot::Mutex;
use tidegate_hub::{
    AckToken, Hub, Message, RouteConfig, RouteTable, SharedMessage, Sink, SinkFuture,
};
use tidegate_s2s::client::{ClientError, ClientOptions, RawClient};
use tidegate_s2s::codec::{
    encode_handshake, encode_packet, encode_request, encode_resource_offer, encode_response,
    DataPacket, Handshake, RequestType, ResourceOffer, ResponseCode, CODEC_NAME, PROTOCOL_NAME,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn port_id(name: &str) -> String {
    tidegate_s2s::PortConfig::new(name, "x").resolved_id()
}

fn pkt(attrs: &[(&str, &str)], content: &[u8]) -> DataPacket {
    DataPacket {
        attributes: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        content: Bytes::copy_from_slice(content),
    }
}

async fn client(addr: std::net::SocketAddr, gzip: bool) -> RawClient {
    let opts = ClientOptions {
        gzip,
        timeout: Duration::from_secs(5),
        batch_count: None,
    };
    RawClient::connect(addr, Some(&port_id("input")), opts)
        .await
        .unwrap()
}

/// A sink that holds acknowledgements until released, can be made full,
/// and can fail what it gets.
#[derive(Default)]
struct GateSink {
    held: Mutex<Vec<AckToken>>,
    full: AtomicBool,
    fail: AtomicBool,
}

impl GateSink {
    fn release(&self) {
        for t in self.held.lock().drain(..) {
            t.succeed();
        }
    }
}

impl Sink for GateSink {
    fn name(&self) -> &str {
        "gate"
    }
    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        if self.fail.load(Ordering::SeqCst) {
            ack.complete(Err(tidegate_hub::DeliveryError::Failed {
                sink: "gate".into(),
                reason: "test".into(),
            }));
        } else {
            self.held.lock().push(ack);
        }
        Box::pin(async {})
    }
    fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
    }
}

fn gated_hub() -> (Hub, Arc<GateSink>) {
    let sink = Arc::new(GateSink::default());
    let routes = RouteTable::build(
        &[RouteConfig {
            topics: "s2s.>".into(),
            sink: "gate".into(),
        }],
        &[sink.clone() as Arc<dyn Sink>],
    )
    .unwrap();
    (Hub::new(routes), sink)
}

#[tokio::test]
async fn a_transaction_arrives_once_with_attributes_and_content() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    for gzip in [false, true] {
        let mut c = client(srv.raw, gzip).await;
        let big = vec![7u8; 300_000];
        let full = c
            .send_transaction(&[
                pkt(&[("a", "1"), ("é", "☃")], b""),
                pkt(&[], b"x"),
                pkt(&[], &big),
            ])
            .await
            .unwrap();
        assert!(!full);
        let got = at_least(&sub, 3).await;
        assert_eq!(
            got[0].attributes,
            vec![("a".into(), "1".into()), ("é".into(), "☃".into())]
        );
        assert_eq!(&got[1].payload[..], b"x");
        assert_eq!(&got[2].payload[..], &big[..]);
        assert!(sub.is_empty());
        // The pooled connection takes another transaction.
        c.send_transaction(&[pkt(&[], b"again")]).await.unwrap();
        assert_eq!(
            &next(&sub, "the FlowFile \"again\"").await.payload[..],
            b"again"
        );
        c.shutdown().await;
    }
}

#[tokio::test]
async fn golden_handshake_bytes_on_the_wire() {
    let srv = start(test_config(), Hub::default()).await;
    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    let mut out = BytesMut::new();
    out.extend_from_slice(b"NiFi");
    encode_resource_offer(
        &ResourceOffer {
            name: PROTOCOL_NAME.into(),
            version: 5,
        },
        &mut out,
    )
    .unwrap();
    s.write_all(&out).await.unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(b, [0x15, 0, 0, 0, 6], "DIFFERENT_RESOURCE_VERSION 6");
    out.clear();
    encode_resource_offer(
        &ResourceOffer {
            name: PROTOCOL_NAME.into(),
            version: 6,
        },
        &mut out,
    )
    .unwrap();
    s.write_all(&out).await.unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(b, [0x14], "RESOURCE_OK");
    out.clear();
    let hs = Handshake {
        comms_id: "c".into(),
        transit_uri: "nifi://x:1".into(),
        properties: vec![
            ("GZIP".into(), "false".into()),
            ("PORT_IDENTIFIER".into(), port_id("input")),
        ],
    };
    encode_handshake(&hs, &mut out).unwrap();
    s.write_all(&out).await.unwrap();
    let mut b = [0u8; 3];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"RC\x01", "PROPERTIES_OK");
    out.clear();
    encode_request(RequestType::NegotiateFlowfileCodec, &mut out);
    encode_resource_offer(
        &ResourceOffer {
            name: CODEC_NAME.into(),
            version: 1,
        },
        &mut out,
    )
    .unwrap();
    encode_request(RequestType::RequestPeerList, &mut out);
    s.write_all(&out).await.unwrap();
    let mut b = [0u8; 1 + 4 + 2 + 9 + 4 + 1 + 4];
    s.read_exact(&mut b).await.unwrap();
    let mut want = vec![0x14, 0, 0, 0, 1, 0, 9];
    want.extend_from_slice(b"127.0.0.1");
    want.extend_from_slice(&(srv.raw.port() as i32).to_be_bytes());
    want.extend_from_slice(&[0, 0, 0, 0, 0]);
    assert_eq!(&b[..], &want[..]);

    // One transaction: packet, FINISH → CONFIRM "2946083981", CONFIRM → FINISHED.
    out.clear();
    encode_request(RequestType::SendFlowfiles, &mut out);
    encode_packet(&pkt(&[], b"contents on client 1"), &mut out);
    encode_response(ResponseCode::FinishTransaction, None, &mut out);
    s.write_all(&out).await.unwrap();
    let mut b = [0u8; 3 + 2 + 10];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"RC\x0c\x00\x0a2946083981");
    s.write_all(b"RC\x0c\x00\x00").await.unwrap();
    let mut b = [0u8; 3];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"RC\x0d");
}

#[tokio::test]
async fn a_wrong_port_is_refused_with_unknown_port() {
    let srv = start(test_config(), Hub::default()).await;
    let r = RawClient::connect(srv.raw, Some("nope"), ClientOptions::default()).await;
    match r {
        Err(ClientError::Refused(ResponseCode::UnknownPort, _)) => {}
        other => panic!("expected UNKNOWN_PORT, got {:?}", other.err()),
    }
    assert_eq!(srv.ports.metrics().error_count("unknown_port"), 1);
}

#[tokio::test]
async fn finished_waits_for_the_route_acknowledgement() {
    let (hub, sink) = gated_hub();
    let srv = start(test_config(), hub).await;
    let mut c = client(srv.raw, false).await;
    c.begin_send().await.unwrap();
    c.send(&pkt(&[], b"a")).await.unwrap();
    c.send(&pkt(&[], b"b")).await.unwrap();
    c.confirm().await.unwrap();
    let pending = tokio::time::timeout(Duration::from_millis(300), c.complete()).await;
    assert!(
        pending.is_err(),
        "TRANSACTION_FINISHED before the sink acknowledged"
    );
    assert_eq!(sink.held.lock().len(), 2);
    sink.release();
    assert!(!c.complete().await.unwrap());
}

#[tokio::test]
async fn a_failed_delivery_withholds_finished_and_closes() {
    let (hub, sink) = gated_hub();
    sink.fail.store(true, Ordering::SeqCst);
    let srv = start(test_config(), hub).await;
    let mut c = client(srv.raw, false).await;
    c.begin_send().await.unwrap();
    c.send(&pkt(&[], b"a")).await.unwrap();
    c.confirm().await.unwrap();
    assert!(c.complete().await.is_err());
    assert_eq!(srv.ports.metrics().error_count("delivery_failed"), 1);
}

#[tokio::test]
async fn a_full_destination_is_answered_as_nifi_does() {
    let (hub, sink) = gated_hub();
    let srv = start(test_config(), hub).await;
    // Full at handshake: PORTS_DESTINATION_FULL.
    sink.full.store(true, Ordering::SeqCst);
    match RawClient::connect(srv.raw, Some(&port_id("input")), ClientOptions::default()).await {
        Err(ClientError::Refused(ResponseCode::PortsDestinationFull, _)) => {}
        other => panic!("expected PORTS_DESTINATION_FULL, got {:?}", other.err()),
    }
    // Full after the commit: TRANSACTION_FINISHED_BUT_DESTINATION_FULL.
    sink.full.store(false, Ordering::SeqCst);
    let mut c = client(srv.raw, false).await;
    c.begin_send().await.unwrap();
    c.send(&pkt(&[], b"a")).await.unwrap();
    c.confirm().await.unwrap();
    sink.full.store(true, Ordering::SeqCst);
    sink.release();
    let s2 = sink.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        s2.release();
    });
    assert!(c.complete().await.unwrap(), "FINISHED_BUT_DESTINATION_FULL");
}

#[tokio::test]
async fn bad_checksum_from_the_client_rolls_back() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let mut c = client(srv.raw, false).await;
    c.begin_send().await.unwrap();
    c.send(&pkt(&[], b"a")).await.unwrap();
    c.write_raw(b"RC\x0b");
    c.flush().await.unwrap();
    let r = c.read_response().await.unwrap();
    assert_eq!(r.code, ResponseCode::ConfirmTransaction);
    c.write_raw(b"RC\x13");
    c.flush().await.unwrap();
    assert!(
        c.read_response().await.is_err(),
        "the server closes after BAD_CHECKSUM"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sub.is_empty());
    assert_eq!(srv.ports.metrics().error_count("bad_checksum"), 1);
}

#[tokio::test]
async fn cancel_rolls_back_and_keeps_the_connection() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let mut c = client(srv.raw, false).await;
    c.begin_send().await.unwrap();
    c.send(&pkt(&[], b"a")).await.unwrap();
    c.cancel("changed my mind").await.unwrap();
    c.send_transaction(&[pkt(&[], b"b")]).await.unwrap();
    assert_eq!(&next(&sub, "the FlowFile \"b\"").await.payload[..], b"b");
    assert!(sub.is_empty());
}

/// The whole client side of a connection with one transaction.
fn client_bytes() -> (Vec<u8>, usize) {
    let mut out = BytesMut::new();
    out.extend_from_slice(b"NiFi");
    encode_resource_offer(
        &ResourceOffer {
            name: PROTOCOL_NAME.into(),
            version: 6,
        },
        &mut out,
    )
    .unwrap();
    let hs = Handshake {
        comms_id: "c".into(),
        transit_uri: "nifi://x:1".into(),
        properties: vec![
            ("GZIP".into(), "false".into()),
            ("PORT_IDENTIFIER".into(), port_id("input")),
        ],
    };
    encode_handshake(&hs, &mut out).unwrap();
    encode_request(RequestType::NegotiateFlowfileCodec, &mut out);
    encode_resource_offer(
        &ResourceOffer {
            name: CODEC_NAME.into(),
            version: 1,
        },
        &mut out,
    )
    .unwrap();
    encode_request(RequestType::SendFlowfiles, &mut out);
    encode_packet(&pkt(&[("k", "v")], b"one"), &mut out);
    encode_response(ResponseCode::ContinueTransaction, None, &mut out);
    encode_packet(&pkt(&[], b"two"), &mut out);
    encode_response(ResponseCode::FinishTransaction, None, &mut out);
    encode_response(ResponseCode::ConfirmTransaction, Some(""), &mut out);
    let commit_at = out.len();
    (out.to_vec(), commit_at)
}

#[tokio::test]
async fn eof_at_every_point_of_a_transaction_rolls_back() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let (bytes, commit_at) = client_bytes();
    for cut in 0..commit_at {
        let mut s = TcpStream::connect(srv.raw).await.unwrap();
        s.write_all(&bytes[..cut]).await.unwrap();
        s.shutdown().await.unwrap();
        let mut sink = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink))
            .await
            .expect("the server closes")
            .ok();
        assert!(
            sub.is_empty(),
            "cut at {cut}: nothing may be published before the client's CONFIRM"
        );
    }
    // The full stream commits both FlowFiles exactly once.
    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    s.write_all(&bytes).await.unwrap();
    let got = at_least(&sub, 2).await;
    assert_eq!(&got[0].payload[..], b"one");
    assert_eq!(&got[1].payload[..], b"two");
    assert!(srv.ports.metrics().error_count("eof_in_transaction") > 0);
}

#[tokio::test]
async fn limits_close_the_connection_and_are_counted() {
    let mut cfg = test_config();
    cfg.max_content_bytes = 10;
    cfg.max_transaction_flowfiles = 2;
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;
    let mut c = client(srv.raw, false).await;
    assert!(c
        .send_transaction(&[pkt(&[], b"01234567890")])
        .await
        .is_err());
    let mut c = client(srv.raw, false).await;
    assert!(c
        .send_transaction(&[pkt(&[], b"a"), pkt(&[], b"b"), pkt(&[], b"c")])
        .await
        .is_err());
    // 25,001 attributes: refused before any allocation.
    let mut c = client(srv.raw, false).await;
    c.begin_send().await.unwrap();
    c.write_raw(&25_001i32.to_be_bytes());
    c.flush().await.unwrap();
    assert!(c.read_response().await.is_err());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sub.is_empty());
    assert_eq!(srv.ports.metrics().error_count("bad_frame"), 2);
    assert_eq!(srv.ports.metrics().error_count("limit"), 1);
}

#[tokio::test]
async fn a_silent_client_times_out() {
    let mut cfg = test_config();
    cfg.read_timeout_ms = 200;
    let srv = start(cfg, Hub::default()).await;
    let mut s = TcpStream::connect(srv.raw).await.unwrap();
    s.write_all(b"Ni").await.unwrap();
    let mut b = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut b))
        .await
        .unwrap()
        .ok();
    assert_eq!(srv.ports.metrics().error_count("read_timeout"), 1);
}

#[tokio::test]
async fn output_port_serves_and_requeues_on_bad_checksum() {
    let hub = Hub::default();
    let srv = start(test_config(), hub.clone()).await;
    let opts = ClientOptions {
        gzip: true,
        timeout: Duration::from_secs(5),
        batch_count: Some(2),
    };
    let mut c = RawClient::connect(srv.raw, Some(&port_id("output")), opts)
        .await
        .unwrap();
    assert!(
        c.receive_transaction().await.unwrap().is_empty(),
        "NO_MORE_DATA"
    );
    for i in 0..3 {
        hub.publish(Message::new("s2s.output", format!("m{i}")).with_attribute("i", i.to_string()))
            .await
            .unwrap();
    }
    let a = c.receive_transaction().await.unwrap();
    assert_eq!(a.len(), 2, "BATCH_COUNT honoured");
    assert_eq!(&a[0].content[..], b"m0");
    assert_eq!(a[1].attributes, vec![("i".to_string(), "1".to_string())]);
    // A client CONFIRM with the wrong checksum: BAD_CHECKSUM, and m2 is requeued.
    let (b, _crc) = c.receive_packets().await.unwrap();
    assert_eq!(b.len(), 1);
    match c.confirm_receive("12345").await {
        Err(ClientError::BadChecksum { .. }) => {}
        other => panic!("expected BAD_CHECKSUM, got {other:?}"),
    }
    drop(c);
    assert_eq!(srv.ports.metrics().error_count("bad_checksum"), 1);
    // EOF mid-transaction also requeues.
    let mut c = RawClient::connect(srv.raw, Some(&port_id("output")), ClientOptions::default())
        .await
        .unwrap();
    let (b, _) = c.receive_packets().await.unwrap();
    assert_eq!(b.len(), 1);
    drop(c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // m2 went back to the queue when the connection dropped mid-transaction.
    let opts = ClientOptions::default();
    let mut c = RawClient::connect(srv.raw, Some(&port_id("output")), opts)
        .await
        .unwrap();
    let b = c.receive_transaction().await.unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(&b[0].content[..], b"m2");
    assert!(srv.ports.outputs()[0].is_empty());
}

#[tokio::test]
async fn shutdown_lets_an_open_transaction_finish_then_closes() {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let mut idle = client(srv.raw, false).await;
    let mut busy = client(srv.raw, false).await;
    busy.begin_send().await.unwrap();
    busy.send(&pkt(&[], b"in flight")).await.unwrap();
    busy.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    srv.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    busy.confirm().await.unwrap();
    busy.complete().await.unwrap();
    assert_eq!(
        &next(&sub, "the FlowFile \"in flight\"").await.payload[..],
        b"in flight"
    );
    // The idle pooled connection is closed; new connections are not accepted.
    assert!(idle.send_transaction(&[pkt(&[], b"late")]).await.is_err());
    assert!(
        RawClient::connect(srv.raw, Some(&port_id("input")), ClientOptions::default())
            .await
            .is_err()
    );
    assert!(sub.is_empty());
}
