//! `[s2s]` configuration section.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// One `[[s2s.input_ports]]` / `[[s2s.output_ports]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Port name clients ask for.
    pub name: String,
    /// Hub topic the port publishes to (input) or subscribes to (output).
    pub topic: String,
}

/// `[s2s]`: the Site-to-Site RAW listener and the ports it exposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S2sConfig {
    /// Address of the RAW socket listener.
    pub listen: SocketAddr,
    /// `false` leaves the RAW listener off.
    pub enabled: bool,
    /// Input ports (clients send to them).
    pub input_ports: Vec<PortConfig>,
    /// Output ports (clients receive from them).
    pub output_ports: Vec<PortConfig>,
}

impl Default for S2sConfig {
    fn default() -> Self {
        S2sConfig {
            listen: "127.0.0.1:10000".parse().expect("literal"),
            enabled: true,
            input_ports: vec![PortConfig {
                name: "input".into(),
                topic: "s2s.input".into(),
            }],
            output_ports: Vec::new(),
        }
    }
}
