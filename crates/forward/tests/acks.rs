//! Acks follow delivery: a chunk is acked only after every routed sink
//! acknowledged every event of it; a failing sink means no ack and a closed
//! connection; a stalled sink holds the ack back and, past the bound of
//! in-flight chunks, stops the connection from reading.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use tidegate_forward::codec::EventTime;
use tidegate_forward::{ClientOptions, ForwardClient, ForwardConfig};
use tidegate_hub::{
    AckToken, DeliveryError, Hub, RouteConfig, RouteTable, SharedMessage, Sink, SinkFuture,
};

const WAIT: Duration = Duration::from_secs(10);

/// A sink that fails every message.
struct FailingSink;

impl Sink for FailingSink {
    fn name(&self) -> &str {
        "failing"
    }
    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        ack.complete(Err(DeliveryError::Failed {
            sink: "failing".into(),
            reason: "broker down".into(),
        }));
        Box::pin(async {})
    }
}

/// A sink that holds every ack until released.
#[derive(Default)]
struct StallingSink {
    held: Mutex<Vec<AckToken>>,
}

impl StallingSink {
    fn release_all(&self) {
        for t in self.held.lock().drain(..) {
            t.succeed();
        }
    }
    fn held(&self) -> usize {
        self.held.lock().len()
    }
}

impl Sink for StallingSink {
    fn name(&self) -> &str {
        "stalling"
    }
    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        self.held.lock().push(ack);
        Box::pin(async {})
    }
}

fn hub_with(sink: Arc<dyn Sink>) -> Hub {
    let routes = RouteTable::build(
        &[RouteConfig {
            topics: "logs.>".into(),
            sink: sink.name().into(),
        }],
        &[sink],
    )
    .unwrap();
    Hub::new(routes)
}

/// The default config: tags become `logs.<tag>`, which the routes match.
fn config() -> ForwardConfig {
    ForwardConfig::default()
}

fn entries(recs: &[Vec<u8>]) -> Vec<(EventTime, &[u8])> {
    recs.iter()
        .map(|r| (EventTime::new(1, 0), r.as_slice()))
        .collect()
}

