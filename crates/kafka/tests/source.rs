//! The Kafka source against a real broker (started by the test): records
//! reach hub subscribers and routed sinks with their key, timestamp,
//! headers and partition/offset; offsets are committed only behind
//! acknowledgements, so a restarted source resumes where the last one
//! stopped and a consumer joining the group mid-stream loses nothing; a
//! sink that does not acknowledge pauses the consumer at `max_in_flight`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::message::Message as _;
use tidegate_hub::{
    AckToken, Hub, Pattern, RouteTable, SharedMessage, Sink, SinkFuture, Subscriber,
    SubscriberOptions,
};
use tidegate_kafka::source::record::{ATTR_OFFSET, ATTR_PARTITION};
use tidegate_kafka::testing::{
    create_topic, group_progress, produce, read_topic, TestBroker, TestRecord,
};
use tidegate_kafka::{KafkaConfig, KafkaSink, KafkaSource, KafkaSourceConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

fn shared_broker() -> &'static TestBroker {
    TestBroker::shared().expect("start the test broker (run scripts/setup/kafka.sh)")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// A source running into a hub until stopped.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

fn start(config: KafkaSourceConfig, hub: &Hub) -> Running {
    let source = KafkaSource::new(config).expect("kafka source");
    source.register_metrics(hub.metrics());
    let (stop, stopped) = oneshot::channel::<()>();
    let hub = hub.clone();
    let task = tokio::spawn(async move {
        source
            .run(
                hub,
                async {
                    let _ = stopped.await;
                },
                Duration::from_secs(10),
            )
            .await
            .expect("source ran");
    });
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the source stops in time")
            .unwrap();
    }
}

fn big_subscriber(hub: &Hub, pattern: &str) -> Subscriber {
    let mut s = hub.subscriber(SubscriberOptions {
        capacity: 100_000,
        ..SubscriberOptions::default()
    });
    s.subscribe(pattern).unwrap();
    s
}

/// (partition, offset) of a message the source published.
fn position(m: &SharedMessage) -> (i32, i64) {
    (
        m.attribute(ATTR_PARTITION).unwrap().parse().unwrap(),
        m.attribute(ATTR_OFFSET).unwrap().parse().unwrap(),
    )
}

/// Receives until `done` says so or `timeout` passes.
async fn receive_until(
    sub: &Subscriber,
    out: &mut Vec<SharedMessage>,
    timeout: Duration,
    done: impl Fn(&[SharedMessage]) -> bool,
) {
    let deadline = Instant::now() + timeout;
    while !done(out) && Instant::now() < deadline {
        let mut batch = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_millis(200), sub.recv_many(&mut batch, 1024)).await;
        out.extend(batch);
    }
}

fn records(n: usize, tag: &str) -> Vec<TestRecord> {
    (0..n)
        .map(|i| TestRecord {
            key: Some(format!("k{}", i % 5).into_bytes()),
            value: format!("{{\"tag\":\"{tag}\",\"i\":{i}}}").into_bytes(),
            timestamp_ms: Some(1_700_000_000_000 + i as i64),
            headers: vec![("trace".into(), format!("t{i}"))],
            ..TestRecord::default()
        })
        .collect()
}

