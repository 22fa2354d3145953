//! The route table: topic pattern → sink. Built once from `[[routes]]` and the
//! configured sinks; read on every publish.

use std::sync::Arc;

use thiserror::Error;

use crate::config::RouteConfig;
use crate::topic::{Pattern, TopicError};
use crate::Sink;

/// A route that cannot be built.
#[derive(Debug, Error)]
pub enum RouteError {
    /// The `topics` pattern is malformed.
    #[error("route topics {pattern:?}: {source}")]
    BadPattern {
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it.
        source: TopicError,
    },
    /// The route names a sink that is not configured.
    #[error(
        "route for {pattern:?} names sink {sink:?}, which is not configured (configured: {known})"
    )]
    UnknownSink {
        /// The pattern of the route.
        pattern: String,
        /// The missing sink.
        sink: String,
        /// Names that do exist.
        known: String,
    },
}

/// Patterns and the sinks they feed, in config order.
#[derive(Clone, Default)]
pub struct RouteTable {
    routes: Vec<(Pattern, Arc<dyn Sink>)>,
}

impl std::fmt::Debug for RouteTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.routes.iter().map(|(p, s)| (p.as_str(), s.name())))
            .finish()
    }
}

impl RouteTable {
    /// Builds the table from config, resolving sink names among `sinks`.
    pub fn build(config: &[RouteConfig], sinks: &[Arc<dyn Sink>]) -> Result<Self, RouteError> {
        let mut routes = Vec::with_capacity(config.len());
        for r in config {
            let pattern = Pattern::parse(&r.topics).map_err(|source| RouteError::BadPattern {
                pattern: r.topics.clone(),
                source,
            })?;
            let sink = sinks.iter().find(|s| s.name() == r.sink).ok_or_else(|| {
                RouteError::UnknownSink {
                    pattern: r.topics.clone(),
                    sink: r.sink.clone(),
                    known: sinks
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            })?;
            routes.push((pattern, sink.clone()));
        }
        Ok(RouteTable { routes })
    }

    /// Adds a route (tests, embedded use).
    pub fn add(&mut self, pattern: Pattern, sink: Arc<dyn Sink>) {
        self.routes.push((pattern, sink));
    }

    /// True when no route exists (every publish completes at once).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The sinks whose routes match `topic`, each at most once, in config
    /// order. Allocates nothing: a sink is skipped when an earlier matching
    /// route already named it (route tables are a handful of entries).
    pub fn matching<'a>(&'a self, topic: &'a str) -> impl Iterator<Item = &'a Arc<dyn Sink>> + 'a {
        self.routes
            .iter()
            .enumerate()
            .filter_map(move |(i, (p, s))| {
                let first = p.matches(topic)
                    && !self.routes[..i]
                        .iter()
                        .any(|(q, t)| Arc::ptr_eq(s, t) && q.matches(topic));
                first.then_some(s)
            })
    }

    /// Every distinct sink in the table.
    pub fn sinks(&self) -> Vec<Arc<dyn Sink>> {
        let mut out: Vec<Arc<dyn Sink>> = Vec::new();
        for (_, s) in &self.routes {
            if !out.iter().any(|o| Arc::ptr_eq(o, s)) {
                out.push(s.clone());
            }
        }
        out
    }
}
