//! Configuration types shared by every component: listener sections, routes,
//! subscriber overflow policy. Each protocol crate defines its own section and
//! embeds [`ListenerConfig`] for its socket.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// A listening socket: every listener section of the config has these keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// `host:port` to bind.
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

impl ListenerConfig {
    /// An enabled listener on `addr` (a literal such as `"127.0.0.1:8080"`).
    pub fn on(addr: &str) -> Self {
        ListenerConfig {
            listen: addr.parse().expect("literal socket address"),
            enabled: true,
        }
    }
}

fn default_true() -> bool {
    true
}

/// What happens when a subscriber's bounded queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverflowPolicy {
    /// Discard the oldest queued message to make room, and count it.
    #[default]
    DropOldest,
    /// Close the subscriber: it reads what is queued, then gets an error.
    Disconnect,
}

/// `[[routes]]`: messages whose topic matches `topics` go to sink `sink`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic pattern (`*` one token, `>` the rest).
    pub topics: String,
    /// Name of a configured sink (`kafka`).
    pub sink: String,
}
