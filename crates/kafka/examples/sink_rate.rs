//! The Kafka sink alone at full speed: `N` messages of `SIZE` bytes handed to
//! [`KafkaSink`] by `TASKS` concurrent senders, each waiting for its acks in
//! groups of `BATCH` like a Forward connection waits per chunk. Prints
//! records/s from first send to last acknowledgement. Not a test: a
//! measuring tool for `scripts/bench/kafka-anchor.sh`.
//!
//! `cargo run --release -p tidegate-kafka --example sink_rate -- BROKERS TOPIC N [SIZE] [TASKS] [BATCH]`

use std::sync::Arc;
use std::time::Instant;

use tidegate_hub::{AckGroup, Message, Sink};
use tidegate_kafka::{KafkaConfig, KafkaSink};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: sink_rate BROKERS TOPIC N [SIZE=100] [TASKS=4] [BATCH=1000]");
        std::process::exit(2);
    }
    let arg = |i: usize, d: usize| {
        args.get(i)
            .map(|s| s.parse().expect("a number"))
            .unwrap_or(d)
    };
    let (n, size, tasks, batch) = (arg(3, 0), arg(4, 100), arg(5, 4), arg(6, 1000));
    let config = KafkaConfig {
        topic: args[2].clone(),
        ..KafkaConfig::for_brokers(args[1].clone())
    };
    let sink = Arc::new(KafkaSink::new(config).expect("producer"));
    let payload = bytes::Bytes::from(vec![b'x'; size]);
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (sink, payload) = (sink.clone(), payload.clone());
        let mine = n / tasks + usize::from(t < n % tasks);
        handles.push(tokio::spawn(async move {
            let mut left = mine;
            while left > 0 {
                let group = AckGroup::new();
                for _ in 0..left.min(batch) {
                    let m = Message::new("bench.kafka", payload.clone());
                    sink.send(Arc::new(m), group.token()).await;
                }
                left -= left.min(batch);
                group.wait().await.expect("delivered");
            }
        }));
    }
    for h in handles {
        h.await.expect("sender");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} records, {size} B, {tasks} tasks x batch {batch}: {:.0} records/s ({:.2} MB/s), {secs:.2} s",
        n as f64 / secs,
        n as f64 * size as f64 / secs / 1e6
    );
}
