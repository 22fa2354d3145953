//! The backbone creates its topics on a real broker (started by the test):
//! the backbone topic with the configured partitions, and the nodes topic
//! (`<topic>-nodes`) with one partition and an hour's retention, so the
//! heartbeats do not stay for the broker's default week.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use tidegate_kafka::backbone::config::ClusterConfig;
use tidegate_kafka::backbone::heartbeat::nodes_topic;
use tidegate_kafka::backbone::{ensure_topic, NODES_RETENTION_MS};
use tidegate_kafka::testing::TestBroker;

/// Partitions of `topic` as the broker's metadata has them.
fn partitions(bootstrap: &str, topic: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create()
        .unwrap();
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let t = &md.topics()[0];
    assert!(t.error().is_none(), "{topic}: {:?}", t.error());
    t.partitions().len()
}

#[tokio::test]
async fn the_backbone_creates_its_topic_and_the_nodes_topic_with_an_hours_retention() {
    let broker = TestBroker::shared().expect("start the test broker (run scripts/setup/kafka.sh)");
    let topic = format!("tg-backbone-topics-{}", std::process::id());
    let config = ClusterConfig {
        brokers: broker.bootstrap(),
        topic: topic.clone(),
        partitions: 3,
        ..ClusterConfig::default()
    };
    ensure_topic(&config).await;

    assert_eq!(partitions(&broker.bootstrap(), &topic), 3);
    let nodes = nodes_topic(&topic);
    assert_eq!(partitions(&broker.bootstrap(), &nodes), 1);

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    let described = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(&nodes)],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    let resource = described[0].as_ref().expect("the nodes topic's configs");
    let retention = resource
        .get("retention.ms")
        .and_then(|e| e.value.clone())
        .expect("retention.ms described");
    assert_eq!(retention, NODES_RETENTION_MS);

    // Created twice (a second node starting): nothing fails, nothing changes.
    ensure_topic(&config).await;
    assert_eq!(partitions(&broker.bootstrap(), &nodes), 1);
}
