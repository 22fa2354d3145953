//! `[s2s]` configuration section: the RAW listener (the shared listener
//! block: `listen`, `enabled`, `max_connections`, `idle_timeout_ms`,
//! `read_timeout_ms`, `tls`, `allow`), the ports it exposes, and every
//! Site-to-Site limit a client can run into.
//!
//! TLS is the listener block's `tls`. NiFi's secure Site-to-Site always
//! identifies clients by certificate, so the S2S set-up is `client_ca` with
//! the default `client_auth = "required"`; the certificate's subject DN is
//! what the per-port `allowed_dns` lists are checked against.
//!
//! ```toml
//! [s2s]
//! listen = "127.0.0.1:10000"
//! [s2s.tls]
//! cert = "server.pem"
//! key = "server.key"
//! client_ca = "ca.pem"          # client certificates must chain to it
//! # client_auth = "required"    # default; "optional" also serves clients without one
//! [[s2s.input_ports]]
//! name = "input"
//! topic = "s2s.input"
//! allowed_dns = ["CN=client, OU=NIFI"]
//! ```

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidegate_listener::ListenerConfig;

use crate::codec::{modified_utf8_len, PacketLimits, MAX_PEER_HOST_BYTES};

/// Default port of the RAW listener (NiFi's `nifi.remote.input.socket.port`
/// example value).
pub const DEFAULT_PORT: u16 = 10_000;
/// The listener block of `[s2s]`, defaulting to `127.0.0.1:10000`.
pub type S2sListenerConfig = ListenerConfig<DEFAULT_PORT>;

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
/// Longest one transaction may stay open (ms): 120 s, the time a
/// transaction of the default `max_transaction_bytes` (256 MiB) takes at the
/// slowest rate the default `read_timeout_ms` lets a FlowFile of the default
/// `max_content_bytes` arrive at (64 MiB in 30 s), and twice the `[http]`
/// `request_timeout_ms` a flow-files POST may take.
pub const DEFAULT_MAX_TRANSACTION_MS: u64 = 120_000;
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
    #[serde(default)]
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

/// `[s2s]`: the Site-to-Site RAW listener and the ports it exposes.
///
/// The listener block's keys sit directly in `[s2s]`, as in the TOML; they
/// also read as the section's own in code (`config.listen`,
/// `config.read_timeout_ms`) through `Deref` to [`S2sConfig::listener`].
/// (No `deny_unknown_fields`: serde cannot combine it with `flatten`; the
/// binary reports unknown keys for the whole file.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct S2sConfig {
    /// The RAW listener: `listen` (default 127.0.0.1:10000), `enabled`
    /// (`false`: discovery advertises no RAW port), `max_connections`,
    /// `idle_timeout_ms` (between requests on a pooled connection),
    /// `read_timeout_ms` (the session applies it to each read inside a
    /// handshake or transaction), `tls` (see the module documentation),
    /// `allow`. A `0` timeout is no limit.
    #[serde(flatten)]
    pub listener: S2sListenerConfig,
    /// Host name advertised in discovery and peer lists; clients connect to it.
    pub host: String,
    /// Input ports (clients send to them).
    pub input_ports: Vec<PortConfig>,
    /// Output ports (clients receive from them).
    pub output_ports: Vec<PortConfig>,
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
    /// Longest one transaction may stay open, milliseconds; `0` is no
    /// limit. A transaction holds its bytes of the in-flight budget until it
    /// ends, and `read_timeout_ms` only bounds each wait for the next bytes,
    /// so without this a client trickling small fields could hold them
    /// forever. RAW: from `SEND_FLOWFILES` / `RECEIVE_FLOWFILES` to the
    /// client's confirmation (a commit already under way is not cut short);
    /// past it the connection is closed and the transaction rolled back
    /// (`kind="transaction_timeout"`). HTTP: from `POST …/transactions`,
    /// however often the client extends it; past it the transaction expires
    /// as if its TTL had run out.
    pub max_transaction_ms: u64,
    /// HTTP transaction time-to-live (s).
    pub http_transaction_ttl_secs: u64,
    /// Most open HTTP transactions.
    pub max_http_transactions: usize,
    /// Messages an output port queues for clients (drop-oldest beyond).
    pub output_queue_capacity: usize,
    /// Most FlowFiles per output-port transaction.
    pub output_batch_max: usize,
    /// How long open connections may finish their transaction after
    /// shutdown starts, milliseconds (the listener's drain).
    pub shutdown_grace_ms: u64,
}

