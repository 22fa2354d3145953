//! Criterion benchmarks of the hub's hot paths: publish fan-out to N
//! subscribers of one topic, publish among 1M subscriptions (seed 001's shape),
//! and subscribe.
//!
//! Criterion's `thrpt` is the same rate as every `tidegate bench` scenario's:
//! events delivered per second — here, messages put into subscriber queues
//! (one per subscriber per publish). In `publish_fan_out` nobody consumes, so
//! every queue is full and each delivery also drops the oldest message; in
//! `publish_fan_out_consumer_keeps_up` the queues are sized so the consumer
//! keeps up, nothing is dropped (asserted), and every delivery reaches it.

use std::time::{Duration, Instant};

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

/// Queue bound of the case where the consumer keeps up; also the number of
/// publishes between two drains, so a queue never holds more than it allows.
const KEEPS_UP_CAPACITY: usize = 64;

/// Fan-out with room in every queue: publishes in bursts of
/// `KEEPS_UP_CAPACITY`, and after each burst the consumer drains every
/// subscriber (outside the timed part), as a session that keeps up does.
/// Only the publishes are timed. Asserts, and prints, drops = 0.
fn fan_out_consumer_keeps_up(c: &mut Criterion) {
    let mut g = c.benchmark_group("publish_fan_out_consumer_keeps_up");
    for n in [1usize, 100, 1000, 10_000] {
        let hub = Hub::default();
        let subs: Vec<Subscriber> = (0..n)
            .map(|_| {
                let mut s = hub.subscriber(SubscriberOptions {
                    capacity: KEEPS_UP_CAPACITY,
                    overflow: OverflowPolicy::DropOldest,
                });
                s.subscribe("fan.out").unwrap();
                s
            })
            .collect();
        let payload = bytes::Bytes::from(vec![0u8; 1024]);
        let mut drained = Vec::with_capacity(KEEPS_UP_CAPACITY);
        let mut consumed = 0u64;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let burst = left.min(KEEPS_UP_CAPACITY as u64);
                    let t = Instant::now();
                    for _ in 0..burst {
                        hub.publish(Message::new("fan.out", payload.clone()))
                            .now_or_never()
                            .expect("no route: publish completes at once")
                            .unwrap();
                    }
                    timed += t.elapsed();
                    for s in &subs {
                        drained.clear();
                        consumed +=
                            s.try_recv_many(&mut drained, KEEPS_UP_CAPACITY).unwrap() as u64;
                    }
                    left -= burst;
                }
                timed
            })
        });
        let dropped: u64 = subs.iter().map(Subscriber::dropped).sum();
        let hub_dropped = hub.metrics().dropped_oldest.get();
        eprintln!(
            "publish_fan_out_consumer_keeps_up/{n}: drops = {dropped} (hub counter {hub_dropped}), {consumed} deliveries consumed"
        );
        assert_eq!(
            dropped, 0,
            "a queue overflowed in the keeps-up case with {n} subscribers"
        );
        assert_eq!(
            hub_dropped, 0,
            "the hub counted drops in the keeps-up case with {n} subscribers"
        );
        assert!(
            consumed > 0,
            "the keeps-up case with {n} subscribers delivered nothing"
        );
        drop(subs);
    }
    g.finish();
}

/// The same-run anchor for the keeps-up case: one bounded `tokio::sync::mpsc`
/// channel per subscriber, drained after every burst like the hub's queues.
fn fan_out_consumer_keeps_up_anchor_mpsc(c: &mut Criterion) {
    let mut g = c.benchmark_group("anchor_mpsc_fan_out_consumer_keeps_up");
    for n in [1usize, 100, 1000, 10_000] {
        let mut chans: Vec<_> = (0..n)
            .map(|_| tokio::sync::mpsc::channel::<std::sync::Arc<Message>>(KEEPS_UP_CAPACITY))
            .collect();
        let payload = bytes::Bytes::from(vec![0u8; 1024]);
        let mut full = 0u64;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let burst = left.min(KEEPS_UP_CAPACITY as u64);
                    let t = Instant::now();
                    for _ in 0..burst {
                        let m = std::sync::Arc::new(Message::new("fan.out", payload.clone()));
                        for (tx, _) in chans.iter() {
                            if tx.try_send(m.clone()).is_err() {
                                full += 1;
                            }
                        }
                    }
                    timed += t.elapsed();
                    for (_, rx) in chans.iter_mut() {
                        while rx.try_recv().is_ok() {}
                    }
                    left -= burst;
                }
                timed
            })
        });
        assert_eq!(full, 0, "an anchor channel was full in the keeps-up case");
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
    fan_out_consumer_keeps_up,
    fan_out_consumer_keeps_up_anchor_mpsc,
    million_subscriptions,
    subscribe
);
criterion_main!(benches);
