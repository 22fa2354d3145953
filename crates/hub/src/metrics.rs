//! Counters for everything that moves, rendered as Prometheus text for
//! `GET /metrics`.
//!
//! The hub's own counters live in [`HubMetrics`]; every listener gets a
//! [`ListenerMetrics`] handle (labelled with its name) from
//! [`HubMetrics::listener`]. Components with counters of their own register
//! them through [`HubMetrics::register`].
//!
//! Besides the Prometheus text, the values can be read directly
//! ([`HubMetrics::listeners`], the `*_total` accessors of
//! [`ListenerMetrics`], [`HubMetrics::delivery_latency`]) for the
//! `$sys.stats` publisher.

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};

use crate::latency::LatencyHistogram;

/// Label set of per-listener metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    /// `wire`, `forward`, `s2s`, `http`, …
    pub listener: String,
}

/// Label set of per-listener error counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerErrorLabel {
    /// The listener.
    pub listener: String,
    /// A short kind such as `oversize_frame` or `bad_checksum`.
    pub kind: String,
}

/// Label set of per-listener refusals (connections closed at accept).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerRefusedLabel {
    /// The listener.
    pub listener: String,
    /// `max_connections`, `not_allowed`, `accept_error`, `shutting_down`.
    pub reason: String,
}

/// The hub's counters, plus the registry every component reports into.
#[derive(Debug)]
pub struct HubMetrics {
    registry: Mutex<Registry>,
    /// Messages accepted by `Hub::publish`.
    pub published: Counter,
    /// Messages put into subscriber queues (one per matching subscription).
    pub delivered: Counter,
    /// Messages taken out of subscriber queues by their sessions.
    pub consumed: Counter,
    /// Messages discarded by drop-oldest.
    pub dropped_oldest: Counter,
    /// Subscribers closed because their queue overflowed.
    pub disconnected_slow: Counter,
    /// Messages handed to routed sinks.
    pub routed: Counter,
    /// Routed messages whose sink failed them.
    pub route_failures: Counter,
    /// Live subscribers.
    pub subscribers: Gauge,
    /// Live subscriptions.
    pub subscriptions: Gauge,
    queued: Gauge,
    connections_accepted: Family<ListenerLabel, Counter>,
    connections_open: Family<ListenerLabel, Gauge>,
    listener_errors: Family<ListenerErrorLabel, Counter>,
    connections_refused: Family<ListenerRefusedLabel, Counter>,
    bytes_in: Family<ListenerLabel, Counter>,
    bytes_out: Family<ListenerLabel, Counter>,
    frames_in: Family<ListenerLabel, Counter>,
    frames_out: Family<ListenerLabel, Counter>,
    /// One handle per listener name, in the order they were first asked for.
    listeners: Mutex<Vec<ListenerMetrics>>,
    delivery_latency: LatencyHistogram,
}

impl Default for HubMetrics {
    fn default() -> Self {
        let m = HubMetrics {
            registry: Mutex::new(Registry::with_prefix("tidegate")),
            published: Counter::default(),
            delivered: Counter::default(),
            consumed: Counter::default(),
            dropped_oldest: Counter::default(),
            disconnected_slow: Counter::default(),
            routed: Counter::default(),
            route_failures: Counter::default(),
            subscribers: Gauge::default(),
            subscriptions: Gauge::default(),
            queued: Gauge::default(),
            connections_accepted: Family::default(),
            connections_open: Family::default(),
            listener_errors: Family::default(),
            connections_refused: Family::default(),
            bytes_in: Family::default(),
            bytes_out: Family::default(),
            frames_in: Family::default(),
            frames_out: Family::default(),
            listeners: Mutex::new(Vec::new()),
            delivery_latency: LatencyHistogram::default(),
        };
        {
            let mut r = m.registry.lock();
            r.register(
                "hub_published",
                "Messages published into the hub",
                m.published.clone(),
            );
            r.register(
                "hub_delivered",
                "Messages queued to subscribers",
                m.delivered.clone(),
            );
            r.register(
                "hub_consumed",
                "Messages taken from subscriber queues",
                m.consumed.clone(),
            );
            r.register(
                "hub_dropped_oldest",
                "Messages dropped by drop-oldest overflow",
                m.dropped_oldest.clone(),
            );
            r.register(
                "hub_disconnected_slow",
                "Subscribers disconnected on overflow",
                m.disconnected_slow.clone(),
            );
            r.register(
                "hub_routed",
                "Messages handed to routed sinks",
                m.routed.clone(),
            );
            r.register(
                "hub_route_failures",
                "Routed messages failed by their sink",
                m.route_failures.clone(),
            );
            r.register("hub_subscribers", "Live subscribers", m.subscribers.clone());
            r.register(
                "hub_subscriptions",
                "Live subscriptions",
                m.subscriptions.clone(),
            );
            r.register(
                "hub_subscriber_queue_depth",
                "Messages waiting in all subscriber queues",
                m.queued.clone(),
            );
            r.register(
                "listener_connections_accepted",
                "Connections accepted per listener",
                m.connections_accepted.clone(),
            );
            r.register(
                "listener_connections_open",
                "Connections open per listener",
                m.connections_open.clone(),
            );
            r.register(
                "listener_errors",
                "Protocol and I/O errors per listener and kind",
                m.listener_errors.clone(),
            );
            r.register(
                "listener_connections_refused",
                "Connections closed at accept per listener and reason",
                m.connections_refused.clone(),
            );
            r.register(
                "listener_bytes_in",
                "Bytes read from clients per listener",
                m.bytes_in.clone(),
            );
            r.register(
                "listener_bytes_out",
                "Bytes written to clients per listener",
                m.bytes_out.clone(),
            );
            r.register(
                "listener_frames_in",
                "Protocol frames (messages, chunks, packets, requests) decoded per listener",
                m.frames_in.clone(),
            );
            r.register(
                "listener_frames_out",
                "Messages written to clients per listener (hub messages delivered to subscribers)",
                m.frames_out.clone(),
            );
        }
        m
    }
}

