//! The `$sys.stats` report: raw totals sampled from the metrics
//! ([`Sample`]) and the JSON published once a second ([`StatsReport`](crate::stats::report::StatsReport)),
//! made from two samples. Pure: no clocks, no hub — the caller passes the
//! samples, the time between them and the latency window.
//!
//! The JSON is documented in docs/push.md (`$sys.stats`); change both
//! together.

use serde::Serialize;
use tidegate_hub::{LatencySnapshot, SinkCounters, SinkHealth};

/// The report's format version; bumped when a field changes meaning.
pub const REPORT_VERSION: u32 = 1;

/// Hub-wide totals at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HubTotals {
    /// Messages accepted by `Hub::publish`.
    pub published: u64,
    /// Messages queued to subscribers.
    pub delivered: u64,
    /// Messages dropped by drop-oldest.
    pub dropped: u64,
    /// Messages handed to routed sinks.
    pub routed: u64,
    /// Live subscribers.
    pub subscribers: i64,
    /// Live subscriptions.
    pub subscriptions: i64,
    /// Bytes read and not yet acknowledged.
    pub inflight_bytes: u64,
    /// `[hub] max_inflight_bytes`.
    pub inflight_limit: u64,
}

/// One listener's totals at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListenerTotals {
    /// Its config section (`http`, `forward`, …).
    pub name: String,
    /// Connections open now.
    pub open: i64,
    /// Connections accepted so far.
    pub accepted: u64,
    /// Frames (messages, chunks, requests) decoded so far.
    pub frames_in: u64,
    /// Messages written to clients so far.
    pub frames_out: u64,
    /// Bytes read so far.
    pub bytes_in: u64,
    /// Bytes written so far.
    pub bytes_out: u64,
}

/// One sink at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkTotals {
    /// The name routes use.
    pub name: String,
    /// Ready or why not.
    pub health: SinkHealth,
    /// Queue depth and acknowledgements.
    pub counters: SinkCounters,
}

/// Push sessions live now, by transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PushSessions {
    /// Engine.IO / Socket.IO on HTTP long-polling.
    pub polling: u64,
    /// Engine.IO / Socket.IO on WebSocket.
    pub websocket: u64,
    /// Plain WebSocket at `/ws`.
    pub ws: u64,
}

/// Every total the report is made from, at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// The hub's counters.
    pub hub: HubTotals,
    /// Per listener.
    pub listeners: Vec<ListenerTotals>,
    /// Per routed sink.
    pub sinks: Vec<SinkTotals>,
    /// Push sessions (`None` when `[push]` is off).
    pub push: Option<PushSessions>,
    /// Cluster mode's backbone (`None` without `[cluster]`).
    pub cluster: Option<ClusterTotals>,
}

/// The backbone's totals and gauges (cluster mode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterTotals {
    /// This node's name in the cluster.
    pub node: String,
    /// Backbone partitions this node reads.
    pub partitions: i64,
    /// Nodes whose records this node read in the last minute.
    pub nodes_seen: i64,
    /// Records behind the end of the backbone, all partitions.
    pub lag: i64,
    /// Messages this node handed to the backbone.
    pub produced: u64,
    /// Messages read back from the backbone and fanned out here.
    pub received: u64,
    /// Of those, the ones this node had published.
    pub received_own: u64,
}

/// What is published on `$sys.stats`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsReport {
    /// [`REPORT_VERSION`].
    pub v: u32,
    /// Wall-clock time of the sample, milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// Milliseconds between this sample and the previous one (the window
    /// every `_per_s` rate and the latency percentiles cover).
    pub interval_ms: u64,
    /// Seconds since the hub started.
    pub uptime_s: u64,
    /// Tidegate's version.
    pub version: &'static str,
    /// Hub-wide rates and levels.
    pub hub: HubReport,
    /// One entry per listener.
    pub listeners: Vec<ListenerReport>,
    /// One entry per routed sink.
    pub sinks: Vec<SinkReport>,
    /// Push sessions by transport (`null` when `[push]` is off).
    pub push: Option<PushReport>,
    /// Cluster mode: the backbone seen from this node (`null` without
    /// `[cluster]`).
    pub cluster: Option<ClusterReport>,
    /// Delivery latency over the window.
    pub latency_us: LatencyReport,
}

/// Hub-wide figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HubReport {
    /// Messages published per second.
    pub published_per_s: f64,
    /// Messages queued to subscribers per second.
    pub delivered_per_s: f64,
    /// Messages dropped by drop-oldest per second.
    pub dropped_per_s: f64,
    /// Messages handed to sinks per second.
    pub routed_per_s: f64,
    /// Live subscribers.
    pub subscribers: i64,
    /// Live subscriptions.
    pub subscriptions: i64,
    /// Bytes read and not yet acknowledged.
    pub inflight_bytes: u64,
    /// The in-flight budget.
    pub inflight_bytes_limit: u64,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListenerReport {
    /// Its config section.
    pub name: String,
    /// Connections open now.
    pub connections: i64,
    /// Connections accepted per second.
    pub accepted_per_s: f64,
    /// Events (frames, messages, requests) decoded per second.
    pub events_in_per_s: f64,
    /// Messages written to clients per second.
    pub events_out_per_s: f64,
    /// Bytes read per second.
    pub bytes_in_per_s: f64,
    /// Bytes written per second.
    pub bytes_out_per_s: f64,
}