impl Default for S2sConfig {
    fn default() -> Self {
        S2sConfig {
            listener: S2sListenerConfig::default(),
            host: "localhost".into(),
            input_ports: vec![PortConfig::new("input", "s2s.input")],
            output_ports: Vec::new(),
            max_attributes: DEFAULT_MAX_ATTRIBUTES,
            max_attribute_bytes: DEFAULT_MAX_ATTRIBUTE_BYTES,
            max_attributes_total_bytes: DEFAULT_MAX_ATTRIBUTES_TOTAL_BYTES,
            max_content_bytes: DEFAULT_MAX_CONTENT_BYTES,
            max_transaction_flowfiles: DEFAULT_MAX_TRANSACTION_FLOWFILES,
            max_transaction_bytes: DEFAULT_MAX_TRANSACTION_BYTES,
            max_transaction_ms: DEFAULT_MAX_TRANSACTION_MS,
            http_transaction_ttl_secs: DEFAULT_HTTP_TRANSACTION_TTL_SECS,
            max_http_transactions: DEFAULT_MAX_HTTP_TRANSACTIONS,
            output_queue_capacity: DEFAULT_OUTPUT_QUEUE_CAPACITY,
            output_batch_max: DEFAULT_OUTPUT_BATCH_MAX,
            shutdown_grace_ms: DEFAULT_SHUTDOWN_GRACE_MS,
        }
    }
}

impl S2sConfig {
    /// A configuration error, naming the key, or `None`.
    pub fn check(&self) -> Option<String> {
        // The peer list carries the host as Java's writeUTF, and clients
        // (NiFi's and ours) refuse a list whose host is longer than a DNS
        // name can be; found at start-up rather than by every client.
        if self.host.is_empty() {
            return Some("host must not be empty".into());
        }
        let len = modified_utf8_len(&self.host) as u64;
        if len > MAX_PEER_HOST_BYTES {
            return Some(format!(
                "host is {len} bytes; at most {MAX_PEER_HOST_BYTES} (a host name clients connect to)"
            ));
        }
        None
    }

    /// The packet decoder's limits.
    pub fn packet_limits(&self) -> PacketLimits {
        PacketLimits {
            max_attributes: self.max_attributes,
            max_attribute_bytes: self.max_attribute_bytes,
            max_attributes_total_bytes: self.max_attributes_total_bytes,
            max_content_bytes: self.max_content_bytes,
        }
    }

    /// The listener's `read_timeout_ms` as a duration; `0` (no limit) is
    /// [`Duration::MAX`], which `tokio::time::timeout` treats as never.
    pub fn read_timeout(&self) -> Duration {
        millis_or_never(self.listener.read_timeout_ms)
    }

    /// The listener's `idle_timeout_ms` as a duration; `0` (never) is
    /// [`Duration::MAX`].
    pub fn idle_timeout(&self) -> Duration {
        millis_or_never(self.listener.idle_timeout_ms)
    }

    /// `max_transaction_ms` as a duration; `0` (no limit) is
    /// [`Duration::MAX`].
    pub fn max_transaction(&self) -> Duration {
        millis_or_never(self.max_transaction_ms)
    }

    /// How long open connections may finish after shutdown starts.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    /// True when the RAW listener serves and speaks TLS: what discovery
    /// (`siteToSiteSecure`) and the peer list advertise.
    pub fn secure(&self) -> bool {
        self.listener.enabled && self.listener.tls.is_some()
    }

