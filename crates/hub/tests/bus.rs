//! Publish/subscribe behaviour of the hub: exact and wildcard matching,
//! unsubscribe, both overflow policies, routed sinks and acknowledgements.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::*;

fn msg(topic: &str, body: &'static str) -> Message {
    Message::new(topic, body)
}

async fn drain(s: &Subscriber) -> Vec<String> {
    let mut v = Vec::new();
    s.try_recv_many(&mut v, usize::MAX).unwrap();
    v.iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn exact_and_wildcard_subscriptions_receive_matching_topics_only() {
    let hub = Hub::default();
    let mut exact = hub.subscriber(SubscriberOptions::default());
    exact.subscribe("a.b.c").unwrap();
    let star = hub.subscribe("a.*.c").unwrap();
    let rest = hub.subscribe("a.>").unwrap();
    let all = hub.subscribe(">").unwrap();

    hub.publish(msg("a.b.c", "1")).await.unwrap();
    hub.publish(msg("a.x.c", "2")).await.unwrap();
    hub.publish(msg("a.b", "3")).await.unwrap();
    hub.publish(msg("z", "4")).await.unwrap();

    assert_eq!(drain(&exact).await, ["1"]);
    assert_eq!(drain(&star).await, ["1", "2"]);
    assert_eq!(drain(&rest).await, ["1", "2", "3"]);
    assert_eq!(drain(&all).await, ["1", "2", "3", "4"]);
}

#[tokio::test]
async fn unsubscribe_and_drop_stop_delivery() {
    let hub = Hub::default();
    let mut s = hub.subscriber(SubscriberOptions::default());
    s.subscribe("t").unwrap();
    s.subscribe("t.*").unwrap();
    hub.publish(msg("t", "1")).await.unwrap();
    assert!(s.unsubscribe("t"));
    assert!(!s.unsubscribe("t"));
    hub.publish(msg("t", "2")).await.unwrap();
    hub.publish(msg("t.x", "3")).await.unwrap();
    assert_eq!(drain(&s).await, ["1", "3"]);
    assert!(s.unsubscribe("t.*"));
    hub.publish(msg("t.x", "4")).await.unwrap();
    assert!(drain(&s).await.is_empty());
    assert_eq!(hub.metrics().subscriptions.get(), 0);
    drop(s);
    assert_eq!(hub.metrics().subscribers.get(), 0);
}

#[tokio::test]
async fn drop_oldest_keeps_the_newest_and_counts_the_rest() {
    let hub = Hub::default();
    let mut s = hub.subscriber(SubscriberOptions {
        capacity: 3,
        overflow: OverflowPolicy::DropOldest,
    });
    s.subscribe("q").unwrap();
    for b in ["1", "2", "3", "4", "5"] {
        hub.publish(msg("q", b)).await.unwrap();
    }
    assert_eq!(drain(&s).await, ["3", "4", "5"]);
    assert_eq!(s.dropped(), 2);
    assert_eq!(hub.metrics().dropped_oldest.get(), 2);
}

#[tokio::test]
async fn disconnect_policy_closes_a_slow_subscriber_after_what_it_had() {
    let hub = Hub::default();
    let mut s = hub.subscriber(SubscriberOptions {
        capacity: 2,
        overflow: OverflowPolicy::Disconnect,
    });
    s.subscribe("q").unwrap();
    for b in ["1", "2", "3", "4"] {
        hub.publish(msg("q", b)).await.unwrap();
    }
    let mut v = Vec::new();
    assert_eq!(s.try_recv_many(&mut v, 10), Ok(2));
    assert_eq!(
        s.try_recv_many(&mut v, 10),
        Err(RecvError::Overflowed { capacity: 2 })
    );
    assert_eq!(hub.metrics().disconnected_slow.get(), 1);
}

#[tokio::test]
async fn recv_wakes_when_a_message_arrives() {
    let hub = Hub::default();
    let s = hub.subscribe("w").unwrap();
    let h = tokio::spawn(async move { s.recv().await.map(|m| m.payload.clone()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    hub.publish(msg("w", "hello")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), h)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&got[..], b"hello");
}

#[tokio::test]
async fn bad_topics_are_refused_on_publish() {
    let hub = Hub::default();
    assert!(matches!(
        hub.publish(msg("a.*", "x")).await,
        Err(PublishError::BadTopic(_))
    ));
    assert!(matches!(
        hub.publish(msg("", "x")).await,
        Err(PublishError::BadTopic(_))
    ));
    hub.close();
    assert_eq!(
        hub.publish(msg("a", "x")).await,
        Err(PublishError::ShuttingDown)
    );
}

/// A sink that holds acknowledgements until told, or fails them.
struct HoldingSink {
    held: parking_lot::Mutex<Vec<AckToken>>,
    received: AtomicUsize,
    fail: bool,
}

impl Sink for HoldingSink {
    fn name(&self) -> &str {
        "holding"
    }
    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        self.received.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            ack.complete(Err(DeliveryError::Failed {
                sink: "holding".into(),
                reason: "broker said no".into(),
            }));
        } else {
            self.held.lock().push(ack);
        }
        Box::pin(async {})
    }
}

