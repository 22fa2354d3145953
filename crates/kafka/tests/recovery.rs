//! The Kafka sink against a real broker (started by the test) when things go
//! wrong, and what it tells `/readyz` and `config --probe`:
//!
//! - a fatal producer error (raised through librdkafka's own test hook, the
//!   path a fenced or out-of-sequence idempotent producer takes) recreates
//!   the producer, and every record not yet acknowledged is produced again:
//!   nothing acknowledged is missing from Kafka;
//! - health is "no broker connection" while the broker is down and "queue
//!   full" while the room is;
//! - topics come from the default topic, the template and its allow-list,
//!   keys from `message_key_field`; `probe` reports what exists.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::{Message as _, OwnedMessage};
use tidegate_hub::{AckGroup, Message, Sink, SinkHealth};
use tidegate_kafka::testing::{hub_routing_to, read_topic, record_count, TestBroker};
use tidegate_kafka::{probe, KafkaConfig, KafkaSink};

fn shared_broker() -> &'static TestBroker {
    TestBroker::shared().expect("start the test broker (run scripts/setup/kafka.sh)")
}

async fn read_back(bootstrap: String, topic: &str, n: usize) -> Vec<OwnedMessage> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_topic(&bootstrap, &topic, n, Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("read the topic back")
}

fn payloads(records: &[OwnedMessage]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.payload().unwrap_or_default().to_vec()).unwrap())
        .collect()
}

