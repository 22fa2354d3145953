//! Criterion benchmarks of the hub's hot paths: publish fan-out to N
//! subscribers of one topic, publish among 1M subscriptions (seed 001's shape),
//! and subscribe.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures::FutureExt;
use tidegate_hub::{Hub, Message, OverflowPolicy, Subscriber, SubscriberOptions};

fn opts() -> SubscriberOptions {
    SubscriberOptions {
        capacity: 64,
        overflow: OverflowPolicy::DropOldest,
    }
}

fn fan_out(c: &mut Criterion) {
    let mut g = c.benchmark_group("publish_fan_out");
    for n in [1usize, 100, 1000, 10_000] {
        let hub = Hub::default();
        let subs: Vec<Subscriber> = (0..n)
            .map(|_| {
                let mut s = hub.subscriber(opts());
                s.subscribe("fan.out").unwrap();
                s
            })
            .collect();
        let payload = bytes::Bytes::from(vec![0u8; 1024]);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                hub.publish(Message::new("fan.out", payload.clone()))
                    .now_or_never()
                    .expect("no route: publish completes at once")
                    .unwrap()
            })
        });
        drop(subs);
    }
    g.finish();
}

fn million_subscriptions(c: &mut Criterion) {
    let hub = Hub::default();
    let users: Vec<Subscriber> = (0..1000u64)
        .map(|u| {
            let mut s = hub.subscriber(opts());
            for k in 0..1000u64 {
                s.subscribe(&format!("topic.{}", (u * 7919 + k * 104_729) % 50_000))
                    .unwrap();
            }
            s
        })
        .collect();
    let payload = bytes::Bytes::from(vec![0u8; 1024]);
    let mut i = 0u64;
    c.bench_function("publish_among_1M_subscriptions_50k_topics", |b| {
        b.iter(|| {
            i = (i + 7) % 50_000;
            hub.publish(Message::new(format!("topic.{i}"), payload.clone()))
                .now_or_never()
                .expect("no route: publish completes at once")
                .unwrap()
        })
    });
    drop(users);
}

fn subscribe(c: &mut Criterion) {
    let topics: Vec<String> = (0..1000)
        .map(|k| format!("topic.{}", k * 37 % 50_000))
        .collect();
    c.bench_function("subscribe_1000_topics_one_user", |b| {
        let hub = Hub::default();
        b.iter(|| {
            let mut s = hub.subscriber(opts());
            for t in &topics {
                s.subscribe(black_box(t)).unwrap();
            }
            s
        })
    });
}

/// The same-run anchor for fan-out: the obvious alternative of one bounded
/// `tokio::sync::mpsc` channel per subscriber, drop-oldest emulated by taking
/// one message out when a channel is full.
fn fan_out_anchor_mpsc(c: &mut Criterion) {
    let mut g = c.benchmark_group("anchor_mpsc_fan_out");
    for n in [1usize, 100, 1000, 10_000] {
        let chans: Vec<_> = (0..n)
            .map(|_| tokio::sync::mpsc::channel::<std::sync::Arc<Message>>(64))
            .collect();
        let mut chans = chans;
        let payload = bytes::Bytes::from(vec![0u8; 1024]);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let m = std::sync::Arc::new(Message::new("fan.out", payload.clone()));
                for (tx, rx) in chans.iter_mut() {
                    if tx.try_send(m.clone()).is_err() {
                        let _ = rx.try_recv();
                        let _ = tx.try_send(m.clone());
                    }
                }
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    fan_out,
    fan_out_anchor_mpsc,
    million_subscriptions,
    subscribe
);
criterion_main!(benches);
