//! The client and the server against each other in-process: every mode
//! reaches a hub subscriber record for record, with its event time, and
//! chunks are acked.

mod common;

use std::time::Duration;

use common::*;
use tidegate_forward::codec::encode::TimeForm;
use tidegate_forward::codec::EventTime;
use tidegate_forward::{ClientOptions, ForwardClient, ForwardConfig, PayloadFormat};
use tidegate_hub::Hub;

const ACK_WAIT: Duration = Duration::from_secs(10);

/// The default `topic_prefix` is `"logs."`: tag `app.m` is topic `logs.app.m`.
#[tokio::test]
async fn every_mode_delivers_every_record_and_acks_its_chunk() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, "logs.>", 10_000);
    let srv = start(hub, ForwardConfig::default()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let t = EventTime::new(1_700_000_000, 123_456_789);
    let recs: Vec<Vec<u8>> = (0..10).map(record).collect();
    let entries: Vec<(EventTime, &[u8])> = recs.iter().map(|r| (t, r.as_slice())).collect();

    c.send_message("app.m", t, &recs[0], Some("c-message"))
        .await
        .unwrap();
    c.wait_ack("c-message", ACK_WAIT).await.unwrap();
    c.send_forward("app.f", &entries, Some("c-forward"))
        .await
        .unwrap();
    c.wait_ack("c-forward", ACK_WAIT).await.unwrap();
    c.send_packed_forward("app.p", &entries, Some("c-packed"))
        .await
        .unwrap();
    c.wait_ack("c-packed", ACK_WAIT).await.unwrap();
    c.send_compressed_packed_forward("app.z", &entries, Some("c-gzip"))
        .await
        .unwrap();
    c.wait_ack("c-gzip", ACK_WAIT).await.unwrap();

    let got = recv_n(&mut sub, 31).await;
    assert_eq!(got[0].topic, "logs.app.m");
    assert_eq!(
        json_of(&got[0]),
        serde_json::json!({"i": 0, "msg": "line 0"})
    );
    for (k, topic) in ["logs.app.f", "logs.app.p", "logs.app.z"]
        .iter()
        .enumerate()
    {
        for i in 0..10 {
            let m = &got[1 + k * 10 + i];
            assert_eq!(&m.topic, topic);
            assert_eq!(m.timestamp_ns, t.as_nanos());
            assert_eq!(json_of(m)["i"], i);
        }
    }
}

#[tokio::test]
async fn every_time_form_keeps_its_precision() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 100);
    let srv = start(hub, ForwardConfig::default()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let t = EventTime::new(1_700_000_000, 5);
    for form in [TimeForm::FixExt8, TimeForm::Ext8, TimeForm::Seconds] {
        c.time_form = form;
        c.send_message("t", t, &record(1), Some("x")).await.unwrap();
        c.wait_ack("x", ACK_WAIT).await.unwrap();
    }
    let got = recv_n(&mut sub, 3).await;
    assert_eq!(got[0].timestamp_ns, t.as_nanos());
    assert_eq!(got[1].timestamp_ns, t.as_nanos());
    assert_eq!(got[2].timestamp_ns, 1_700_000_000 * 1_000_000_000);
}

#[tokio::test]
async fn msgpack_passthrough_keeps_the_record_bytes() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 100);
    let srv = start(
        hub,
        ForwardConfig {
            payload: PayloadFormat::Msgpack,
            ..Default::default()
        },
    )
    .await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let rec = record(7);
    c.send_packed_forward("t", &[(EventTime::new(1, 0), &rec)], None)
        .await
        .unwrap();
    let got = recv_n(&mut sub, 1).await;
    assert_eq!(&got[0].payload[..], &rec[..]);
}

#[tokio::test]
async fn a_json_connection_is_answered_in_json() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 100);
    let srv = start(hub, ForwardConfig::default()).await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        br#"["app", 1700000000, {"a": 1}] ["app", [[1700000001, {"b": 2}]], {"chunk": "j1"}]"#,
    )
    .await
    .unwrap();
    let mut reply = vec![0u8; 64];
    let n = tokio::time::timeout(ACK_WAIT, s.read(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&reply[..n], br#"{"ack":"j1"}"#);
    let got = recv_n(&mut sub, 2).await;
    assert_eq!(json_of(&got[0]), serde_json::json!({"a": 1}));
    assert_eq!(got[1].timestamp_ns, 1_700_000_001 * 1_000_000_000);
}

#[tokio::test]
async fn an_empty_prefix_keeps_the_bare_tag_as_topic() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let config = ForwardConfig {
        topic_prefix: String::new(),
        ..Default::default()
    };
    let srv = start(hub, config).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("app.web", EventTime::new(1, 0), &record(1), Some("bare"))
        .await
        .unwrap();
    c.wait_ack("bare", ACK_WAIT).await.unwrap();
    assert_eq!(recv_n(&mut sub, 1).await[0].topic, "app.web");
}