/// Waits until `sink.health()` is `want` (polling, bounded by `limit`).
async fn health_becomes(sink: &KafkaSink, want: SinkHealth, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let now = sink.health();
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "health stayed {now:?}, expected {want:?} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn not_ready(reason: &str) -> SinkHealth {
    SinkHealth::NotReady(reason.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_recreates_the_producer_and_resends_every_queued_record() {
    let broker = shared_broker();
    // A long linger: the records are still in the producer's queue when the
    // fatal error purges it, so every one of them must be produced again.
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: "recovery-queued".into(),
            linger_ms: 3_000,
            ..KafkaConfig::for_brokers(broker.bootstrap())
        })
        .unwrap(),
    );
    let hub = hub_routing_to("logs.>", &sink);
    let n = 300;
    let group = AckGroup::new();
    for i in 0..n {
        hub.publish_acked(Message::new("logs.queued", format!("q{i}")), &group)
            .await
            .unwrap();
    }
    assert_eq!(sink.in_flight(), n as i64);
    assert!(sink.inject_fatal_error("test: producer fenced"));
    tokio::time::timeout(Duration::from_secs(60), group.wait())
        .await
        .expect("acks after the recreation")
        .expect("every record acknowledged, none failed");
    assert_eq!(sink.producer_generation(), 1);
    assert_eq!(sink.metrics().producer_recreations.get(), 1);
    assert_eq!(sink.metrics().resent.get(), n as u64, "all were queued");
    assert_eq!(sink.metrics().failed.get(), 0);
    sink.flush(Duration::from_secs(5)).await;
    assert_eq!(sink.in_flight(), 0);

    // The new producer carries on.
    let after = AckGroup::new();
    hub.publish_acked(Message::new("logs.queued", "after"), &after)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), after.wait())
        .await
        .unwrap()
        .unwrap();

    let got = payloads(&read_back(broker.bootstrap(), "recovery-queued", n + 1).await);
    let want: BTreeSet<String> = (0..n)
        .map(|i| format!("q{i}"))
        .chain(["after".to_owned()])
        .collect();
    let have: BTreeSet<String> = got.iter().cloned().collect();
    let missing: Vec<&String> = want.difference(&have).collect();
    assert!(missing.is_empty(), "missing from Kafka: {missing:?}");
    let text = hub.metrics().render();
    assert!(
        text.contains("tidegate_kafka_producer_recreations_total 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_errors_under_load_lose_no_acknowledged_record() {
    let broker = shared_broker();
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: "recovery-load".into(),
            linger_ms: 50,
            queue_max_messages: 2_000,
            ..KafkaConfig::for_brokers(broker.bootstrap())
        })
        .unwrap(),
    );
    let hub = hub_routing_to("logs.>", &sink);
    const CHUNKS: usize = 60;
    const PER_CHUNK: usize = 100;
    const WINDOW: usize = 8;
    // Chunks published in a window, each acknowledged as one group, as a
    // Forward connection does; the fatal errors hit while chunks are in flight.
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel();
    let publishing = {
        let (hub, sink) = (hub.clone(), sink.clone());
        tokio::spawn(async move {
            let window = Arc::new(tokio::sync::Semaphore::new(WINDOW));
            for c in 0..CHUNKS {
                let permit = window.clone().acquire_owned().await.unwrap();
                let group = AckGroup::new();
                for i in 0..PER_CHUNK {
                    hub.publish_acked(Message::new("logs.load", format!("c{c}-{i}")), &group)
                        .await
                        .unwrap();
                }
                // Twice, mid-stream, right after a chunk was handed over
                // (it lingers in the producer), with earlier ones in flight.
                if c == CHUNKS / 4 || c == CHUNKS / 2 {
                    assert!(sink.in_flight() > 0, "records in flight at the error");
                    assert!(sink.inject_fatal_error("test: out of sequence under load"));
                }
                let acked_tx = acked_tx.clone();
                tokio::spawn(async move {
                    let result = group.wait().await;
                    let _ = acked_tx.send((c, result));
                    drop(permit);
                });
                // Bounded rate: ~2,000 records/s.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.len() < CHUNKS {
        let left = deadline.saturating_duration_since(Instant::now());
        let (c, result) = tokio::time::timeout(left, acked_rx.recv())
            .await
            .expect("every chunk settles in time")
            .unwrap();
        result.unwrap_or_else(|e| panic!("chunk {c} failed: {e}"));
        acked.push(c);
    }
    publishing.await.unwrap();
    assert_eq!(sink.metrics().producer_recreations.get(), 2);
    assert!(
        sink.metrics().resent.get() > 0,
        "queued records were resent"
    );
    assert_eq!(sink.metrics().failed.get(), 0);

    let want: HashSet<String> = acked
        .iter()
        .flat_map(|c| (0..PER_CHUNK).map(move |i| format!("c{c}-{i}")))
        .collect();
    let have: HashSet<String> =
        payloads(&read_back(broker.bootstrap(), "recovery-load", CHUNKS * PER_CHUNK).await)
            .into_iter()
            .collect();
    let missing: Vec<&String> = want.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing from Kafka, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

/// A producer that holds records and reports nothing for
/// `stall_timeout_ms` is replaced, and every record it held is produced
/// again through the next one: with the broker frozen (SIGSTOP: its
/// connections stay open and nothing answers, so librdkafka reports nothing
/// for its request timeout, 30 s) the sink replaces its producer within
/// the stall timeout, fails nothing, and once the broker runs again every
/// record is acknowledged and in Kafka. Deliveries that flow, for longer
/// than the stall timeout, replace nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_that_reports_nothing_while_holding_records_is_replaced() {
    let broker = tokio::task::spawn_blocking(TestBroker::start)
        .await
        .unwrap()
        .expect("start a dedicated broker");
    let config = KafkaConfig {
        topic: "recovery-stall".into(),
        stall_timeout_ms: 1_500,
        ..KafkaConfig::for_brokers(broker.bootstrap())
    };
    config
        .check()
        .expect("a stall timeout longer than linger_ms");
    let sink = Arc::new(KafkaSink::new(config).unwrap());
    let hub = hub_routing_to("logs.>", &sink);

    // One record first: the topic is created and the producer connected
    // (on a cold broker that may take longer than the stall timeout, which
    // a producer younger than it is spared anyway).
    let warm = AckGroup::new();
    hub.publish_acked(Message::new("logs.stall", "warm"), &warm)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), warm.wait())
        .await
        .expect("the first ack")
        .expect("delivered");
    let stalls_before = sink.metrics().producer_stalls.get();

    // Flowing for 3 s, twice the stall timeout: no replacement.
    let flowing = AckGroup::new();
    for i in 0..60 {
        hub.publish_acked(Message::new("logs.stall", format!("f{i}")), &flowing)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::timeout(Duration::from_secs(30), flowing.wait())
        .await
        .expect("acks while the broker runs")
        .expect("none failed");
    assert_eq!(sink.metrics().producer_stalls.get(), stalls_before);

    broker.pause().expect("SIGSTOP the broker");
    let held = AckGroup::new();
    let n = 50;
    for i in 0..n {
        hub.publish_acked(Message::new("logs.stall", format!("h{i}")), &held)
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.metrics().producer_stalls.get() == stalls_before {
        assert!(
            Instant::now() < deadline,
            "the stalled producer was not replaced within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(sink.producer_generation() >= 1);
    // The replaced producer is dropped after its short drain, and what it
    // held goes to the next one: only that one can deliver them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.metrics().resent.get() < n as u64 {
        assert!(
            Instant::now() < deadline,
            "the held records were not handed to the next producer within 10 s (resent {})",
            sink.metrics().resent.get()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sink.metrics().failed.get(), 0, "a stall fails nothing");
    broker.resume().expect("SIGCONT the broker");

    tokio::time::timeout(Duration::from_secs(90), held.wait())
        .await
        .expect("acks once the broker runs again")
        .expect("every held record acknowledged, none failed");
    assert_eq!(sink.metrics().failed.get(), 0);
    // Everything in the topic: the frozen broker may still write the first
    // producer's requests once it runs, so some records are there twice.
    let bootstrap = broker.bootstrap();
    let count = tokio::task::spawn_blocking(move || record_count(&bootstrap, "recovery-stall"))
        .await
        .unwrap()
        .expect("count the topic");
    let got = payloads(&read_back(broker.bootstrap(), "recovery-stall", count as usize).await);
    let have: HashSet<String> = got.into_iter().collect();
    let missing: Vec<String> = (0..n)
        .map(|i| format!("h{i}"))
        .filter(|h| !have.contains(h))
        .collect();
    assert!(missing.is_empty(), "missing from Kafka: {missing:?}");
    let text = hub.metrics().render();
    assert!(
        text.contains("tidegate_kafka_producer_stalls_total"),
        "{text}"
    );
}

#[test]
fn a_stall_timeout_within_linger_is_refused() {
    let e = KafkaConfig {
        linger_ms: 500,
        stall_timeout_ms: 1_499,
        ..KafkaConfig::default()
    }
    .check()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("stall_timeout_ms") && e.contains("linger_ms"),
        "{e}"
    );
    let off = KafkaConfig {
        linger_ms: 500,
        stall_timeout_ms: 0,
        ..KafkaConfig::default()
    };
    assert!(off.check().is_ok(), "0 turns the watch off");
    let enough = KafkaConfig {
        linger_ms: 500,
        stall_timeout_ms: 1_500,
        ..KafkaConfig::default()
    };
    assert!(enough.check().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_ready_without_a_broker_and_ready_again_when_it_returns() {
    let mut broker = tokio::task::spawn_blocking(TestBroker::start)
        .await
        .unwrap()
        .expect("start a dedicated broker");
    let sink = KafkaSink::new(KafkaConfig {
        topic: "health.topic".into(),
        ..KafkaConfig::for_brokers(broker.bootstrap())
    })
    .unwrap();
    health_becomes(&sink, SinkHealth::Ready, Duration::from_secs(20)).await;

    broker.stop();
    health_becomes(
        &sink,
        not_ready("no broker connection"),
        Duration::from_secs(20),
    )
    .await;
    // Stays so while the broker is away.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.health(), not_ready("no broker connection"));

    let mut broker = tokio::task::spawn_blocking(move || broker.restart().map(|()| broker))
        .await
        .unwrap()
        .expect("restart the broker");
    health_becomes(&sink, SinkHealth::Ready, Duration::from_secs(40)).await;
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_ready_while_the_queue_is_full() {
    let broker = shared_broker();
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: "health-full".into(),
            queue_max_messages: 3,
            // The three records wait in librdkafka for a while: the room stays full.
            linger_ms: 3_000,
            ..KafkaConfig::for_brokers(broker.bootstrap())
        })
        .unwrap(),
    );
    health_becomes(&sink, SinkHealth::Ready, Duration::from_secs(20)).await;
    let group = AckGroup::new();
    for i in 0..3 {
        sink.send(Arc::new(Message::new("t", format!("{i}"))), group.token())
            .await;
    }
    assert_eq!(sink.health(), not_ready("queue full"));
    tokio::time::timeout(Duration::from_secs(30), group.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sink.health(), SinkHealth::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_is_not_ready_from_the_start() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sink = KafkaSink::new(KafkaConfig::for_brokers(format!("127.0.0.1:{port}"))).unwrap();
    // Several statistics intervals: it never claims a connection.
    for _ in 0..3 {
        assert_eq!(sink.health(), not_ready("no broker connection"));
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templated_topics_reach_only_the_allow_list_and_keys_come_from_the_payload() {
    let broker = shared_broker();
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: "tpl-default".into(),
            topic_template: Some("tpl_$TAG[-1]".into()),
            topics: vec!["tpl_web".into()],
            message_key_field: Some("user".into()),
            ..KafkaConfig::for_brokers(broker.bootstrap())
        })
        .unwrap(),
    );
    let hub = hub_routing_to("logs.>", &sink);
    let group = AckGroup::new();
    let sent = [
        ("logs.app.web", r#"{"user":"u1","msg":"a"}"#, None),
        ("logs.app.web", r#"{"msg":"b"}"#, Some("own")),
        ("logs.app.db", r#"{"user":7,"msg":"c"}"#, None),
        ("logs.x.new-tag", "not json", None),
    ];
    for (topic, payload, key) in sent {
        let mut m = Message::new(topic, payload);
        if let Some(k) = key {
            m = m.with_key(k);
        }
        hub.publish_acked(m, &group).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), group.wait())
        .await
        .unwrap()
        .unwrap();

    let keyed = |records: Vec<OwnedMessage>| -> Vec<(Option<String>, String)> {
        records
            .iter()
            .map(|r| {
                (
                    r.key().map(|k| String::from_utf8(k.to_vec()).unwrap()),
                    String::from_utf8(r.payload().unwrap().to_vec()).unwrap(),
                )
            })
            .collect()
    };
    let web = keyed(read_back(broker.bootstrap(), "tpl_web", 2).await);
    assert_eq!(
        web,
        [
            (Some("u1".into()), r#"{"user":"u1","msg":"a"}"#.into()),
            (Some("own".into()), r#"{"msg":"b"}"#.into()),
        ]
    );
    let fallback = keyed(read_back(broker.bootstrap(), "tpl-default", 2).await);
    assert_eq!(
        fallback,
        [
            (Some("7".into()), r#"{"user":7,"msg":"c"}"#.into()),
            (None, "not json".into()),
        ]
    );
    // No topic per tag: the derived names that were not allowed do not exist.
    let report = probe(
        &KafkaConfig {
            topic: "tpl_db".into(),
            topic_template: Some("$TOPIC".into()),
            topics: vec!["tpl_new-tag".into(), "tpl_web".into()],
            ..KafkaConfig::for_brokers(broker.bootstrap())
        },
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(report.missing_topics(), ["tpl_db", "tpl_new-tag"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reports_the_brokers_and_which_configured_topics_exist() {
    let broker = shared_broker();
    // Make one topic exist.
    let sink = KafkaSink::new(KafkaConfig {
        topic: "probe-present".into(),
        ..KafkaConfig::for_brokers(broker.bootstrap())
    })
    .unwrap();
    let group = AckGroup::new();
    sink.send(Arc::new(Message::new("x", "x")), group.token())
        .await;
    tokio::time::timeout(Duration::from_secs(30), group.wait())
        .await
        .unwrap()
        .unwrap();

    let config = KafkaConfig {
        topic: "probe-present".into(),
        topic_template: Some("probe-$TAG".into()),
        topics: vec!["probe-absent".into()],
        ..KafkaConfig::for_brokers(broker.bootstrap())
    };
    let report = probe(&config, Duration::from_secs(10)).await.unwrap();
    assert_eq!(report.brokers.len(), 1, "{report}");
    assert_eq!(report.brokers[0].port, i32::from(broker.port()));
    assert_eq!(report.topics.len(), 2);
    assert_eq!(report.topics[0].name, "probe-present");
    assert!(report.topics[0].exists && report.topics[0].partitions == 1);
    assert_eq!(report.missing_topics(), ["probe-absent"]);
    let text = report.to_string();
    assert!(text.contains("topic probe-absent: missing"), "{text}");

    // Probing created nothing.
    let again = probe(&config, Duration::from_secs(10)).await.unwrap();
    assert_eq!(again.missing_topics(), ["probe-absent"]);
    let bootstrap = broker.bootstrap();
    let n = tokio::task::spawn_blocking(move || record_count(&bootstrap, "probe-absent"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0);
}
