//! The Kafka sink against a real broker (started by the test): what is
//! produced is read back record by record; acknowledgements follow the
//! broker's; a full queue makes `send` wait; an unreachable broker fails
//! acknowledgements instead of faking them.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::message::{Headers, Message as _};
use tidegate_hub::{AckGroup, DeliveryError, Message, Sink};
use tidegate_kafka::testing::{hub_routing_to, read_topic, TestBroker};
use tidegate_kafka::{KafkaConfig, KafkaSink, PropertyValue};

fn shared_broker() -> &'static TestBroker {
    TestBroker::shared().expect("start the test broker (run scripts/setup/kafka.sh)")
}

async fn read_back(
    bootstrap: String,
    topic: &str,
    n: usize,
) -> Vec<rdkafka::message::OwnedMessage> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_topic(&bootstrap, &topic, n, Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("read the topic back")
}

fn sample(i: usize, topic: &str) -> Message {
    let mut m = Message::new(topic, format!("{{\"n\":{i},\"msg\":\"hello {i}\"}}"))
        .with_timestamp_ns(1_700_000_000_000_000_000 + i as u64 * 1_000_123);
    if !i.is_multiple_of(3) {
        m = m.with_key(format!("key-{}", i % 7));
    }
    for a in 0..(i % 4) {
        m = m.with_attribute(format!("attr{a}"), format!("value {i}/{a}"));
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_arrives_with_its_key_timestamp_headers_and_payload() {
    let broker = shared_broker();
    let sink = KafkaSink::new(KafkaConfig {
        topic_template: Some("$TOPIC".into()),
        dynamic_topics: true,
        topic_strip_prefix: "logs.".into(),
        topic_separator: "_".into(),
        ..KafkaConfig::for_brokers(broker.bootstrap())
    })
    .unwrap();
    let n = 500;
    let sent: Vec<Message> = (0..n).map(|i| sample(i, "logs.sink.records")).collect();
    let group = AckGroup::new();
    for m in &sent {
        sink.send(Arc::new(m.clone()), group.token()).await;
    }
    // flush (what shutdown calls) returns once everything handed over is
    // acknowledged: the group is then complete without further waiting.
    sink.flush(Duration::from_secs(30)).await;
    assert_eq!(group.outstanding(), 0, "flush waited for every delivery");
    tokio::time::timeout(Duration::from_millis(100), group.wait())
        .await
        .expect("complete at once after flush")
        .expect("every message acknowledged");
    assert_eq!(sink.metrics().delivered.get(), n as u64);
    assert_eq!(sink.in_flight(), 0);

    let got = read_back(broker.bootstrap(), "sink_records", n).await;
    assert_eq!(got.len(), n, "exactly the records sent, no duplicates");
    for (m, r) in sent.iter().zip(&got) {
        assert_eq!(r.topic(), "sink_records");
        assert_eq!(r.payload(), Some(&m.payload[..]));
        assert_eq!(r.key(), m.key.as_deref());
        assert_eq!(
            r.timestamp().to_millis(),
            Some((m.timestamp_ns / 1_000_000) as i64)
        );
        let headers: Vec<(String, String)> = r
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            String::from_utf8(h.value.unwrap().to_vec()).unwrap(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(headers, m.attributes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_route_delivers_through_the_sink_and_counts_it() {
    let broker = shared_broker();
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: "sink-fixed".into(),
            compression: tidegate_kafka::Compression::Zstd,
            ..KafkaConfig::for_brokers(broker.bootstrap())
        })
        .unwrap(),
    );
    let hub = hub_routing_to("logs.>", &sink);
    let group = AckGroup::new();
    for i in 0..100 {
        hub.publish_acked(
            Message::new(format!("logs.app{}", i % 3), format!("line {i}")),
            &group,
        )
        .await
        .unwrap();
    }
    // Not routed: never reaches Kafka.
    hub.publish(Message::new("metrics.cpu", "x")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), group.wait())
        .await
        .unwrap()
        .unwrap();
    let got = read_back(broker.bootstrap(), "sink-fixed", 100).await;
    let payloads: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.payload().unwrap().to_vec()).unwrap())
        .collect();
    let want: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
    assert_eq!(payloads, want);
    let text = hub.metrics().render();
    assert!(
        text.contains("tidegate_kafka_delivered_total 100"),
        "{text}"
    );
    assert!(text.contains("tidegate_kafka_in_flight 0"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_makes_send_wait_and_an_unreachable_broker_fails_acks() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            queue_max_messages: 4,
            message_timeout_ms: 1500,
            ..KafkaConfig::for_brokers(format!("127.0.0.1:{port}"))
        })
        .unwrap(),
    );
    let group = AckGroup::new();
    for i in 0..4 {
        sink.send(Arc::new(Message::new("t.x", format!("{i}"))), group.token())
            .await;
    }
    assert!(sink.is_full());
    let fifth = {
        let sink = sink.clone();
        let token = group.token();
        tokio::spawn(async move { sink.send(Arc::new(Message::new("t.x", "5")), token).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!fifth.is_finished(), "send waits while the queue is full");
    assert!(sink.metrics().queue_full_waits.get() >= 1);
    // message.timeout.ms expires: the first four fail, room frees, the fifth
    // goes in and fails too. Nothing is acknowledged as delivered.
    tokio::time::timeout(Duration::from_secs(10), fifth)
        .await
        .expect("send resumes once room frees")
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), group.wait())
        .await
        .expect("acks settle");
    assert!(
        matches!(result, Err(DeliveryError::Failed { ref sink, .. }) if sink == "kafka"),
        "{result:?}"
    );
    assert_eq!(sink.metrics().failed.get(), 5);
    // Failed by their delivery reports, not refused when handed over.
    assert_eq!(sink.metrics().refused.get(), 0);
    assert_eq!(sink.metrics().delivered.get(), 0);
    assert!(!sink.is_full());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_producer_refuses_fails_at_once_and_is_counted_as_refused() {
    // librdkafka refuses a record over message.max.bytes when it is handed
    // over, before any broker is asked (none listens on this port).
    let port = tidegate_testkit::free_addr().port();
    let mut config = KafkaConfig::for_brokers(format!("127.0.0.1:{port}"));
    config
        .properties
        .insert("message.max.bytes".into(), PropertyValue::Integer(1_000));
    let sink = KafkaSink::new(config).unwrap();
    let group = AckGroup::new();
    sink.send(
        Arc::new(Message::new("t.x", "x".repeat(5_000))),
        group.token(),
    )
    .await;
    let result = tokio::time::timeout(Duration::from_secs(2), group.wait())
        .await
        .expect("a refused record fails at once");
    assert!(
        matches!(&result, Err(DeliveryError::Failed { reason, .. }) if reason.contains("too large")),
        "{result:?}"
    );
    assert_eq!(sink.metrics().failed.get(), 1);
    assert_eq!(sink.metrics().refused.get(), 1);
    assert_eq!(sink.metrics().in_flight.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_wait_while_the_broker_is_down_and_complete_when_it_returns() {
    let mut broker = tokio::task::spawn_blocking(TestBroker::start)
        .await
        .unwrap()
        .expect("start a dedicated broker");
    let sink = Arc::new(
        KafkaSink::new(KafkaConfig {
            topic: "restart.topic".into(),
            ..KafkaConfig::for_brokers(broker.bootstrap())
        })
        .unwrap(),
    );
    let before = AckGroup::new();
    for i in 0..50 {
        sink.send(
            Arc::new(Message::new("restart.topic", format!("a{i}"))),
            before.token(),
        )
        .await;
    }
    tokio::time::timeout(Duration::from_secs(30), before.wait())
        .await
        .unwrap()
        .unwrap();

    broker.stop();
    let during = AckGroup::new();
    for i in 0..50 {
        sink.send(
            Arc::new(Message::new("restart.topic", format!("b{i}"))),
            during.token(),
        )
        .await;
    }
    let waiting = tokio::spawn(during.wait());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!waiting.is_finished(), "no ack while the broker is down");
    assert_eq!(sink.in_flight(), 50);

    let mut broker = tokio::task::spawn_blocking(move || broker.restart().map(|()| broker))
        .await
        .unwrap()
        .expect("restart the broker");
    tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("acks once the broker is back")
        .unwrap()
        .expect("delivered after the restart");
    sink.flush(Duration::from_secs(5)).await;

    let got = read_back(broker.bootstrap(), "restart.topic", 100).await;
    let payloads: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.payload().unwrap().to_vec()).unwrap())
        .collect();
    let want: Vec<String> = (0..50)
        .map(|i| format!("a{i}"))
        .chain((0..50).map(|i| format!("b{i}")))
        .collect();
    assert_eq!(payloads, want, "in order, once each (idempotent producer)");
    broker.stop();
}
