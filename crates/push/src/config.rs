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
/// Default `connect_timeout_ms` (the npm server's `connectTimeout`).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 45_000;
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
/// Default time a session whose transport was lost is kept for its client
/// to recover it: 0, recovery off (as in Socket.IO, where it is opt-in:
/// with it on, every event carries its offset as a last argument).
pub const DEFAULT_RECOVERY_WINDOW_MS: u64 = 0;
/// Default `cluster_reannounce_ms`: ten minutes. Each announcement is the
/// session's whole subscription list, read and applied by every node; at
/// the seed's load (1,000 sessions × 1,000 subscriptions) a re-announce
/// every 2 s cost +160 ms at p99 (BENCHMARKS.md), so the default keeps
/// it rare.
pub const DEFAULT_CLUSTER_REANNOUNCE_MS: u64 = 600_000;
/// Default number of messages the history keeps per topic.
pub const DEFAULT_RECOVERY_HISTORY: usize = 1024;
/// Default bytes the history keeps over all topics: 64 MiB.
pub const DEFAULT_RECOVERY_HISTORY_BYTES: usize = 64 << 20;
/// Topics the history remembers once their messages are gone (so that a
/// replay that would need them is refused rather than incomplete).
pub const RECOVERY_HISTORY_TOPICS: usize = 100_000;
/// Default time a session holds its first pending packet before writing:
/// 0, every wake-up writes at once.
pub const DEFAULT_WRITE_DELAY_MS: u64 = 0;
/// Default time a *busy* session (one whose previous packet came less than
/// ten times this long before) holds its first pending packet while the
/// server is loaded, so one write carries several; otherwise a packet goes
/// at once.
pub const DEFAULT_BUSY_WRITE_DELAY_MS: u64 = 10;
/// Largest `write_delay_ms` (and `busy_write_delay_ms`) accepted: it adds to every delivery's latency.
pub const MAX_WRITE_DELAY_MS: u64 = 1000;