#[tokio::test]
async fn a_failing_sink_gets_no_ack_and_the_connection_closes() {
    let hub = hub_with(Arc::new(FailingSink));
    let srv = start(hub.clone(), config()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let recs: Vec<Vec<u8>> = (0..3).map(record).collect();
    c.send_packed_forward("app", &entries(&recs), Some("never"))
        .await
        .unwrap();
    let r = c.wait_ack("never", WAIT).await;
    assert!(r.is_err(), "a failed chunk must not be acked: {r:?}");
    assert_eq!(
        hub.metrics()
            .listener("forward")
            .error_count("delivery_failed"),
        1
    );
}

#[tokio::test]
async fn a_stalled_sink_holds_the_ack_until_it_acknowledges() {
    let sink = Arc::new(StallingSink::default());
    let hub = hub_with(sink.clone());
    let srv = start(hub, config()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let recs: Vec<Vec<u8>> = (0..4).map(record).collect();
    c.send_forward("app", &entries(&recs), Some("held"))
        .await
        .unwrap();
    assert!(
        c.wait_ack("held", Duration::from_millis(300))
            .await
            .is_err(),
        "acked before the sink had it"
    );
    assert_eq!(sink.held(), 4);
    sink.release_all();
    c.wait_ack("held", WAIT).await.unwrap();
}

#[tokio::test]
async fn a_partly_failed_chunk_is_not_acked() {
    // Two routes: one fine (null), one stalling whose tokens are then dropped.
    let stall = Arc::new(StallingSink::default());
    let null: Arc<dyn Sink> = Arc::new(tidegate_hub::NullSink);
    let routes = RouteTable::build(
        &[
            RouteConfig {
                topics: "logs.>".into(),
                sink: "null".into(),
            },
            RouteConfig {
                topics: "logs.>".into(),
                sink: "stalling".into(),
            },
        ],
        &[null, stall.clone()],
    )
    .unwrap();
    let srv = start(Hub::new(routes), config()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let recs: Vec<Vec<u8>> = (0..2).map(record).collect();
    c.send_packed_forward("app", &entries(&recs), Some("half"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Dropping the held tokens fails the group (a sink lost the messages).
    drop(std::mem::take(&mut *stall.held.lock()));
    assert!(c.wait_ack("half", Duration::from_secs(2)).await.is_err());
}

#[tokio::test]
async fn a_chunk_past_the_ack_timeout_closes_the_connection_unacked() {
    let sink = Arc::new(StallingSink::default());
    let hub = hub_with(sink.clone());
    let srv = start(
        hub.clone(),
        ForwardConfig {
            ack_timeout_ms: 200,
            ..config()
        },
    )
    .await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("app", EventTime::new(1, 0), &record(1), Some("late"))
        .await
        .unwrap();
    assert!(c.wait_ack("late", WAIT).await.is_err());
    assert_eq!(
        hub.metrics().listener("forward").error_count("ack_timeout"),
        1
    );
    // Acknowledging after the timeout changes nothing.
    sink.release_all();
}

#[tokio::test]
async fn reading_pauses_while_the_in_flight_bound_is_reached() {
    let sink = Arc::new(StallingSink::default());
    let hub = hub_with(sink.clone());
    let srv = start(
        hub.clone(),
        ForwardConfig {
            max_inflight_chunks: 2,
            ..config()
        },
    )
    .await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let recs: Vec<Vec<u8>> = (0..10).map(record).collect();
    for i in 0..5 {
        c.send_packed_forward("app", &entries(&recs), Some(&format!("c{i}")))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Only two chunks' events were taken in while their acks wait.
    assert_eq!(sink.held(), 20);
    assert_eq!(hub.metrics().published.get(), 20);
    // Releasing lets the rest through, in order of arrival.
    let mut acked = Vec::new();
    tokio::time::timeout(WAIT, async {
        while acked.len() < 5 {
            sink.release_all();
            if let Ok(Ok(chunk)) =
                tokio::time::timeout(Duration::from_millis(50), c.read_ack()).await
            {
                acked.push(chunk);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {acked:?} of the 5 chunks acked within {WAIT:?}"));
    acked.sort();
    assert_eq!(acked, vec!["c0", "c1", "c2", "c3", "c4"]);
    assert_eq!(hub.metrics().published.get(), 50);
}

/// Fails messages on `logs.bad`, acknowledges everything else.
struct SelectiveSink;

impl Sink for SelectiveSink {
    fn name(&self) -> &str {
        "selective"
    }
    fn send(&self, msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        if msg.topic == "logs.bad" {
            ack.complete(Err(DeliveryError::Failed {
                sink: "selective".into(),
                reason: "refused".into(),
            }));
        } else {
            ack.succeed();
        }
        Box::pin(async {})
    }
}

#[tokio::test]
async fn delivered_chunks_are_acked_before_a_failed_one_closes_the_connection() {
    let srv = start(hub_with(Arc::new(SelectiveSink)), config()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    // Both chunks in one write, so both complete in the same poll.
    let rec = record(1);
    let mut bytes = Vec::new();
    for (tag, chunk) in [("good", "g1"), ("bad", "b1")] {
        let opt = tidegate_forward::codec::encode::MessageOption {
            chunk: Some(chunk),
            ..Default::default()
        };
        tidegate_forward::codec::encode::write_message(
            &mut bytes,
            tag,
            EventTime::new(1, 0),
            tidegate_forward::codec::encode::TimeForm::FixExt8,
            &rec,
            &opt,
        );
    }
    c.send_raw(&bytes).await.unwrap();
    c.wait_ack("g1", WAIT).await.unwrap();
    assert!(
        c.read_ack().await.is_err(),
        "the failed chunk must not be acked"
    );
}

/// A sink that acknowledges every message at once.
struct AckingSink;

impl Sink for AckingSink {
    fn name(&self) -> &str {
        "acking"
    }
    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        ack.succeed();
        Box::pin(async {})
    }
}

#[tokio::test]
async fn a_chunk_id_that_is_not_utf8_comes_back_byte_for_byte() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let srv = start(hub_with(Arc::new(AckingSink)), config()).await;
    let chunk: &[u8] = b"\xff\xfe\x00c1";
    // Message mode: [tag, time, record, {"chunk": <str of `chunk`'s bytes>}].
    let mut frame = vec![0x94, 0xa3, b'a', b'p', b'p', 0x01];
    frame.extend_from_slice(&record(1));
    frame.extend_from_slice(&[0x81, 0xa5, b'c', b'h', b'u', b'n', b'k', 0xa0 | 5]);
    frame.extend_from_slice(chunk);
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(&frame).await.unwrap();
    let mut expected = vec![0x81, 0xa3, b'a', b'c', b'k', 0xa0 | 5];
    expected.extend_from_slice(chunk);
    let mut reply = vec![0u8; expected.len()];
    tokio::time::timeout(WAIT, s.read_exact(&mut reply))
        .await
        .expect("no ack in time")
        .unwrap();
    assert_eq!(
        reply, expected,
        "the ack must echo the chunk's bytes unchanged"
    );
}
