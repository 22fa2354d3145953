//! `[sinks.s2s]`: where and how routed hub messages go to a NiFi input port.
//!
//! ```toml
//! [sinks.s2s]
//! url = ["http://nifi-1:8080/nifi", "http://nifi-2:8080/nifi"]   # or one string
//! port = "input"            # the input port's name or id
//! transport = "raw"         # raw | http
//! compress = false
//! batch_max_flowfiles = 500 # per transaction
//! batch_max_bytes = 1048576
//! batch_max_ms = 5          # how long a transaction waits to fill
//! [sinks.s2s.tls]           # client certificate (RAW: secure peers; HTTP: https URLs)
//! ca = "ca.pem"
//! cert = "client.pem"
//! key = "client.key"
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

/// Default FlowFiles per transaction.
pub const DEFAULT_BATCH_MAX_FLOWFILES: usize = 500;
/// Default content bytes per transaction.
pub const DEFAULT_BATCH_MAX_BYTES: usize = 1 << 20;
/// Default time a transaction waits to fill, milliseconds.
pub const DEFAULT_BATCH_MAX_MS: u64 = 5;
/// Default bound on messages taken and not yet acknowledged by NiFi.
pub const DEFAULT_QUEUE_MAX_MESSAGES: usize = 10_000;
/// Default transactions in flight at once (one connection each).
pub const DEFAULT_CONNECTIONS: usize = 2;
/// Default socket and request timeout, milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default peer list refresh, milliseconds (NiFi's client: 60 s).
pub const DEFAULT_PEER_REFRESH_MS: u64 = 60_000;
/// Default first wait after a failed transaction, milliseconds.
pub const DEFAULT_RETRY_MIN_MS: u64 = 100;
/// Default longest wait between retries, milliseconds.
pub const DEFAULT_RETRY_MAX_MS: u64 = 5_000;

/// The Site-to-Site transport the sink speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The RAW socket protocol (NiFi's `nifi.remote.input.socket.port`).
    #[default]
    Raw,
    /// The HTTP transport on NiFi's web port.
    Http,
}

/// `[sinks.s2s.tls]`: the CA that signs NiFi's certificates and the client
/// certificate presented to it (PEM files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkTls {
    /// CA certificate(s) trusted for the server.
    pub ca: PathBuf,
    /// Client certificate chain.
    pub cert: PathBuf,
    /// Client private key.
    pub key: PathBuf,
}

/// `[sinks.s2s]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S2sSinkConfig {
    /// NiFi's URL(s) (`http[s]://host:port[/nifi]`); one string or a list.
    /// Discovery and the peer list are asked of the first that answers.
    #[serde(deserialize_with = "one_or_many")]
    pub url: Vec<String>,
    /// The input port, by name or id.
    pub port: String,
    /// `raw` or `http`.
    pub transport: Transport,
    /// Compress packets (`GZIP` / `x-nifi-site-to-site-use-compression`).
    pub compress: bool,
    /// Most FlowFiles in one transaction.
    pub batch_max_flowfiles: usize,
    /// Most content bytes in one transaction (a larger message goes alone).
    pub batch_max_bytes: usize,
    /// How long a transaction waits for more messages before it is sent.
    pub batch_max_ms: u64,
    /// Messages taken and not yet confirmed by NiFi; when reached, `send`
    /// waits (the sources feel it).
    pub queue_max_messages: usize,
    /// Transactions in flight at once, each on its own connection.
    pub connections: usize,
    /// Connect, read and request timeout.
    pub timeout_ms: u64,
    /// How often the peer list (and its FlowFile counts) is fetched again.
    pub peer_refresh_ms: u64,
    /// First wait after a failed transaction or a full port; doubles up to
    /// `retry_max_ms`.
    pub retry_min_ms: u64,
    /// Longest wait between retries.
    pub retry_max_ms: u64,
    /// Client certificate and trusted CA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<SinkTls>,
}

