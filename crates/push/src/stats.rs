//! What push reports for `$sys.stats`: live sessions by transport, and the
//! hub messages handed to clients (counted as the `[http]` listener's
//! messages out in `/metrics`, since push is served on `[http]`).
//!
//! Engine.IO sessions are counted from the registry when asked (once a
//! second), so the hot path never touches a shared counter for them; plain
//! `/ws` connections hold a guard on a counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tidegate_hub::{Hub, ListenerMetrics};

use crate::session::SessionRegistry;

/// The listener push is served on (its config section).
pub const HTTP_LISTENER: &str = "http";

/// Push's counters.
#[derive(Debug)]
pub struct PushStats {
    ws_sessions: Arc<AtomicU64>,
    http: ListenerMetrics,
}

/// Live sessions by transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounts {
    /// Engine.IO / Socket.IO sessions on HTTP long-polling.
    pub polling: u64,
    /// Engine.IO / Socket.IO sessions on WebSocket (opened so or upgraded).
    pub websocket: u64,
    /// Plain WebSocket connections at `/ws`.
    pub ws: u64,
}

/// Keeps one `/ws` connection counted while it lives.
#[derive(Debug)]
pub struct WsSessionGuard(Arc<AtomicU64>);

impl Drop for WsSessionGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PushStats {
    /// Counters for push on `hub`.
    pub fn new(hub: &Hub) -> Self {
        PushStats {
            ws_sessions: Arc::default(),
            http: hub.metrics().listener(HTTP_LISTENER),
        }
    }

    /// Counts a `/ws` connection until the guard drops.
    pub fn ws_session(&self) -> WsSessionGuard {
        self.ws_sessions.fetch_add(1, Ordering::Relaxed);
        WsSessionGuard(self.ws_sessions.clone())
    }

    /// Counts `n` hub messages handed to a client's transport.
    pub fn delivered(&self, n: usize) {
        self.http.frames_out(n as u64);
    }

    /// Sessions live now.
    pub fn sessions(&self, registry: &SessionRegistry) -> SessionCounts {
        let (polling, websocket) = registry.count_by_transport();
        SessionCounts {
            polling,
            websocket,
            ws: self.ws_sessions.load(Ordering::Relaxed),
        }
    }
}