fn holding(fail: bool) -> Arc<HoldingSink> {
    Arc::new(HoldingSink {
        held: Default::default(),
        received: AtomicUsize::new(0),
        fail,
    })
}

fn routes_to(sink: Arc<HoldingSink>, pattern: &str) -> RouteTable {
    let sinks: Vec<Arc<dyn Sink>> = vec![sink];
    RouteTable::build(
        &[RouteConfig {
            topics: pattern.into(),
            sink: "holding".into(),
        }],
        &sinks,
    )
    .unwrap()
}

#[tokio::test]
async fn an_ack_group_completes_only_when_the_sink_acknowledges_every_message() {
    let sink = holding(false);
    let hub = Hub::new(routes_to(sink.clone(), "logs.>"));
    let group = AckGroup::new();
    for i in 0..3 {
        hub.publish_acked(Message::new("logs.app", format!("{i}")), &group)
            .await
            .unwrap();
    }
    // Not routed: must not hold the group.
    hub.publish_acked(msg("other", "x"), &group).await.unwrap();
    assert_eq!(sink.received.load(Ordering::SeqCst), 3);
    let waiting = tokio::spawn(group.wait());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished(), "acked before the sink acknowledged");
    let tokens: Vec<AckToken> = std::mem::take(&mut *sink.held.lock());
    for t in tokens {
        t.succeed();
    }
    assert_eq!(waiting.await.unwrap(), Ok(()));
}

#[tokio::test]
async fn a_failing_sink_fails_the_group_with_its_reason() {
    let sink = holding(true);
    let hub = Hub::new(routes_to(sink, "logs.>"));
    let group = AckGroup::new();
    hub.publish_acked(msg("logs.a", "x"), &group).await.unwrap();
    let e = group.wait().await.unwrap_err();
    assert!(e.to_string().contains("broker said no"), "{e}");
}

#[tokio::test]
async fn a_route_to_an_unknown_sink_is_an_error() {
    let sinks: Vec<Arc<dyn Sink>> = vec![Arc::new(NullSink)];
    let e = RouteTable::build(
        &[RouteConfig {
            topics: "a".into(),
            sink: "kafka".into(),
        }],
        &sinks,
    )
    .unwrap_err();
    assert!(e.to_string().contains("kafka"));
}

#[tokio::test]
async fn a_million_subscriptions_over_fifty_thousand_topics_fan_out_per_topic() {
    // The seed-001 shape: 1,000 users × 1,000 subscriptions over 50,000 topics.
    let hub = Hub::default();
    let t0 = std::time::Instant::now();
    let mut users = Vec::with_capacity(1000);
    for u in 0..1000u64 {
        let mut s = hub.subscriber(SubscriberOptions {
            capacity: 4,
            overflow: OverflowPolicy::DropOldest,
        });
        for k in 0..1000u64 {
            let topic = (u * 7919 + k * 104_729) % 50_000;
            s.subscribe(&format!("topic.{topic}")).unwrap();
        }
        users.push(s);
    }
    let subscribe_time = t0.elapsed();
    assert_eq!(
        hub.metrics().subscriptions.get() as u64,
        users
            .iter()
            .map(|u| u.patterns().count() as u64)
            .sum::<u64>()
    );
    // Publishing to one topic reaches exactly its subscribers.
    let expected = users
        .iter()
        .filter(|u| u.patterns().any(|p| p == "topic.123"))
        .count() as u64;
    let before = hub.metrics().delivered.get();
    hub.publish(msg("topic.123", "x")).await.unwrap();
    assert_eq!(hub.metrics().delivered.get() - before, expected);
    eprintln!("subscribed ~1M in {subscribe_time:?}");
}