impl HubMetrics {
    /// Registers a component's own metric under `tidegate_<name>`.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry.lock().register(name, help, metric);
    }

    /// Registers the in-flight byte budget's fill level and size.
    pub fn register_budget(&self, budget: &crate::InflightBudget) {
        let limit: Gauge = Gauge::default();
        limit.set(budget.total() as i64);
        let mut r = self.registry.lock();
        r.register(
            "hub_inflight_bytes",
            "Bytes read from clients and not yet acknowledged or dropped",
            budget.in_use_gauge(),
        );
        r.register(
            "hub_inflight_bytes_limit",
            "The in-flight byte budget ([hub] max_inflight_bytes)",
            limit,
        );
    }

    /// A handle for one listener's connection, traffic and error counters.
    /// Every handle of one name shares the same counters.
    pub fn listener(&self, name: &str) -> ListenerMetrics {
        let mut known = self.listeners.lock();
        if let Some(l) = known.iter().find(|l| l.name == name) {
            return l.clone();
        }
        let label = ListenerLabel {
            listener: name.to_owned(),
        };
        let l = ListenerMetrics {
            name: name.to_owned(),
            accepted: self.connections_accepted.get_or_create(&label).clone(),
            open: self.connections_open.get_or_create(&label).clone(),
            bytes_in: self.bytes_in.get_or_create(&label).clone(),
            bytes_out: self.bytes_out.get_or_create(&label).clone(),
            frames_in: self.frames_in.get_or_create(&label).clone(),
            frames_out: self.frames_out.get_or_create(&label).clone(),
            errors: self.listener_errors.clone(),
            refused: self.connections_refused.clone(),
        };
        known.push(l.clone());
        l
    }

    /// Every listener that asked for its handle so far.
    pub fn listeners(&self) -> Vec<ListenerMetrics> {
        self.listeners.lock().clone()
    }

    /// How long delivered messages waited between `Hub::publish` and the
    /// session taking them from its queue.
    pub fn delivery_latency(&self) -> &LatencyHistogram {
        &self.delivery_latency
    }

    /// The Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        let queued = self.delivered.get() as i64
            - self.consumed.get() as i64
            - self.dropped_oldest.get() as i64;
        self.queued.set(queued.max(0));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock())
            .expect("writing to a String cannot fail");
        out
    }
}

/// One listener's counters.
#[derive(Clone, Debug)]
pub struct ListenerMetrics {
    name: String,
    accepted: Counter,
    open: Gauge,
    bytes_in: Counter,
    bytes_out: Counter,
    frames_in: Counter,
    frames_out: Counter,
    errors: Family<ListenerErrorLabel, Counter>,
    refused: Family<ListenerRefusedLabel, Counter>,
}

impl ListenerMetrics {
    /// Counts an accepted connection; the returned guard keeps it counted as
    /// open until dropped.
    pub fn connection(&self) -> ConnectionGuard {
        self.accepted.inc();
        self.open.inc();
        ConnectionGuard {
            open: self.open.clone(),
        }
    }

    /// Connections open right now.
    pub fn open_connections(&self) -> i64 {
        self.open.get()
    }

    /// The listener's name (its config section).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counts a connection closed at accept, by `reason`.
    pub fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ListenerRefusedLabel {
                listener: self.name.clone(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Refusals of `reason` counted so far (tests read it).
    pub fn refused_count(&self, reason: &str) -> u64 {
        self.refused
            .get_or_create(&ListenerRefusedLabel {
                listener: self.name.clone(),
                reason: reason.to_owned(),
            })
            .get()
    }

    /// Counts `n` bytes read from a client.
    pub fn bytes_in(&self, n: usize) {
        self.bytes_in.inc_by(n as u64);
    }

    /// Counts `n` bytes written to a client.
    pub fn bytes_out(&self, n: usize) {
        self.bytes_out.inc_by(n as u64);
    }

    /// Counts `n` decoded protocol frames.
    pub fn frames_in(&self, n: u64) {
        self.frames_in.inc_by(n);
    }

    /// Counts `n` messages written to clients.
    pub fn frames_out(&self, n: u64) {
        self.frames_out.inc_by(n);
    }

    /// Connections accepted so far.
    pub fn accepted_total(&self) -> u64 {
        self.accepted.get()
    }

    /// Bytes read so far.
    pub fn bytes_in_total(&self) -> u64 {
        self.bytes_in.get()
    }

    /// Bytes written so far.
    pub fn bytes_out_total(&self) -> u64 {
        self.bytes_out.get()
    }

    /// Frames decoded so far.
    pub fn frames_in_total(&self) -> u64 {
        self.frames_in.get()
    }

    /// Messages written so far.
    pub fn frames_out_total(&self) -> u64 {
        self.frames_out.get()
    }

    /// Counts one error of `kind` (`oversize_frame`, `tls_handshake`, …).
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&ListenerErrorLabel {
                listener: self.name.clone(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Errors of `kind` counted so far (tests read it).
    pub fn error_count(&self, kind: &str) -> u64 {
        self.errors
            .get_or_create(&ListenerErrorLabel {
                listener: self.name.clone(),
                kind: kind.to_owned(),
            })
            .get()
    }
}

/// Keeps one connection counted as open.
#[derive(Debug)]
pub struct ConnectionGuard {
    open: Gauge<i64, std::sync::atomic::AtomicI64>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.open.dec();
    }
}
