//! `[push]`: the settings of Engine.IO, Socket.IO and `/ws` sessions.
//!
//! Every limit and default is a named constant here; the rest of the crate
//! reads them from [`PushConfig`] only.

use serde::{Deserialize, Serialize};
use tidegate_hub::{OverflowPolicy, SubscriberOptions};

/// Default interval between server pings (Engine.IO `pingInterval`).
pub const DEFAULT_PING_INTERVAL_MS: u64 = 25_000;
/// Default time a client has to answer a ping (Engine.IO `pingTimeout`).
pub const DEFAULT_PING_TIMEOUT_MS: u64 = 20_000;
/// Default largest polling request or response body, and largest websocket
/// message (Engine.IO `maxPayload`, the reference's `maxHttpBufferSize`).
pub const DEFAULT_MAX_PAYLOAD: usize = 1_000_000;
/// Default time a probed websocket has to send the upgrade packet `5`.
pub const DEFAULT_UPGRADE_TIMEOUT_MS: u64 = 10_000;
/// Default bound of a session's hub queue, in messages.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;
/// Default largest number of subscriptions one session may hold.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 10_000;
/// Default largest number of live Engine.IO sessions (both paths together).
pub const DEFAULT_MAX_SESSIONS: usize = 100_000;

/// How connections are authenticated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Anyone may subscribe and publish anything.
    #[default]
    None,
    /// An HS256 JWT is required (Socket.IO CONNECT `auth.token`, `?token=`
    /// on `/ws` and `/engine.io/`, `Authorization: Bearer` on
    /// `/v1/publish`); its `subscribe` / `publish` claims bound what it may do.
    Jwt,
}

/// `[push]` (served on `[http]` under `/engine.io/`, `/socket.io/`, `/ws`
/// and `/v1/publish`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushConfig {
    /// Serve push at all.
    pub enabled: bool,
    /// Milliseconds between server pings.
    pub ping_interval_ms: u64,
    /// Milliseconds a client has to answer a ping before its session closes.
    pub ping_timeout_ms: u64,
    /// Largest polling body / websocket message, in bytes.
    pub max_payload: usize,
    /// Milliseconds a probed websocket has to complete the upgrade.
    pub upgrade_timeout_ms: u64,
    /// Messages a session's hub queue holds before the overflow policy applies.
    pub queue_capacity: usize,
    /// What a full session queue does: `drop-oldest` (counted) or `disconnect`.
    pub overflow: OverflowPolicy,
    /// Largest number of subscriptions per session.
    pub max_subscriptions: usize,
    /// Largest number of live Engine.IO sessions.
    pub max_sessions: usize,
    /// Socket.IO namespaces besides `/` that clients may connect to.
    pub namespaces: Vec<String>,
    /// Behave like the reference implementations' test servers (echo every
    /// Engine.IO message; Socket.IO `auth`, `message-back`,
    /// `message-with-ack`, namespace `/custom`), for conformance suites.
    pub conformance: bool,
    /// `none` or `jwt`.
    pub auth: AuthMode,
    /// The HS256 secret of `auth = "jwt"`.
    pub jwt_secret: String,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            enabled: true,
            ping_interval_ms: DEFAULT_PING_INTERVAL_MS,
            ping_timeout_ms: DEFAULT_PING_TIMEOUT_MS,
            max_payload: DEFAULT_MAX_PAYLOAD,
            upgrade_timeout_ms: DEFAULT_UPGRADE_TIMEOUT_MS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            overflow: OverflowPolicy::DropOldest,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            max_sessions: DEFAULT_MAX_SESSIONS,
            namespaces: Vec::new(),
            conformance: false,
            auth: AuthMode::None,
            jwt_secret: String::new(),
        }
    }
}

impl PushConfig {
    /// The hub queue options of one session.
    pub fn subscriber_options(&self) -> SubscriberOptions {
        SubscriberOptions {
            capacity: self.queue_capacity.max(1),
            overflow: self.overflow,
        }
    }

    /// Whether Socket.IO namespace `nsp` exists.
    pub fn has_namespace(&self, nsp: &str) -> bool {
        nsp == "/"
            || (self.conformance && nsp == "/custom")
            || self.namespaces.iter().any(|n| n == nsp)
    }

    /// A configuration error, naming the key, or `None`.
    pub fn check(&self) -> Option<String> {
        if self.ping_interval_ms == 0 {
            return Some("ping_interval_ms must be at least 1".into());
        }
        if self.ping_timeout_ms == 0 {
            return Some("ping_timeout_ms must be at least 1".into());
        }
        if self.max_payload < 64 {
            return Some("max_payload must be at least 64 bytes".into());
        }
        if self.queue_capacity == 0 {
            return Some("queue_capacity must be at least 1".into());
        }
        if self.auth == AuthMode::Jwt && self.jwt_secret.is_empty() {
            return Some("auth = \"jwt\" needs jwt_secret".into());
        }
        if let Some(n) = self.namespaces.iter().find(|n| !n.starts_with('/')) {
            return Some(format!("namespaces: {n:?} must start with '/'"));
        }
        None
    }
}