#[tokio::test]
async fn a_sink_named_by_two_matching_routes_gets_the_message_once() {
    let sink = holding(false);
    let sinks: Vec<Arc<dyn Sink>> = vec![sink.clone()];
    let routes = RouteTable::build(
        &[
            RouteConfig {
                topics: "logs.>".into(),
                sink: "holding".into(),
            },
            RouteConfig {
                topics: "logs.app".into(),
                sink: "holding".into(),
            },
        ],
        &sinks,
    )
    .unwrap();
    let hub = Hub::new(routes);
    hub.publish(msg("logs.app", "x")).await.unwrap();
    hub.publish(msg("logs.web", "y")).await.unwrap();
    hub.publish(msg("other", "z")).await.unwrap();
    assert_eq!(sink.received.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_null_sink_acknowledges_without_waiting() {
    let sinks: Vec<Arc<dyn Sink>> = vec![Arc::new(NullSink)];
    let routes = RouteTable::build(
        &[RouteConfig {
            topics: ">".into(),
            sink: "null".into(),
        }],
        &sinks,
    )
    .unwrap();
    let hub = Hub::new(routes);
    let group = AckGroup::new();
    hub.publish_acked(msg("a", "1"), &group).await.unwrap();
    assert_eq!(group.outstanding(), 0);
    assert_eq!(group.wait().await, Ok(()));
    assert_eq!(hub.metrics().routed.get(), 1);
}

#[tokio::test]
async fn a_waiting_subscriber_gets_what_was_queued_then_closed_when_the_hub_closes() {
    let hub = Hub::default();
    let sub = hub.subscribe("a.b").unwrap();
    hub.publish(msg("a.b", "last")).await.unwrap();
    let got = sub.recv().await.unwrap();
    assert_eq!(&got.payload[..], b"last");
    let waiting = tokio::spawn(async move { sub.recv().await.map(|_| ()) });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    hub.close();
    let r = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the waiting subscriber was not woken by close")
        .unwrap();
    assert_eq!(r, Err(tidegate_hub::RecvError::Closed));
}

#[tokio::test]
async fn route_failures_count_failed_and_lost_messages_but_not_acknowledged_ones() {
    let failing = holding(true);
    let hub = Hub::new(routes_to(failing, "logs.>"));
    hub.publish(msg("logs.a", "x")).await.unwrap();
    assert_eq!(hub.metrics().route_failures.get(), 1);

    let keeping = holding(false);
    let hub = Hub::new(routes_to(keeping.clone(), "logs.>"));
    for _ in 0..3 {
        hub.publish(msg("logs.a", "x")).await.unwrap();
    }
    let mut tokens: Vec<AckToken> = std::mem::take(&mut *keeping.held.lock());
    tokens.pop().unwrap().succeed();
    assert_eq!(hub.metrics().route_failures.get(), 0);
    drop(tokens); // two lost without an answer
    assert_eq!(hub.metrics().route_failures.get(), 2);
}

#[tokio::test]
async fn route_failures_count_the_failed_tokens_of_a_group_once_each() {
    let failing = holding(true);
    let hub = Hub::new(routes_to(failing, "logs.>"));
    let group = AckGroup::new();
    for _ in 0..3 {
        hub.publish_acked(msg("logs.a", "x"), &group).await.unwrap();
    }
    assert!(group.wait().await.is_err());
    assert_eq!(hub.metrics().route_failures.get(), 3);

    let keeping = holding(false);
    let hub = Hub::new(routes_to(keeping.clone(), "logs.>"));
    let group = AckGroup::new();
    for _ in 0..2 {
        hub.publish_acked(msg("logs.a", "x"), &group).await.unwrap();
    }
    let mut tokens: Vec<AckToken> = std::mem::take(&mut *keeping.held.lock());
    tokens.pop().unwrap().succeed();
    drop(tokens); // one lost without an answer
    assert_eq!(hub.metrics().route_failures.get(), 1);
    assert!(group.wait().await.is_err());
}

#[tokio::test]
async fn a_topic_publisher_reaches_subscribers_and_routed_sinks_like_single_publishes() {
    let keeping = holding(false);
    let hub = Hub::new(routes_to(keeping.clone(), "logs.>"));
    let sub = hub.subscribe("logs.a").unwrap();
    let other = hub.subscribe("other").unwrap();
    let group = AckGroup::new();
    let p = hub.publisher_for("logs.a").unwrap();
    assert_eq!(p.topic(), "logs.a");
    for body in ["1", "2"] {
        p.publish(p.message(body), Some(&group)).await.unwrap();
    }
    // A message on another topic is checked and routed on its own.
    p.publish(msg("other", "3"), Some(&group)).await.unwrap();
    assert!(matches!(
        p.publish(msg("bad..topic", "4"), None).await,
        Err(PublishError::BadTopic(_))
    ));
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"1");
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"2");
    assert_eq!(&other.recv().await.unwrap().payload[..], b"3");
    assert_eq!(keeping.received.load(Ordering::SeqCst), 2);
    assert_eq!(hub.metrics().published.get(), 3);
    for t in std::mem::take(&mut *keeping.held.lock()) {
        t.succeed();
    }
    assert_eq!(group.wait().await, Ok(()));
}

