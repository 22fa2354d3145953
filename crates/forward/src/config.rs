//! `[forward]` configuration section.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// `[forward]`: the Fluentd Forward listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForwardConfig {
    /// Address to bind (TCP, and UDP for heartbeats).
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    pub enabled: bool,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            listen: "127.0.0.1:24224".parse().expect("literal"),
            enabled: true,
        }
    }
}