impl Default for S2sSinkConfig {
    fn default() -> Self {
        S2sSinkConfig {
            url: Vec::new(),
            port: String::new(),
            transport: Transport::Raw,
            compress: false,
            batch_max_flowfiles: DEFAULT_BATCH_MAX_FLOWFILES,
            batch_max_bytes: DEFAULT_BATCH_MAX_BYTES,
            batch_max_ms: DEFAULT_BATCH_MAX_MS,
            queue_max_messages: DEFAULT_QUEUE_MAX_MESSAGES,
            connections: DEFAULT_CONNECTIONS,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            peer_refresh_ms: DEFAULT_PEER_REFRESH_MS,
            retry_min_ms: DEFAULT_RETRY_MIN_MS,
            retry_max_ms: DEFAULT_RETRY_MAX_MS,
            tls: None,
        }
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// A `[sinks.s2s]` section that cannot work.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SinkConfigError {
    /// No URL.
    #[error("[sinks.s2s] url: at least one NiFi URL is needed")]
    NoUrl,
    /// A URL that is not `http[s]://host:port[/path]`.
    #[error("[sinks.s2s] url {url:?}: {why}")]
    BadUrl {
        /// The URL as written.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// No port.
    #[error("[sinks.s2s] port: the NiFi input port's name or id is needed")]
    NoPort,
    /// A limit of zero.
    #[error("[sinks.s2s] {0} must be > 0")]
    Zero(&'static str),
    /// An https URL without `[sinks.s2s.tls]`.
    #[error("[sinks.s2s] url {0:?} is https: add a [sinks.s2s.tls] section")]
    HttpsWithoutTls(String),
}

/// A NiFi URL taken apart: whether it is https, and host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NifiUrl {
    /// `https`.
    pub secure: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port (80 / 443 when the URL names none).
    pub port: u16,
}

impl NifiUrl {
    /// Parses `http[s]://host[:port][/path]`.
    pub fn parse(url: &str) -> Result<Self, SinkConfigError> {
        let bad = |why: &str| SinkConfigError::BadUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let (secure, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("must start with http:// or https://"));
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let default_port = if secure { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
            None => default_port,
        };
        Ok(NifiUrl {
            secure,
            host: host.to_owned(),
            port,
        })
    }

    /// The address to connect to (resolving the host name).
    pub async fn resolve(&self) -> std::io::Result<SocketAddr> {
        resolve(&self.host, self.port).await
    }
}

/// Resolves `host:port` to its first address.
pub async fn resolve(host: &str, port: u16) -> std::io::Result<SocketAddr> {
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{host}: no address")))
}

impl S2sSinkConfig {
    /// Checks the section without touching the network.
    pub fn validate(&self) -> Result<Vec<NifiUrl>, SinkConfigError> {
        if self.url.is_empty() {
            return Err(SinkConfigError::NoUrl);
        }
        if self.port.trim().is_empty() {
            return Err(SinkConfigError::NoPort);
        }
        for (name, v) in [
            ("batch_max_flowfiles", self.batch_max_flowfiles as u64),
            ("batch_max_bytes", self.batch_max_bytes as u64),
            ("queue_max_messages", self.queue_max_messages as u64),
            ("connections", self.connections as u64),
            ("timeout_ms", self.timeout_ms),
            ("peer_refresh_ms", self.peer_refresh_ms),
            ("retry_max_ms", self.retry_max_ms),
        ] {
            if v == 0 {
                return Err(SinkConfigError::Zero(name));
            }
        }
        let urls = self
            .url
            .iter()
            .map(|u| NifiUrl::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(u) = urls.iter().zip(&self.url).find(|(u, _)| u.secure) {
            if self.tls.is_none() {
                return Err(SinkConfigError::HttpsWithoutTls(u.1.clone()));
            }
        }
        Ok(urls)
    }

    /// The timeout as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_come_apart() {
        let u = NifiUrl::parse("http://127.0.0.1:18480/nifi").unwrap();
        assert_eq!(
            (u.secure, u.host.as_str(), u.port),
            (false, "127.0.0.1", 18480)
        );
        let u = NifiUrl::parse("https://nifi.example").unwrap();
        assert_eq!((u.secure, u.port), (true, 443));
        let u = NifiUrl::parse("http://[::1]:8080/").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 8080));
        assert!(NifiUrl::parse("nifi://x:1").is_err());
        assert!(NifiUrl::parse("http://:80").is_err());
        assert!(NifiUrl::parse("http://x:99999").is_err());
    }

    #[test]
    fn url_is_one_string_or_a_list() {
        let c: S2sSinkConfig = toml::from_str("url = \"http://a:1\"\nport = \"in\"\n").unwrap();
        assert_eq!(c.url, vec!["http://a:1"]);
        let c: S2sSinkConfig = toml::from_str(
            "url = [\"http://a:1\", \"http://b:2\"]\nport = \"in\"\ntransport = \"http\"\n",
        )
        .unwrap();
        assert_eq!(c.url.len(), 2);
        assert_eq!(c.transport, Transport::Http);
        assert!(c.validate().is_ok());
        assert!(toml::from_str::<S2sSinkConfig>("url = \"http://a:1\"\nprot = \"x\"\n").is_err());
    }

    #[test]
    fn validation_names_what_is_missing() {
        let mut c = S2sSinkConfig::default();
        assert_eq!(c.validate(), Err(SinkConfigError::NoUrl));
        c.url = vec!["https://a:1".into()];
        assert_eq!(c.validate(), Err(SinkConfigError::NoPort));
        c.port = "in".into();
        assert!(matches!(
            c.validate(),
            Err(SinkConfigError::HttpsWithoutTls(_))
        ));
        c.url = vec!["http://a:1".into()];
        c.connections = 0;
        assert_eq!(c.validate(), Err(SinkConfigError::Zero("connections")));
    }
}
