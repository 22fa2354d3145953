//! `[sinks.s2s]` against Tidegate's own S2S server, over RAW and HTTP:
//! every routed message arrives once as a FlowFile (payload, attributes,
//! `tidegate.topic`) and its source is acknowledged only after the server
//! confirmed; a full input port stops the sink, fills its queue and holds
//! the sources back, until the port has room again.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{start, test_config};
use tidegate_hub::{
    AckGroup, AckToken, Hub, Message, Pattern, RouteTable, SharedMessage, Sink, SinkFuture,
    SubscriberOptions,
};
use tidegate_s2s::sink::{S2sSink, S2sSinkConfig, Transport, TOPIC_ATTRIBUTE};
use tokio::sync::Notify;

const LIMIT: Duration = Duration::from_secs(20);

/// A sender: a hub routing `out.>` to an S2S sink with `config`.
fn sender(config: S2sSinkConfig) -> (Hub, Arc<S2sSink>) {
    let sink = Arc::new(S2sSink::new(config).unwrap());
    let mut routes = RouteTable::default();
    routes.add(Pattern::parse("out.>").unwrap(), sink.clone());
    (Hub::new(routes), sink)
}

fn sink_config(url: String, transport: Transport) -> S2sSinkConfig {
    S2sSinkConfig {
        url: vec![url],
        port: "input".into(),
        transport,
        batch_max_flowfiles: 7,
        timeout_ms: 5_000,
        retry_min_ms: 20,
        retry_max_ms: 200,
        ..S2sSinkConfig::default()
    }
}