    /// Names of the ports whose `allowed_dns` list no RAW client can ever
    /// satisfy, because the listener asks for no client certificate (no
    /// `tls.client_ca`). `bind` warns about them.
    pub fn unreachable_dn_lists(&self) -> Vec<&str> {
        let asks_certs = self
            .listener
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some());
        if asks_certs {
            return Vec::new();
        }
        self.input_ports
            .iter()
            .chain(&self.output_ports)
            .filter(|p| !p.allowed_dns.is_empty())
            .map(|p| p.name.as_str())
            .collect()
    }
}

impl Deref for S2sConfig {
    type Target = S2sListenerConfig;

    fn deref(&self) -> &S2sListenerConfig {
        &self.listener
    }
}

impl DerefMut for S2sConfig {
    fn deref_mut(&mut self) -> &mut S2sListenerConfig {
        &mut self.listener
    }
}

fn millis_or_never(ms: u64) -> Duration {
    if ms == 0 {
        Duration::MAX
    } else {
        Duration::from_millis(ms)
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
    fn the_advertised_host_must_fit_a_peer_list() {
        let mut c = S2sConfig::default();
        assert_eq!(c.check(), None);
        c.host = "h".repeat(MAX_PEER_HOST_BYTES as usize);
        assert_eq!(c.check(), None);
        c.host.push('h');
        assert!(c.check().unwrap().starts_with("host is 256 bytes"));
        c.host.clear();
        assert_eq!(c.check().unwrap(), "host must not be empty");
    }

    #[test]
    fn toml_round_trip() {
        let c: S2sConfig = toml::from_str(
            "listen = \"127.0.0.1:1\"\n[[input_ports]]\nname = \"a\"\ntopic = \"t.a\"\nallowed_dns = [\"CN=x\"]\n",
        )
        .unwrap();
        assert_eq!(c.input_ports[0].allowed_dns, vec!["CN=x".to_string()]);
        assert_eq!(c.max_attributes, 25_000);
        assert_eq!(c.max_transaction(), Duration::from_secs(120));
        assert_eq!(c.listener.listen.to_string(), "127.0.0.1:1");
    }

    #[test]
    fn the_listener_block_sits_in_the_section_with_the_s2s_port() {
        let c: S2sConfig = toml::from_str("host = \"h\"\n").unwrap();
        assert_eq!(c.listener.listen.to_string(), "127.0.0.1:10000");
        assert_eq!(
            c,
            S2sConfig {
                host: "h".into(),
                ..S2sConfig::default()
            }
        );

        let c: S2sConfig = toml::from_str(
            "max_connections = 7\nread_timeout_ms = 0\nallow = [\"10.0.0.0/8\"]\n\
             [tls]\ncert = \"s.pem\"\nkey = \"s.key\"\nclient_ca = \"ca.pem\"\n\
             [[input_ports]]\nname = \"a\"\ntopic = \"t.a\"\n",
        )
        .unwrap();
        assert_eq!(c.max_connections, 7);
        assert_eq!(c.read_timeout(), Duration::MAX, "0 is no limit");
        let unbounded: S2sConfig = toml::from_str("max_transaction_ms = 0\n").unwrap();
        assert_eq!(unbounded.max_transaction(), Duration::MAX, "0 is no limit");
        let tls = c.listener.tls.as_ref().unwrap();
        assert_eq!(tls.client_auth, tidegate_listener::ClientAuth::Required);
        assert!(c.secure());
        assert!(c.unreachable_dn_lists().is_empty());
        let back: S2sConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn dn_lists_without_client_certificates_are_reported() {
        let mut c = S2sConfig::default();
        c.input_ports[0].allowed_dns = vec!["CN=x".into()];
        assert_eq!(c.unreachable_dn_lists(), vec!["input"]);
        c.listener.tls = Some(tidegate_listener::TlsConfig {
            cert: "s.pem".into(),
            key: "s.key".into(),
            client_ca: Some("ca.pem".into()),
            client_auth: Default::default(),
        });
        assert!(c.unreachable_dn_lists().is_empty());
        c.listener.enabled = false;
        assert!(!c.secure(), "no RAW listener: nothing secure to advertise");
    }
}