/// One sink.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SinkReport {
    /// The name routes use.
    pub name: String,
    /// `"ready"` or `"not_ready"`.
    pub state: &'static str,
    /// Why not ready (`null` when ready).
    pub reason: Option<String>,
    /// Messages handed over and not yet acknowledged.
    pub queue_depth: u64,
    /// Messages acknowledged per second.
    pub acked_per_s: f64,
    /// Messages failed per second.
    pub failed_per_s: f64,
}

/// Push sessions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PushReport {
    /// Live sessions by transport.
    pub sessions: PushSessions,
}

/// The backbone seen from this node (cluster mode).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterReport {
    /// This node's name in the cluster.
    pub node: String,
    /// Backbone partitions this node reads.
    pub partitions: i64,
    /// Nodes whose records this node read in the last minute (itself
    /// included once it has published).
    pub nodes_seen: i64,
    /// Records behind the end of the backbone, all partitions.
    pub lag: i64,
    /// Messages this node handed to the backbone per second.
    pub produced_per_s: f64,
    /// Messages read from the backbone and fanned out here per second,
    /// every node's.
    pub received_per_s: f64,
    /// Of those, the ones other nodes published.
    pub received_from_others_per_s: f64,
}

/// Percentiles of the time delivered messages waited between publish and
/// their session taking them, in microseconds; `null` when nothing was
/// delivered in the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyReport {
    /// Messages measured in the window.
    pub count: u64,
    /// Median.
    pub p50: Option<u64>,
    /// 90th percentile.
    pub p90: Option<u64>,
    /// 99th percentile.
    pub p99: Option<u64>,
    /// 99.9th percentile.
    pub p999: Option<u64>,
    /// Largest.
    pub max: Option<u64>,
}

impl LatencyReport {
    /// Percentiles of one window.
    pub fn of(w: &LatencySnapshot) -> Self {
        LatencyReport {
            count: w.count(),
            p50: w.quantile_us(0.5),
            p90: w.quantile_us(0.9),
            p99: w.quantile_us(0.99),
            p999: w.quantile_us(0.999),
            max: w.max_us(),
        }
    }
}

/// Per second, from two totals `secs` apart. A counter that went backwards
/// (it cannot, but a listener restarted under the same name could) is 0.
fn rate(before: u64, after: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    let per_s = after.saturating_sub(before) as f64 / secs;
    // Two decimals are plenty, and keep the JSON short.
    (per_s * 100.0).round() / 100.0
}

/// Timing of a report: when, over which window, since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Wall clock, ms since the epoch.
    pub ts_ms: u64,
    /// Milliseconds since the previous sample.
    pub interval_ms: u64,
    /// Seconds since start.
    pub uptime_s: u64,
}

