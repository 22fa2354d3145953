//! `[s2s]` configuration section: the RAW listener, the ports it exposes,
//! TLS, and every limit a client can run into.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec::PacketLimits;

/// Most attributes per FlowFile (NiFi's `MAX_NUM_ATTRIBUTES`).
pub const DEFAULT_MAX_ATTRIBUTES: u64 = 25_000;
/// Most bytes of one attribute name or value.
pub const DEFAULT_MAX_ATTRIBUTE_BYTES: u64 = 1 << 20;
/// Most bytes of all attributes of one FlowFile.
pub const DEFAULT_MAX_ATTRIBUTES_TOTAL_BYTES: u64 = 4 << 20;
/// Most content bytes of one FlowFile (held in memory until committed).
pub const DEFAULT_MAX_CONTENT_BYTES: u64 = 64 << 20;
/// Most FlowFiles in one transaction.
pub const DEFAULT_MAX_TRANSACTION_FLOWFILES: u64 = 100_000;
/// Most bytes (uncompressed packets) in one transaction.
pub const DEFAULT_MAX_TRANSACTION_BYTES: u64 = 256 << 20;
/// Most open RAW connections; further ones are closed at accept.
pub const DEFAULT_MAX_CONNECTIONS: usize = 20_000;
/// Longest wait for any one read inside a handshake or transaction.
pub const DEFAULT_READ_TIMEOUT_MS: u64 = 30_000;
/// Longest wait for the next request on an idle pooled connection.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// HTTP transaction time-to-live, advertised to clients (seconds).
pub const DEFAULT_HTTP_TRANSACTION_TTL_SECS: u64 = 30;
/// Most open HTTP transactions.
pub const DEFAULT_MAX_HTTP_TRANSACTIONS: usize = 10_000;
/// Messages an output port holds for clients that have not fetched them.
pub const DEFAULT_OUTPUT_QUEUE_CAPACITY: usize = 10_000;
/// Most FlowFiles sent in one output-port transaction.
pub const DEFAULT_OUTPUT_BATCH_MAX: usize = 1_000;
/// How long in-flight connections may finish after shutdown starts.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 5_000;

/// One `[[s2s.input_ports]]` / `[[s2s.output_ports]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Port name clients ask for.
    pub name: String,
    /// Hub topic the port publishes to (input) or subscribes to (output;
    /// patterns such as `logs.>` allowed).
    pub topic: String,
    /// Port identifier advertised to clients; default: a UUID derived from
    /// the name, stable across restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Client certificate subject DNs allowed to use this port. Empty: any
    /// client (with TLS, any client whose certificate verified).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_dns: Vec<String>,
}

impl PortConfig {
    /// A port named `name` on `topic`, any client allowed.
    pub fn new(name: impl Into<String>, topic: impl Into<String>) -> Self {
        PortConfig {
            name: name.into(),
            topic: topic.into(),
            id: None,
            allowed_dns: Vec::new(),
        }
    }

    /// The identifier clients use for this port.
    pub fn resolved_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_URL,
                format!("tidegate:s2s:{}", self.name).as_bytes(),
            )
            .to_string()
        })
    }
}

/// `[s2s.tls]`: TLS with client certificates (`siteToSiteSecure: true`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Server certificate chain, PEM.
    pub cert: PathBuf,
    /// Server private key, PEM.
    pub key: PathBuf,
    /// CA certificates client certificates must chain to, PEM.
    pub client_ca: PathBuf,
}

