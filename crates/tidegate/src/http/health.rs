//! What `/readyz` reports: every listener accepting and every sink ready.
//! `/healthz` only says the process serves HTTP; `/readyz` says whether a
//! load balancer should send it traffic.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use tidegate_hub::{Sink, SinkHealth};

/// A component's own readiness question: `Some(reason)` when not ready.
type Check = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// Shared readiness state: listeners report themselves, sinks and other
/// components (the KV store) are asked.
#[derive(Clone, Default)]
pub struct Readiness {
    listeners: Arc<Mutex<BTreeMap<&'static str, bool>>>,
    sinks: Arc<Mutex<Vec<Arc<dyn Sink>>>>,
    checks: Arc<Mutex<Vec<(&'static str, Check)>>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("listeners", &*self.listeners.lock())
            .finish()
    }
}

/// The JSON body of `/readyz`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ReadyReport {
    /// True when everything is ready.
    pub ready: bool,
    /// Why not, one line per problem (empty when ready).
    pub reasons: Vec<String>,
}

impl Readiness {
    /// Records whether listener `name` is accepting.
    pub fn set_listener(&self, name: &'static str, accepting: bool) {
        self.listeners.lock().insert(name, accepting);
    }

    /// Adds a sink to ask.
    pub fn add_sink(&self, sink: Arc<dyn Sink>) {
        self.sinks.lock().push(sink);
    }

    /// Adds a component to ask: `check` answers why it is not ready, if it
    /// is not; the reason is reported as `<name>: <reason>`.
    pub fn add_check(
        &self,
        name: &'static str,
        check: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) {
        self.checks.lock().push((name, Box::new(check)));
    }

    /// Marks the process as shutting down (not ready from now on).
    pub fn set_stopping(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The current report.
    pub fn report(&self) -> ReadyReport {
        let mut reasons = Vec::new();
        if self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            reasons.push("shutting down".to_owned());
        }
        for (name, accepting) in self.listeners.lock().iter() {
            if !accepting {
                reasons.push(format!("listener [{name}] is not accepting"));
            }
        }
        for sink in self.sinks.lock().iter() {
            if let SinkHealth::NotReady(why) = sink.health() {
                reasons.push(format!("sink {}: {why}", sink.name()));
            }
        }
        for (name, check) in self.checks.lock().iter() {
            if let Some(why) = check() {
                reasons.push(format!("{name}: {why}"));
            }
        }
        ReadyReport {
            ready: reasons.is_empty(),
            reasons,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Down;
    impl Sink for Down {
        fn name(&self) -> &str {
            "kafka"
        }
        fn send(
            &self,
            _m: tidegate_hub::SharedMessage,
            ack: tidegate_hub::AckToken,
        ) -> tidegate_hub::SinkFuture<'_> {
            drop(ack);
            Box::pin(async {})
        }
        fn health(&self) -> SinkHealth {
            SinkHealth::NotReady("no broker connection".into())
        }
    }

    #[test]
    fn a_stopped_listener_or_a_sink_without_broker_is_not_ready() {
        let r = Readiness::default();
        r.set_listener("forward", true);
        assert!(r.report().ready);
        r.set_listener("forward", false);
        r.add_sink(Arc::new(Down));
        let rep = r.report();
        assert!(!rep.ready);
        assert_eq!(rep.reasons.len(), 2, "{:?}", rep.reasons);
        assert!(rep.reasons[1].contains("no broker connection"));
    }

    #[test]
    fn a_component_check_that_answers_a_reason_makes_it_not_ready() {
        let r = Readiness::default();
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = failed.clone();
        r.add_check("kv", move || {
            f.load(std::sync::atomic::Ordering::Relaxed)
                .then(|| "storage refuses writes".to_owned())
        });
        assert!(r.report().ready);
        failed.store(true, std::sync::atomic::Ordering::Relaxed);
        let rep = r.report();
        assert!(!rep.ready);
        assert_eq!(rep.reasons, vec!["kv: storage refuses writes".to_owned()]);
    }
}
