//! A hub wired to a Kafka sink, as `tidegate serve` wires it, for tests.

use std::sync::Arc;

use tidegate_hub::{Hub, Pattern, RouteTable};

use crate::KafkaSink;

/// A hub whose topics matching `pattern` route to `sink`, with the sink's
/// counters registered in the hub's metrics.
pub fn hub_routing_to(pattern: &str, sink: &Arc<KafkaSink>) -> Hub {
    let mut routes = RouteTable::default();
    routes.add(
        Pattern::parse(pattern).expect("a valid route pattern"),
        sink.clone(),
    );
    let hub = Hub::new(routes);
    sink.register_metrics(hub.metrics());
    hub
}