/// `[s2s]`: the Site-to-Site RAW listener and the ports it exposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S2sConfig {
    /// Address of the RAW socket listener.
    pub listen: SocketAddr,
    /// `false` leaves the RAW listener off (discovery then advertises no RAW port).
    pub enabled: bool,
    /// Host name advertised in discovery and peer lists; clients connect to it.
    pub host: String,
    /// Input ports (clients send to them).
    pub input_ports: Vec<PortConfig>,
    /// Output ports (clients receive from them).
    pub output_ports: Vec<PortConfig>,
    /// TLS with client certificates; absent = plain TCP.
    pub tls: Option<TlsConfig>,
    /// Most attributes per FlowFile.
    pub max_attributes: u64,
    /// Most bytes of one attribute name or value.
    pub max_attribute_bytes: u64,
    /// Most bytes of all attributes of one FlowFile.
    pub max_attributes_total_bytes: u64,
    /// Most content bytes of one FlowFile.
    pub max_content_bytes: u64,
    /// Most FlowFiles per transaction.
    pub max_transaction_flowfiles: u64,
    /// Most uncompressed bytes per transaction.
    pub max_transaction_bytes: u64,
    /// Most open RAW connections.
    pub max_connections: usize,
    /// Per-read timeout inside a handshake or transaction (ms).
    pub read_timeout_ms: u64,
    /// Idle timeout between requests on a pooled connection (ms).
    pub idle_timeout_ms: u64,
    /// HTTP transaction time-to-live (s).
    pub http_transaction_ttl_secs: u64,
    /// Most open HTTP transactions.
    pub max_http_transactions: usize,
    /// Messages an output port queues for clients (drop-oldest beyond).
    pub output_queue_capacity: usize,
    /// Most FlowFiles per output-port transaction.
    pub output_batch_max: usize,
    /// Drain time for in-flight connections at shutdown (ms).
    pub shutdown_grace_ms: u64,
}

impl Default for S2sConfig {
    fn default() -> Self {
        S2sConfig {
            listen: "127.0.0.1:10000".parse().expect("literal"),
            enabled: true,
            host: "localhost".into(),
            input_ports: vec![PortConfig::new("input", "s2s.input")],
            output_ports: Vec::new(),
            tls: None,
            max_attributes: DEFAULT_MAX_ATTRIBUTES,
            max_attribute_bytes: DEFAULT_MAX_ATTRIBUTE_BYTES,
            max_attributes_total_bytes: DEFAULT_MAX_ATTRIBUTES_TOTAL_BYTES,
            max_content_bytes: DEFAULT_MAX_CONTENT_BYTES,
            max_transaction_flowfiles: DEFAULT_MAX_TRANSACTION_FLOWFILES,
            max_transaction_bytes: DEFAULT_MAX_TRANSACTION_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            read_timeout_ms: DEFAULT_READ_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            http_transaction_ttl_secs: DEFAULT_HTTP_TRANSACTION_TTL_SECS,
            max_http_transactions: DEFAULT_MAX_HTTP_TRANSACTIONS,
            output_queue_capacity: DEFAULT_OUTPUT_QUEUE_CAPACITY,
            output_batch_max: DEFAULT_OUTPUT_BATCH_MAX,
            shutdown_grace_ms: DEFAULT_SHUTDOWN_GRACE_MS,
        }
    }
}

impl S2sConfig {
    /// The packet decoder's limits.
    pub fn packet_limits(&self) -> PacketLimits {
        PacketLimits {
            max_attributes: self.max_attributes,
            max_attribute_bytes: self.max_attribute_bytes,
            max_attributes_total_bytes: self.max_attributes_total_bytes,
            max_content_bytes: self.max_content_bytes,
        }
    }

    /// [`Self::read_timeout_ms`] as a duration.
    pub fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.read_timeout_ms)
    }

    /// [`Self::idle_timeout_ms`] as a duration.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    /// True when the RAW listener speaks TLS.
    pub fn secure(&self) -> bool {
        self.tls.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ids_are_stable_and_overridable() {
        let a = PortConfig::new("input", "t");
        assert_eq!(a.resolved_id(), PortConfig::new("input", "u").resolved_id());
        assert_ne!(a.resolved_id(), PortConfig::new("other", "t").resolved_id());
        let b = PortConfig {
            id: Some("x".into()),
            ..a
        };
        assert_eq!(b.resolved_id(), "x");
    }

    #[test]
    fn toml_round_trip() {
        let c: S2sConfig = toml::from_str(
            "listen = \"127.0.0.1:1\"\n[[input_ports]]\nname = \"a\"\ntopic = \"t.a\"\nallowed_dns = [\"CN=x\"]\n",
        )
        .unwrap();
        assert_eq!(c.input_ports[0].allowed_dns, vec!["CN=x".to_string()]);
        assert_eq!(c.max_attributes, 25_000);
    }
}