#[tokio::test]
async fn a_udp_heartbeat_is_answered() {
    let srv = start(Hub::default(), ForwardConfig::default()).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&[0], srv.addr).await.unwrap();
    let mut b = [9u8; 8];
    let (n, _) = tokio::time::timeout(ACK_WAIT, sock.recv_from(&mut b))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&b[..n], b"\0");
}

#[tokio::test]
async fn a_udp_heartbeat_from_outside_the_allow_list_gets_no_answer() {
    let mut config = ForwardConfig::default();
    config.listener.allow = vec!["10.0.0.0/8".parse().unwrap()];
    let srv = start(Hub::default(), config).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&[0], srv.addr).await.unwrap();
    let mut b = [9u8; 8];
    let answer = tokio::time::timeout(Duration::from_millis(500), sock.recv_from(&mut b)).await;
    assert!(answer.is_err(), "answered {answer:?}");
}

#[tokio::test]
async fn shutdown_stops_accepting_and_ends_the_server_within_its_grace() {
    let hub = Hub::default();
    let mut srv = start(
        hub,
        ForwardConfig {
            shutdown_drain_ms: 200,
            ..Default::default()
        },
    )
    .await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("t", EventTime::new(1, 0), &record(1), Some("before"))
        .await
        .unwrap();
    c.wait_ack("before", ACK_WAIT).await.unwrap();
    srv.shutdown.cancel();
    let addr = srv.addr;
    tokio::time::timeout(Duration::from_secs(5), &mut srv.task)
        .await
        .expect("server ends within its grace period")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_chunks_over_several_connections_all_arrive_and_are_acked() {
    use std::collections::HashSet;
    use tidegate_forward::codec::encode::{
        packed_entries, write_packed_forward, EntriesWrap, MessageOption,
    };
    const CONNS: usize = 4;
    const CHUNKS: usize = 50;
    const PER_CHUNK: usize = 20;
    let hub = Hub::default();
    let mut sub = subscribe(&hub, "logs.>", CONNS * CHUNKS * PER_CHUNK);
    let srv = start(
        hub,
        ForwardConfig {
            max_inflight_chunks: 4,
            ..Default::default()
        },
    )
    .await;
    let mut tasks = Vec::new();
    for conn in 0..CONNS {
        let c = ForwardClient::connect(srv.addr, ClientOptions::default())
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let (mut w, mut r) = c.into_split();
            let reader = tokio::spawn(async move {
                let mut acked = HashSet::new();
                while acked.len() < CHUNKS {
                    acked.insert(r.next_ack().await.unwrap());
                }
                acked
            });
            for k in 0..CHUNKS {
                let recs: Vec<Vec<u8>> = (0..PER_CHUNK)
                    .map(|i| record((conn * CHUNKS + k) * PER_CHUNK + i))
                    .collect();
                let entries: Vec<(EventTime, &[u8])> = recs
                    .iter()
                    .map(|r| (EventTime::new(1, 0), r.as_slice()))
                    .collect();
                let chunk = format!("{conn}-{k}");
                let mut frame = Vec::new();
                let opt = MessageOption {
                    chunk: Some(&chunk),
                    ..Default::default()
                };
                write_packed_forward(
                    &mut frame,
                    "p",
                    &packed_entries(&entries, TimeForm::FixExt8),
                    EntriesWrap::Str32,
                    &opt,
                );
                w.write_all(&frame).await.unwrap();
            }
            let acked = tokio::time::timeout(ACK_WAIT, reader)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(acked.len(), CHUNKS);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = recv_n(&mut sub, CONNS * CHUNKS * PER_CHUNK).await;
    let ids: HashSet<u64> = got
        .iter()
        .map(|m| json_of(m)["i"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), CONNS * CHUNKS * PER_CHUNK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_decoded_in_block_in_place_are_delivered_and_acked() {
    const N: usize = 60_000; // ~5 MiB of entries: above the blocking-decode threshold
    let hub = Hub::default();
    let srv = start(hub.clone(), ForwardConfig::default()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let rec = record(123_456);
    let entries: Vec<(EventTime, &[u8])> = (0..N)
        .map(|_| (EventTime::new(1, 0), rec.as_slice()))
        .collect();
    c.send_compressed_packed_forward("big", &entries, Some("big"))
        .await
        .unwrap();
    c.send_packed_forward("big", &entries, Some("big2"))
        .await
        .unwrap();
    c.wait_ack("big", ACK_WAIT).await.unwrap();
    c.wait_ack("big2", ACK_WAIT).await.unwrap();
    assert_eq!(hub.metrics().published.get(), 2 * N as u64);
}