/// How connections are authenticated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Anyone may subscribe and publish anything.
    #[default]
    None,
    /// A JWT (HS256 or RS256) is required (Socket.IO CONNECT `auth.token`, `?token=`
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
    /// Milliseconds a Socket.IO connection has to CONNECT to a namespace
    /// (the npm server's `connectTimeout`); 0: no limit.
    pub connect_timeout_ms: u64,
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
    /// The HS256 secret of `auth = "jwt"` (empty: HS256 tokens refused).
    pub jwt_secret: String,
    /// The RS256 public key of `auth = "jwt"`, PEM (`-----BEGIN PUBLIC
    /// KEY-----`; empty: RS256 tokens refused).
    pub jwt_public_key: String,
    /// Origins (`scheme://host[:port]`, or `*`) whose pages may use push:
    /// polling answers them with CORS headers, and a request (polling or
    /// websocket) whose `Origin` is not listed is refused with 403. Empty:
    /// no check and no CORS headers. Requests without `Origin` (not from a
    /// browser) are always let through.
    pub allowed_origins: Vec<String>,
    /// Milliseconds a session whose transport was lost waits for its client
    /// to recover it; 0 turns recovery (and event offsets) off.
    pub recovery_window_ms: u64,
    /// Messages the hub keeps per topic for replay to recovering clients
    /// (the history of [`tidegate_hub::history`]; kept while recovery is
    /// on).
    pub recovery_history: usize,
    /// Bytes the history keeps over all topics (payloads and topics plus
    /// 64 per message); the oldest messages go first, whatever their
    /// topic.
    pub recovery_history_bytes: usize,
    /// Cluster mode: bytes each node's registry of the cluster's
    /// recoverable sessions keeps (what they subscribe to, so another node
    /// can recover them); the least recently updated go first.
    pub cluster_sessions_bytes: usize,
    /// Cluster mode: about how often (rounded up to whole ping intervals)
    /// each recoverable Socket.IO session announces its whole state again,
    /// so that a node started after the session subscribed learns it and
    /// can recover it; 0: only changes are announced.
    pub cluster_reannounce_ms: u64,
    /// Milliseconds a session holds its first pending packet so that what
    /// arrives meanwhile goes out in the same write: one websocket flush,
    /// or one long-poll answer (a GET that had to wait). Trades up to this
    /// much latency for fewer writes and requests when each session gets
    /// many messages a second; 0 writes at once.
    pub write_delay_ms: u64,
    /// Like `write_delay_ms`, but only while the server is loaded (see
    /// [`crate::session::load`]) and in a *busy* session, one whose
    /// previous packet came less than ten times this long before: its first
    /// pending packet waits this many milliseconds so the write (a
    /// websocket flush, a long-poll answer) carries what arrives meanwhile.
    /// Otherwise a packet goes at once, so a server with CPU to spare adds
    /// no latency, and a loaded one saves a write (over polling, a whole
    /// HTTP request) per message; 0 turns it off.
    pub busy_write_delay_ms: u64,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            enabled: true,
            ping_interval_ms: DEFAULT_PING_INTERVAL_MS,
            ping_timeout_ms: DEFAULT_PING_TIMEOUT_MS,
            max_payload: DEFAULT_MAX_PAYLOAD,
            upgrade_timeout_ms: DEFAULT_UPGRADE_TIMEOUT_MS,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            overflow: OverflowPolicy::DropOldest,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            max_sessions: DEFAULT_MAX_SESSIONS,
            namespaces: Vec::new(),
            conformance: false,
            auth: AuthMode::None,
            jwt_secret: String::new(),
            jwt_public_key: String::new(),
            allowed_origins: Vec::new(),
            recovery_window_ms: DEFAULT_RECOVERY_WINDOW_MS,
            recovery_history: DEFAULT_RECOVERY_HISTORY,
            recovery_history_bytes: DEFAULT_RECOVERY_HISTORY_BYTES,
            cluster_sessions_bytes: crate::recovery::cluster::DEFAULT_REGISTRY_BYTES,
            cluster_reannounce_ms: DEFAULT_CLUSTER_REANNOUNCE_MS,
            write_delay_ms: DEFAULT_WRITE_DELAY_MS,
            busy_write_delay_ms: DEFAULT_BUSY_WRITE_DELAY_MS,
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

    /// Whether connection state recovery is on.
    pub fn recovery(&self) -> bool {
        self.recovery_window_ms > 0
    }

    /// Every how many pings a session announces its whole state again
    /// (`cluster_reannounce_ms`); `None` when off.
    pub fn reannounce_every_pings(&self) -> Option<u32> {
        if self.cluster_reannounce_ms == 0 {
            return None;
        }
        let pings = self
            .cluster_reannounce_ms
            .div_ceil(self.ping_interval_ms.max(1));
        Some(pings.clamp(1, u32::MAX as u64) as u32)
    }

    /// The history's bounds (`recovery_history`, `recovery_history_bytes`).
    pub fn history_limits(&self) -> tidegate_hub::HistoryLimits {
        tidegate_hub::HistoryLimits {
            per_topic: self.recovery_history,
            max_bytes: self.recovery_history_bytes,
            max_topics: RECOVERY_HISTORY_TOPICS,
        }
    }

    /// How long a session holds its first pending packet (`write_delay_ms`).
    pub fn write_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.write_delay_ms)
    }

    /// How long a busy session holds its first pending packet
    /// (`busy_write_delay_ms`).
    pub fn busy_write_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.busy_write_delay_ms)
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
        if self.auth == AuthMode::Jwt
            && self.jwt_secret.is_empty()
            && self.jwt_public_key.trim().is_empty()
        {
            return Some("auth = \"jwt\" needs jwt_secret or jwt_public_key".into());
        }
        if let Err(e) = crate::auth::JwtVerifier::new(b"", &self.jwt_public_key) {
            return Some(e.to_string());
        }
        if let Some(o) = self
            .allowed_origins
            .iter()
            .find(|o| *o != "*" && !(o.starts_with("http://") || o.starts_with("https://")))
        {
            return Some(format!(
                "allowed_origins: {o:?} must be \"*\" or start with http:// or https://"
            ));
        }
        if self.recovery_window_ms > 0 && self.recovery_history == 0 {
            return Some("recovery_history must be at least 1 when recovery_window_ms > 0".into());
        }
        if self.recovery_window_ms > 0 && self.recovery_history_bytes == 0 {
            return Some(
                "recovery_history_bytes must be at least 1 when recovery_window_ms > 0".into(),
            );
        }
        if self.write_delay_ms > MAX_WRITE_DELAY_MS {
            return Some(format!(
                "write_delay_ms must be at most {MAX_WRITE_DELAY_MS} (it adds to every delivery's latency)"
            ));
        }
        if self.busy_write_delay_ms > MAX_WRITE_DELAY_MS {
            return Some(format!(
                "busy_write_delay_ms must be at most {MAX_WRITE_DELAY_MS} (it adds to a busy session's latency)"
            ));
        }
        if let Some(n) = self.namespaces.iter().find(|n| !n.starts_with('/')) {
            return Some(format!("namespaces: {n:?} must start with '/'"));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reannounce_interval_is_counted_in_whole_pings() {
        let mut c = PushConfig {
            ping_interval_ms: 25_000,
            ..PushConfig::default()
        };
        assert_eq!(
            c.reannounce_every_pings(),
            Some(24),
            "600 s: 24 pings of 25 s"
        );
        c.cluster_reannounce_ms = 1;
        assert_eq!(c.reannounce_every_pings(), Some(1), "at least every ping");
        c.cluster_reannounce_ms = 0;
        assert_eq!(c.reannounce_every_pings(), None, "0 turns it off");
    }
}
