//! The `$sys.stats` publisher: once a second, the hub's, listeners', sinks'
//! and push's counters are sampled, turned into rates over the second that
//! passed ([`report`]) and published as one JSON message on `$sys.stats` —
//! to subscribers only, over any protocol (the dashboard at `/` reads it
//! over `/ws`). Clients may subscribe to `$sys.` topics but never publish
//! there (the hub refuses it).
//!
//! Not for: history (a subscriber keeps what it wants) or alerting
//! (`/metrics` is for scrapers).

/// The report's JSON and how it is made from two samples.
pub mod report;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tidegate_hub::{Hub, Message, Sink};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use report::{ClusterTotals, HubTotals, ListenerTotals, PushSessions, Sample, SinkTotals, Window};

/// The topic the report is published on.
pub const STATS_TOPIC: &str = "$sys.stats";
/// Time between two reports.
pub const STATS_INTERVAL: Duration = Duration::from_secs(1);

/// Where push session counts come from (`None` when `[push]` is off).
pub type PushSessionSource = Arc<dyn Fn() -> PushSessions + Send + Sync>;

/// What the publisher samples.
#[derive(Clone)]
pub struct StatsSources {
    /// The hub (its counters, listeners and latency window).
    pub hub: Hub,
    /// The routed sinks.
    pub sinks: Vec<Arc<dyn Sink>>,
    /// Push sessions by transport.
    pub push: Option<PushSessionSource>,
    /// Cluster mode's backbone.
    pub cluster: Option<ClusterSource>,
}

/// Cluster mode: what the report says of the backbone — its producer as
/// one more sink named `cluster` (queue, acknowledgements, broker link),
/// and the reader's side in the report's `cluster` section.
#[derive(Clone)]
pub struct ClusterSource {
    /// This node's name in the cluster.
    pub node: String,
    /// The backbone (its producer).
    pub backbone: Arc<tidegate_kafka::backbone::KafkaBackbone>,
    /// The reader's counters and gauges.
    pub metrics: tidegate_kafka::backbone::ClusterMetrics,
}

impl StatsSources {
    /// Every total, now.
    pub fn sample(&self) -> Sample {
        let m = self.hub.metrics();
        let budget = self.hub.budget();
        let hub = HubTotals {
            published: m.published.get(),
            delivered: m.delivered.get(),
            dropped: m.dropped_oldest.get(),
            routed: m.routed.get(),
            subscribers: m.subscribers.get(),
            subscriptions: m.subscriptions.get(),
            inflight_bytes: budget.in_use() as u64,
            inflight_limit: budget.total() as u64,
        };
        let listeners = m
            .listeners()
            .iter()
            .map(|l| ListenerTotals {
                name: l.name().to_owned(),
                open: l.open_connections(),
                accepted: l.accepted_total(),
                frames_in: l.frames_in_total(),
                frames_out: l.frames_out_total(),
                bytes_in: l.bytes_in_total(),
                bytes_out: l.bytes_out_total(),
            })
            .collect();
        let mut sinks: Vec<SinkTotals> = self
            .sinks
            .iter()
            .map(|s| SinkTotals {
                name: s.name().to_owned(),
                health: s.health(),
                counters: s.counters(),
            })
            .collect();
        if let Some(c) = &self.cluster {
            sinks.push(SinkTotals {
                name: "cluster".to_owned(),
                health: c.backbone.sink().health(),
                counters: c.backbone.sink().counters(),
            });
        }
        Sample {
            hub,
            listeners,
            sinks,
            push: self.push.as_ref().map(|f| f()),
            cluster: self.cluster.as_ref().map(|c| ClusterTotals {
                node: c.node.clone(),
                partitions: c.metrics.partitions.get(),
                nodes_seen: c.metrics.nodes_seen.get(),
                lag: c.metrics.lag.get(),
                produced: c.metrics.produced.get(),
                received: c.metrics.received.get(),
                received_own: c.metrics.received_own.get(),
            }),
        }
    }
}

/// Push's sessions by transport, read from its context.
pub fn push_sessions(ctx: Arc<tidegate_push::PushContext>) -> PushSessionSource {
    Arc::new(move || {
        let s = ctx.stats.sessions(&ctx.sessions);
        PushSessions {
            polling: s.polling,
            websocket: s.websocket,
            ws: s.ws,
        }
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Publishes a report every [`STATS_INTERVAL`] until `shutdown`.
pub fn spawn(sources: StatsSources, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut prev = sources.sample();
        let mut prev_at = Instant::now();
        // Messages delivered before the first report are not part of its
        // window.
        sources.hub.metrics().delivery_latency().take();
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + STATS_INTERVAL, STATS_INTERVAL);
        // A stalled runtime skips reports rather than bursting them.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = sources.sample();
            let at = Instant::now();
            let latency = sources.hub.metrics().delivery_latency().take();
            let window = Window {
                ts_ms: now_ms(),
                interval_ms: at.duration_since(prev_at).as_millis() as u64,
                uptime_s: started.elapsed().as_secs(),
            };
            let r = report::report(&prev, &now, window, &latency);
            let json = serde_json::to_vec(&r).expect("a report always serializes");
            if let Err(e) = sources.hub.publish_system(Message::new(STATS_TOPIC, json)) {
                debug!(error = %e, "$sys.stats not published; stopping");
                return;
            }
            (prev, prev_at) = (now, at);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_report_a_second_with_what_moved() {
        let hub = Hub::default();
        let sub = hub.subscribe(STATS_TOPIC).unwrap();
        let http = hub.metrics().listener("http");
        let shutdown = CancellationToken::new();
        let task = spawn(
            StatsSources {
                hub: hub.clone(),
                sinks: Vec::new(),
                push: Some(Arc::new(|| PushSessions {
                    polling: 1,
                    websocket: 0,
                    ws: 2,
                })),
                cluster: None,
            },
            shutdown.clone(),
        );
        tokio::task::yield_now().await;
        http.frames_in(5);
        hub.publish(Message::new("a", "x")).await.unwrap();
        // Rates are over the measured window (about a second).
        let per_s = |v: &serde_json::Value, n: f64| {
            let ms = v["interval_ms"].as_f64().unwrap();
            assert!((900.0..5000.0).contains(&ms), "{v}");
            (n * 1000.0 / ms * 100.0).round() / 100.0
        };
        let first = sub.recv().await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&first.payload).unwrap();
        assert_eq!(v["hub"]["published_per_s"], per_s(&v, 1.0), "{v}");
        assert_eq!(v["listeners"][0]["name"], "http");
        assert_eq!(v["listeners"][0]["events_in_per_s"], per_s(&v, 5.0), "{v}");
        assert_eq!(v["push"]["sessions"]["ws"], 2);
        let second = sub.recv().await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&second.payload).unwrap();
        assert_eq!(v["hub"]["published_per_s"], 0.0, "{v}");
        assert!(v["uptime_s"].as_u64() >= Some(1), "{v}");
        assert!(
            matches!(
                hub.publish(Message::new(STATS_TOPIC, "forged")).await,
                Err(tidegate_hub::PublishError::BadTopic(_))
            ),
            "clients cannot publish on $sys.stats"
        );
        shutdown.cancel();
        task.await.unwrap();
    }
}