#[tokio::test]
async fn a_topic_publisher_refuses_what_a_publish_refuses() {
    let hub = Hub::default();
    for topic in ["$sys.stats", "a..b", "a.*", ""] {
        assert!(
            matches!(hub.publisher_for(topic), Err(PublishError::BadTopic(_))),
            "{topic}"
        );
    }
    let p = hub.publisher_for("a.b").unwrap();
    hub.close();
    assert!(matches!(
        p.publish(p.message("x"), None).await,
        Err(PublishError::ShuttingDown)
    ));
    assert!(matches!(
        hub.publisher_for("a.b"),
        Err(PublishError::ShuttingDown)
    ));
}

#[tokio::test]
async fn sys_topics_are_subscribable_but_only_the_hub_publishes_there() {
    let hub = Hub::default();
    let sys = hub.subscribe("$sys.>").unwrap();
    let stats = hub.subscribe("$sys.*").unwrap();
    // Catch-all patterns do not reach the hub's own topics.
    let all = hub.subscribe(">").unwrap();
    let star = hub.subscribe("*.stats").unwrap();
    for publish in [
        hub.publish(msg("$sys.stats", "forged")).await,
        hub.publish_acked(msg("$sys.x", "forged"), &AckGroup::new())
            .await,
    ] {
        assert!(
            matches!(
                publish,
                Err(PublishError::BadTopic(TopicError::Reserved(_)))
            ),
            "{publish:?}"
        );
    }
    hub.publish(msg("sys.stats", "an ordinary topic"))
        .await
        .unwrap();
    hub.publish_system(msg("$sys.stats", "real")).unwrap();
    assert!(hub.publish_system(msg("stats", "x")).is_err());
    assert_eq!(drain(&sys).await, ["real"]);
    assert_eq!(drain(&stats).await, ["real"]);
    assert_eq!(drain(&all).await, ["an ordinary topic"]);
    assert_eq!(drain(&star).await, ["an ordinary topic"]);
    for (pattern, matches) in [
        ("$sys.>", true),
        ("$sys.stats", true),
        ("$sys.*", true),
        (">", false),
        ("*.stats", false),
        ("*.>", false),
    ] {
        let p = Pattern::parse(pattern).unwrap();
        assert_eq!(p.matches("$sys.stats"), matches, "{pattern}");
    }
    assert!(Pattern::parse(">").unwrap().matches("sys.stats"));
}

#[tokio::test]
async fn sys_reports_never_reach_a_catch_all_route() {
    let sink = holding(false);
    let hub = Hub::new(routes_to(sink.clone(), ">"));
    hub.publish_system(msg("$sys.stats", "report")).unwrap();
    hub.publish(msg("a", "x")).await.unwrap();
    assert_eq!(sink.received.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn delivery_latency_counts_every_message_taken_from_a_queue() {
    let hub = Hub::default();
    let s = hub.subscribe("a").unwrap();
    for _ in 0..5 {
        hub.publish(msg("a", "x")).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(drain(&s).await.len(), 5);
    let window = hub.metrics().delivery_latency().take();
    assert_eq!(window.count(), 5);
    let p50 = window.quantile_us(0.5).unwrap();
    assert!(
        (20_000..2_000_000).contains(&p50),
        "waited ≥ 20 ms: {p50} µs"
    );
    assert_eq!(hub.metrics().delivery_latency().take().count(), 0);
}

/// A sink whose flush takes its whole timeout (a broker that is gone).
struct StuckFlush(&'static str);

impl Sink for StuckFlush {
    fn name(&self) -> &str {
        self.0
    }
    fn send(&self, _msg: SharedMessage, _ack: AckToken) -> SinkFuture<'_> {
        Box::pin(async {})
    }
    fn flush(&self, timeout: Duration) -> SinkFuture<'_> {
        Box::pin(tokio::time::sleep(timeout))
    }
}

#[tokio::test]
async fn sinks_are_flushed_at_the_same_time_within_one_timeout() {
    let sinks: Vec<Arc<dyn Sink>> = ["a", "b", "c"]
        .into_iter()
        .map(|n| Arc::new(StuckFlush(n)) as Arc<dyn Sink>)
        .collect();
    let routes = ["a", "b", "c"]
        .iter()
        .map(|n| RouteConfig {
            topics: format!("{n}.>"),
            sink: (*n).into(),
        })
        .collect::<Vec<_>>();
    let hub = Hub::new(RouteTable::build(&routes, &sinks).unwrap());
    let started = tokio::time::Instant::now();
    hub.flush_sinks(Duration::from_millis(300)).await;
    let took = started.elapsed();
    // In turn they took 900 ms.
    assert!(took < Duration::from_millis(600), "took {took:?}");
}
