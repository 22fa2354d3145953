//! `[http]`: the listener block plus the limits only an HTTP server has.

use serde::{Deserialize, Serialize};
use tidegate_listener::ListenerConfig;

/// Default longest time from a request's headers to its response,
/// milliseconds (a long-poll or S2S HTTP request answers well within it).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
/// Default largest request body, bytes; a larger one is answered 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 256 * 1024 * 1024;

/// `[http]`: metrics, health, the dashboard, S2S discovery and HTTP
/// transport. Its `read_timeout_ms` is the header-read timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpConfig {
    /// `listen`, `enabled`, `max_connections`, timeouts, `tls`, `allow`.
    #[serde(flatten)]
    pub listener: ListenerConfig<8080>,
    /// Longest time a request may take from its headers to its response,
    /// milliseconds; past it the client gets 408.
    pub request_timeout_ms: u64,
    /// Largest request body, bytes; a larger one gets 413.
    pub max_body_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listener: ListenerConfig::default(),
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}
