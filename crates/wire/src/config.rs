//! `[wire]` and `[sockperf]` configuration sections.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Default largest frame accepted, in bytes.
pub const DEFAULT_MAX_FRAME: usize = 1024 * 1024;

/// `[wire]`: the framed publish/subscribe/echo listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WireConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    pub enabled: bool,
    /// Largest frame accepted, in bytes.
    pub max_frame: usize,
}

impl Default for WireConfig {
    fn default() -> Self {
        WireConfig {
            listen: "127.0.0.1:9998".parse().expect("literal"),
            enabled: true,
            max_frame: DEFAULT_MAX_FRAME,
        }
    }
}

/// `[sockperf]`: the echo the stock sockperf client drives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SockperfConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    pub enabled: bool,
}

impl Default for SockperfConfig {
    fn default() -> Self {
        SockperfConfig {
            listen: "127.0.0.1:11111".parse().expect("literal"),
            enabled: true,
        }
    }
}