async fn delivers(transport: Transport, compress: bool) {
    let receiver = Hub::default();
    let mut got_sub = receiver.subscriber(SubscriberOptions {
        capacity: 10_000,
        ..Default::default()
    });
    got_sub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), receiver.clone()).await;
    let mut config = sink_config(srv.url(), transport);
    config.compress = compress;
    let (hub, sink) = sender(config);

    let n = 100usize;
    let mut groups = Vec::new();
    for i in 0..n {
        let group = AckGroup::new();
        let m = Message::new(format!("out.t{}", i % 3), format!("payload {i}"))
            .with_attribute("i", i.to_string());
        hub.publish_acked(m, &group).await.unwrap();
        groups.push(group);
    }
    for g in groups {
        tokio::time::timeout(LIMIT, g.wait())
            .await
            .expect("acknowledged")
            .expect("delivered");
    }
    let mut got: Vec<SharedMessage> = Vec::new();
    while got.len() < n {
        tokio::time::timeout(LIMIT, got_sub.recv_many(&mut got, 1000))
            .await
            .expect("every FlowFile on the receiver")
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(got_sub.is_empty(), "exactly once without failures");
    got.sort_by_key(|m| m.attribute("i").unwrap().parse::<usize>().unwrap());
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.payload, format!("payload {i}").as_bytes());
        assert_eq!(
            m.attribute(TOPIC_ATTRIBUTE),
            Some(format!("out.t{}", i % 3).as_str())
        );
    }
    let metrics = sink.metrics();
    assert_eq!(metrics.delivered.get(), n as u64);
    assert!(metrics.transactions.get() >= (n / 7) as u64);
    assert_eq!(metrics.queued.get(), 0);
    let site = sink.peers().site().expect("discovery happened");
    assert_eq!(site.port_id, srv.ports.inputs()[0].id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_delivers_every_message_once() {
    delivers(Transport::Raw, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_compressed_delivers_every_message_once() {
    delivers(Transport::Raw, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_delivers_every_message_once() {
    delivers(Transport::Http, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_compressed_delivers_every_message_once() {
    delivers(Transport::Http, true).await;
}

/// The receiver's route: full (and holding every send) until opened.
#[derive(Default)]
struct Gate {
    open: AtomicBool,
    opened: Notify,
}

impl Sink for Gate {
    fn name(&self) -> &str {
        "gate"
    }

    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        Box::pin(async move {
            while !self.open.load(Ordering::Acquire) {
                let wait = self.opened.notified();
                if self.open.load(Ordering::Acquire) {
                    break;
                }
                wait.await;
            }
            ack.succeed();
        })
    }

    fn is_full(&self) -> bool {
        !self.open.load(Ordering::Acquire)
    }
}

async fn backpressure(transport: Transport) {
    let gate = Arc::new(Gate::default());
    let mut routes = RouteTable::default();
    routes.add(Pattern::parse("s2s.input").unwrap(), gate.clone());
    let receiver = Hub::new(routes);
    let got = receiver.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), receiver.clone()).await;
    let mut config = sink_config(srv.url(), transport);
    config.queue_max_messages = 20;
    config.batch_max_flowfiles = 5;
    config.connections = 1;
    let (hub, sink) = sender(config);

    let n = 100usize;
    let publisher = tokio::spawn({
        let hub = hub.clone();
        async move {
            let group = AckGroup::new();
            for i in 0..n {
                hub.publish_acked(Message::new("out.x", format!("{i}")), &group)
                    .await
                    .unwrap();
            }
            group.wait().await
        }
    });
    // The port refuses (destination full): nothing is delivered, the
    // sink's queue fills and the publisher waits in publish.
    common::wait_until("the sink's queue is full", LIMIT, || sink.is_full()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!publisher.is_finished(), "the source is held back");
    assert_eq!(sink.metrics().delivered.get(), 0);
    assert!(got.is_empty());
    assert!(sink.metrics().destination_full.get() > 0);
    assert!(sink.metrics().error_count("destination_full") > 0);
    // Bounded: the queue (20), a batch in the collector, one in the batch
    // channel and one in the worker (3 x 5), and the one send waiting.
    let queued = sink.metrics().queued.get();
    assert!((20..=20 + 3 * 5 + 1).contains(&queued), "queued {queued}");

    gate.open.store(true, Ordering::Release);
    gate.opened.notify_waiters();
    tokio::time::timeout(LIMIT, publisher)
        .await
        .expect("the source finishes once the port has room")
        .unwrap()
        .expect("every message acknowledged");
    assert_eq!(sink.metrics().delivered.get(), n as u64);
    let mut all = Vec::new();
    while all.len() < n {
        got.recv_many(&mut all, 1000).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_backpressure_while_the_port_is_full() {
    backpressure(Transport::Raw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_backpressure_while_the_port_is_full() {
    backpressure(Transport::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_port_is_retried_and_never_acknowledged() {
    let srv = start(test_config(), Hub::default()).await;
    let mut config = sink_config(srv.url(), Transport::Raw);
    config.port = "no-such-port".into();
    let (hub, sink) = sender(config);
    let group = AckGroup::new();
    hub.publish_acked(Message::new("out.x", "lost?"), &group)
        .await
        .unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(800), group.wait()).await;
    assert!(waited.is_err(), "no acknowledgement for an unknown port");
    assert!(sink.metrics().error_count("refused") > 0);
    assert_eq!(sink.metrics().delivered.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_url_falls_back_to_the_next() {
    let receiver = Hub::default();
    let got = receiver.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), receiver.clone()).await;
    // A port nobody listens on (bound, then released).
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = sink_config(format!("http://{dead}/nifi"), Transport::Http);
    config.url.push(srv.url());
    let (hub, sink) = sender(config);
    let group = AckGroup::new();
    hub.publish_acked(Message::new("out.x", "via the second"), &group)
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, group.wait())
        .await
        .expect("acknowledged")
        .expect("delivered");
    assert_eq!(got.recv().await.unwrap().payload, &b"via the second"[..]);
    let peer = &sink.peers().site().unwrap().peers[0];
    assert_eq!(peer.port, srv.http.port(), "the live NiFi's peer list");
}