/// Waits until `group` committed the end of every partition of `topic`.
async fn wait_all_committed(bootstrap: &str, group: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (b, g, t) = (bootstrap.to_owned(), group.to_owned(), topic.to_owned());
        let progress = blocking(move || group_progress(&b, &g, &t).unwrap()).await;
        if progress.iter().all(|(_, c, hi)| c.unwrap_or(0) == *hi) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not everything committed: {progress:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_reach_subscribers_and_a_routed_sink_with_their_key_headers_and_offsets() {
    let broker = shared_broker();
    let bootstrap = broker.bootstrap();
    let (topic, out_topic) = ("src-basic", "src-basic-out");
    let b = bootstrap.clone();
    blocking(move || {
        create_topic(&b, topic, 3).unwrap();
        produce(&b, topic, &records(300, "basic")).unwrap();
    })
    .await;

    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: out_topic.into(),
            linger_ms: 5,
            ..KafkaConfig::for_brokers(&bootstrap)
        })
        .unwrap(),
    );
    let hub = tidegate_kafka::testing::hub_routing_to("kafka.>", &sink);
    let sub = big_subscriber(&hub, "kafka.src-basic");
    let group = "g-basic";
    let source = start(
        KafkaSourceConfig {
            group_id: group.into(),
            ..KafkaSourceConfig::for_topics(&bootstrap, &[topic])
        },
        &hub,
    );
    let mut got = Vec::new();
    receive_until(&sub, &mut got, Duration::from_secs(30), |g| g.len() >= 300).await;
    assert_eq!(got.len(), 300, "every record reached the subscriber once");
    let mut per_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for m in &got {
        let (p, o) = position(m);
        per_partition.entry(p).or_default().push(o);
        let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        let i = v["i"].as_u64().unwrap();
        assert_eq!(m.key.as_deref(), Some(format!("k{}", i % 5).as_bytes()));
        assert_eq!(m.timestamp_ns, (1_700_000_000_000 + i) * 1_000_000);
        assert_eq!(m.attribute("trace"), Some(format!("t{i}").as_str()));
        assert_eq!(m.attribute("kafka.topic"), Some(topic));
    }
    for (p, offsets) in &per_partition {
        let want: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, &want, "partition {p} in order, none missing");
    }

    // The routed sink acknowledged every record, so every offset commits.
    wait_all_committed(&bootstrap, group, topic).await;
    let b = bootstrap.clone();
    let out =
        blocking(move || read_topic(&b, out_topic, 300, Duration::from_secs(30)).unwrap()).await;
    assert_eq!(out.len(), 300, "every record reached the sink's topic");
    assert!(out
        .iter()
        .all(|r| r.headers().is_some() && r.key().is_some()));
    source.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_source_resumes_from_its_committed_offsets() {
    let broker = shared_broker();
    let bootstrap = broker.bootstrap();
    let topic = "src-restart";
    let b = bootstrap.clone();
    blocking(move || {
        create_topic(&b, topic, 2).unwrap();
        produce(&b, topic, &records(200, "first")).unwrap();
    })
    .await;
    let config = KafkaSourceConfig {
        group_id: "g-restart".into(),
        ..KafkaSourceConfig::for_topics(&bootstrap, &[topic])
    };

    let hub = Hub::default();
    let sub = big_subscriber(&hub, "kafka.>");
    let source = start(config.clone(), &hub);
    let mut first = Vec::new();
    receive_until(&sub, &mut first, Duration::from_secs(30), |g| {
        g.len() >= 200
    })
    .await;
    assert_eq!(first.len(), 200);
    source.stop().await;

    let b = bootstrap.clone();
    blocking(move || produce(&b, topic, &records(100, "second")).unwrap()).await;
    let hub = Hub::default();
    let sub = big_subscriber(&hub, "kafka.>");
    let source = start(config, &hub);
    let mut second = Vec::new();
    receive_until(&sub, &mut second, Duration::from_secs(30), |g| {
        g.iter()
            .filter(|m| m.payload.starts_with(b"{\"tag\":\"second\""))
            .count()
            >= 100
    })
    .await;
    // A moment for anything that should not come.
    receive_until(&sub, &mut second, Duration::from_millis(500), |_| false).await;
    source.stop().await;
    let again = second
        .iter()
        .filter(|m| m.payload.starts_with(b"{\"tag\":\"first\""))
        .count();
    let new = second.len() - again;
    assert_eq!(new, 100, "every new record, once");
    assert_eq!(
        again, 0,
        "a clean stop committed everything: nothing consumed twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_joining_the_group_mid_stream_loses_no_record() {
    let broker = shared_broker();
    let bootstrap = broker.bootstrap();
    let topic = "src-rebalance";
    let b = bootstrap.clone();
    blocking(move || create_topic(&b, topic, 4).unwrap()).await;
    // Produced in batches of 100 every 100 ms, on every partition, until the
    // joining consumer has taken over some (at most 20,000 records).
    let enough = Arc::new(AtomicBool::new(false));
    let (b, stop) = (bootstrap.clone(), enough.clone());
    let producing = tokio::task::spawn_blocking(move || {
        let p = tidegate_kafka::testing::producer(&b).unwrap();
        let mut sent = 0usize;
        while sent < 20_000 && !(stop.load(Ordering::Acquire) && sent >= 2_000) {
            for mut r in records(100, "rb") {
                r.partition = Some(sent as i32 % 4);
                tidegate_kafka::testing::send(&p, topic, &r).unwrap();
                sent += 1;
            }
            rdkafka::producer::Producer::flush(&p, Duration::from_secs(10)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        sent
    });
    let config = KafkaSourceConfig {
        group_id: "g-rebalance".into(),
        ..KafkaSourceConfig::for_topics(&bootstrap, &[topic])
    };
    // Two nodes: two hubs, one source each, same group.
    let (hub_a, hub_b) = (Hub::default(), Hub::default());
    let (sub_a, sub_b) = (
        big_subscriber(&hub_a, "kafka.>"),
        big_subscriber(&hub_b, "kafka.>"),
    );
    let a = start(config.clone(), &hub_a);
    let mut got_a = Vec::new();
    receive_until(&sub_a, &mut got_a, Duration::from_secs(30), |g| {
        g.len() >= 500
    })
    .await;
    assert!(got_a.len() >= 500, "the first consumer is consuming");
    let b_src = start(config, &hub_b);
    let mut got_b = Vec::new();
    receive_until(&sub_b, &mut got_b, Duration::from_secs(40), |g| {
        g.len() >= 200
    })
    .await;
    enough.store(true, Ordering::Release);
    let total = producing.await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(40);
    let mut seen: HashMap<(i32, i64), usize> = HashMap::new();
    loop {
        receive_until(&sub_a, &mut got_a, Duration::from_millis(300), |_| false).await;
        receive_until(&sub_b, &mut got_b, Duration::from_millis(300), |_| false).await;
        seen.clear();
        for m in got_a.iter().chain(&got_b) {
            *seen.entry(position(m)).or_default() += 1;
        }
        if seen.len() >= total || Instant::now() > deadline {
            break;
        }
    }
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    eprintln!(
        "rebalance: {total} records, node A got {}, node B got {}, {duplicates} duplicates",
        got_a.len(),
        got_b.len()
    );
    assert!(
        got_b.len() >= 200,
        "the joining consumer took partitions over"
    );
    assert_eq!(seen.len(), total, "every record reached a node");
    wait_all_committed(&bootstrap, "g-rebalance", topic).await;
    a.stop().await;
    b_src.stop().await;
}

/// A sink that keeps every token until opened: a destination that has not
/// acknowledged yet.
#[derive(Default)]
struct GateSink {
    held: Mutex<Vec<AckToken>>,
    open: AtomicBool,
}

impl Sink for GateSink {
    fn name(&self) -> &str {
        "gate"
    }
    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        if self.open.load(Ordering::Acquire) {
            ack.succeed();
        } else {
            self.held.lock().push(ack);
        }
        Box::pin(async {})
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledging_sink_pauses_the_consumer_at_max_in_flight() {
    let broker = shared_broker();
    let bootstrap = broker.bootstrap();
    let topic = "src-pressure";
    let b = bootstrap.clone();
    blocking(move || {
        create_topic(&b, topic, 1).unwrap();
        produce(&b, topic, &records(500, "p")).unwrap();
    })
    .await;
    let gate = Arc::new(GateSink::default());
    let mut routes = RouteTable::default();
    routes.add(Pattern::parse("kafka.>").unwrap(), gate.clone());
    let hub = Hub::new(routes);
    let sub = big_subscriber(&hub, "kafka.>");
    let max = 20;
    let group = "g-pressure";
    let source = start(
        KafkaSourceConfig {
            group_id: group.into(),
            max_in_flight: max,
            ..KafkaSourceConfig::for_topics(&bootstrap, &[topic])
        },
        &hub,
    );
    let mut got = Vec::new();
    receive_until(&sub, &mut got, Duration::from_secs(20), |g| g.len() >= max).await;
    // Give it time to (wrongly) go on.
    receive_until(&sub, &mut got, Duration::from_secs(2), |_| false).await;
    assert_eq!(
        got.len(),
        max,
        "published exactly up to the bound, then paused"
    );
    let b = bootstrap.clone();
    let progress = blocking(move || group_progress(&b, group, topic).unwrap()).await;
    assert!(
        progress[0].1.unwrap_or(0) == 0,
        "nothing committed past the first unacknowledged record: {progress:?}"
    );

    gate.open.store(true, Ordering::Release);
    for t in gate.held.lock().drain(..) {
        t.succeed();
    }
    receive_until(&sub, &mut got, Duration::from_secs(30), |g| g.len() >= 500).await;
    assert_eq!(got.len(), 500, "resumed after the acknowledgements");
    wait_all_committed(&bootstrap, group, topic).await;
    source.stop().await;
}