/// The report for the window between `prev` and `now`. A listener or sink
/// missing from `prev` (it just appeared) counts from zero.
pub fn report(prev: &Sample, now: &Sample, w: Window, latency: &LatencySnapshot) -> StatsReport {
    let secs = w.interval_ms as f64 / 1000.0;
    let (a, b) = (&prev.hub, &now.hub);
    let hub = HubReport {
        published_per_s: rate(a.published, b.published, secs),
        delivered_per_s: rate(a.delivered, b.delivered, secs),
        dropped_per_s: rate(a.dropped, b.dropped, secs),
        routed_per_s: rate(a.routed, b.routed, secs),
        subscribers: b.subscribers,
        subscriptions: b.subscriptions,
        inflight_bytes: b.inflight_bytes,
        inflight_bytes_limit: b.inflight_limit,
    };
    let listeners = now
        .listeners
        .iter()
        .map(|l| {
            let zero = ListenerTotals::default();
            let p = prev
                .listeners
                .iter()
                .find(|p| p.name == l.name)
                .unwrap_or(&zero);
            ListenerReport {
                name: l.name.clone(),
                connections: l.open,
                accepted_per_s: rate(p.accepted, l.accepted, secs),
                events_in_per_s: rate(p.frames_in, l.frames_in, secs),
                events_out_per_s: rate(p.frames_out, l.frames_out, secs),
                bytes_in_per_s: rate(p.bytes_in, l.bytes_in, secs),
                bytes_out_per_s: rate(p.bytes_out, l.bytes_out, secs),
            }
        })
        .collect();
    let sinks = now
        .sinks
        .iter()
        .map(|s| {
            let p = prev
                .sinks
                .iter()
                .find(|p| p.name == s.name)
                .map(|p| p.counters)
                .unwrap_or_default();
            let (state, reason) = match &s.health {
                SinkHealth::Ready => ("ready", None),
                SinkHealth::NotReady(why) => ("not_ready", Some(why.clone())),
            };
            SinkReport {
                name: s.name.clone(),
                state,
                reason,
                queue_depth: s.counters.queued,
                acked_per_s: rate(p.acked, s.counters.acked, secs),
                failed_per_s: rate(p.failed, s.counters.failed, secs),
            }
        })
        .collect();
    StatsReport {
        v: REPORT_VERSION,
        ts_ms: w.ts_ms,
        interval_ms: w.interval_ms,
        uptime_s: w.uptime_s,
        version: env!("CARGO_PKG_VERSION"),
        hub,
        listeners,
        sinks,
        push: now.push.map(|sessions| PushReport { sessions }),
        cluster: now.cluster.as_ref().map(|c| {
            let p = prev.cluster.clone().unwrap_or_default();
            ClusterReport {
                node: c.node.clone(),
                partitions: c.partitions,
                nodes_seen: c.nodes_seen,
                lag: c.lag,
                produced_per_s: rate(p.produced, c.produced, secs),
                received_per_s: rate(p.received, c.received, secs),
                received_from_others_per_s: rate(
                    p.received.saturating_sub(p.received_own),
                    c.received.saturating_sub(c.received_own),
                    secs,
                ),
            }
        }),
        latency_us: LatencyReport::of(latency),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidegate_hub::LatencyHistogram;

    fn listener(name: &str, frames_in: u64, frames_out: u64) -> ListenerTotals {
        ListenerTotals {
            name: name.into(),
            open: 2,
            frames_in,
            frames_out,
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_window() {
        let prev = Sample {
            hub: HubTotals {
                published: 100,
                ..Default::default()
            },
            listeners: vec![listener("http", 10, 0)],
            sinks: vec![SinkTotals {
                name: "kafka".into(),
                health: SinkHealth::Ready,
                counters: SinkCounters {
                    queued: 0,
                    acked: 50,
                    failed: 0,
                },
            }],
            push: Some(PushSessions::default()),
            cluster: Some(ClusterTotals {
                produced: 10,
                received: 100,
                received_own: 40,
                ..Default::default()
            }),
        };
        let now = Sample {
            hub: HubTotals {
                published: 400,
                subscribers: 3,
                ..Default::default()
            },
            listeners: vec![listener("http", 30, 500), listener("wire", 7, 0)],
            sinks: vec![SinkTotals {
                name: "kafka".into(),
                health: SinkHealth::NotReady("no broker connection".into()),
                counters: SinkCounters {
                    queued: 9,
                    acked: 80,
                    failed: 2,
                },
            }],
            push: Some(PushSessions {
                polling: 1,
                websocket: 2,
                ws: 3,
            }),
            cluster: Some(ClusterTotals {
                node: "web-1".into(),
                partitions: 4,
                nodes_seen: 3,
                lag: 7,
                produced: 30,
                received: 500,
                received_own: 100,
            }),
        };
        let h = LatencyHistogram::default();
        h.record_us(1500);
        let w = Window {
            ts_ms: 1,
            interval_ms: 2000,
            uptime_s: 5,
        };
        let r = report(&prev, &now, w, &h.take());
        assert_eq!(r.hub.published_per_s, 150.0);
        assert_eq!(r.hub.subscribers, 3);
        assert_eq!(r.listeners[0].events_in_per_s, 10.0);
        assert_eq!(r.listeners[0].events_out_per_s, 250.0);
        assert_eq!(r.listeners[0].connections, 2);
        assert_eq!(
            r.listeners[1].events_in_per_s, 3.5,
            "a new listener counts from 0"
        );
        assert_eq!(r.sinks[0].state, "not_ready");
        assert_eq!(r.sinks[0].queue_depth, 9);
        assert_eq!(r.sinks[0].acked_per_s, 15.0);
        assert_eq!(r.sinks[0].failed_per_s, 1.0);
        assert_eq!(r.push.as_ref().unwrap().sessions.ws, 3);
        let c = r.cluster.as_ref().unwrap();
        assert_eq!(
            (c.node.as_str(), c.partitions, c.nodes_seen, c.lag),
            ("web-1", 4, 3, 7)
        );
        assert_eq!(
            (
                c.produced_per_s,
                c.received_per_s,
                c.received_from_others_per_s
            ),
            (10.0, 200.0, 170.0)
        );
        assert_eq!(r.latency_us.count, 1);
        assert!(r.latency_us.p50.unwrap() >= 1500);
    }

    #[test]
    fn the_json_has_the_documented_shape() {
        let r = report(
            &Sample::default(),
            &Sample {
                listeners: vec![listener("http", 1, 1)],
                ..Default::default()
            },
            Window {
                ts_ms: 1_700_000_000_000,
                interval_ms: 1000,
                uptime_s: 1,
            },
            &LatencyHistogram::default().take(),
        );
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for key in [
            "v",
            "ts_ms",
            "interval_ms",
            "uptime_s",
            "version",
            "hub",
            "listeners",
            "sinks",
            "push",
            "latency_us",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        assert_eq!(v["listeners"][0]["name"], "http");
        assert_eq!(v["listeners"][0]["events_out_per_s"], 1.0);
        assert!(v["latency_us"]["p99"].is_null(), "nothing delivered: {v}");
        assert!(v["push"].is_null());
        assert_eq!(v["hub"]["published_per_s"], 0.0);
    }
}
