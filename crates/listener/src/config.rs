//! The listener block every listener section of the configuration shares
//! (`[http]`, `[wire]`, `[sockperf]`, `[forward]`, `[s2s]`, …), flattened
//! into the section: `listen`, `enabled`, `max_connections`,
//! `idle_timeout_ms`, `read_timeout_ms`, `tls`, `allow`.
//!
//! The only thing that differs between sections is the default port, so it
//! is a const parameter: `ListenerConfig<24224>` is the Forward listener's
//! block, defaulting to `127.0.0.1:24224`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Default most simultaneous connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default time a connection may stay completely silent (nothing read,
/// nothing written) before it is closed, milliseconds.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Default longest time a partly received frame, header or TLS handshake
/// may take to arrive, milliseconds: the slowloris guard.
pub const DEFAULT_READ_TIMEOUT_MS: u64 = 30_000;

/// How a TLS listener treats client certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A client must present a certificate that chains to `client_ca`.
    #[default]
    Required,
    /// A certificate is verified when presented; clients without one are
    /// served too (the session sees no identity).
    Optional,
}

/// `tls = { … }` in a listener section: serve TLS on that listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain of the server.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates client certificates must chain to; absent means
    /// no client certificates are asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: `required` (default) or `optional`.
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// The listener block of one section. `PORT` is the section's default port
/// on 127.0.0.1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerConfig<const PORT: u16> {
    /// `host:port` to bind (port 0 picks a free port).
    #[serde(default = "default_listen::<PORT>")]
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Simultaneous connections; one more is closed at accept and counted
    /// (`reason="max_connections"`).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A connection that reads and writes nothing for this long is closed,
    /// milliseconds (0: never).
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// The longest a partly received frame (or request header, or TLS
    /// handshake) may take to complete, milliseconds (0: no limit). A client
    /// that trickles a frame slower than this is closed.
    #[serde(default = "default_read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// TLS on this listener; absent means plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Networks (CIDR, e.g. `"10.0.0.0/8"`, `"::1/128"`) allowed to connect;
    /// others are closed at accept (`reason="not_allowed"`). Empty: anyone.
    #[serde(default)]
    pub allow: Vec<IpNet>,
}

impl<const PORT: u16> Default for ListenerConfig<PORT> {
    fn default() -> Self {
        ListenerConfig {
            listen: default_listen::<PORT>(),
            enabled: true,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            read_timeout_ms: DEFAULT_READ_TIMEOUT_MS,
            tls: None,
            allow: Vec::new(),
        }
    }
}

impl<const PORT: u16> ListenerConfig<PORT> {
    /// The defaults, listening on `addr` instead (tests use port 0).
    pub fn on(addr: SocketAddr) -> Self {
        ListenerConfig {
            listen: addr,
            ..Default::default()
        }
    }

    /// The settings the listener core runs with, independent of `PORT`.
    pub fn settings(&self) -> ListenerSettings {
        ListenerSettings {
            listen: self.listen,
            max_connections: self.max_connections.max(1),
            idle_timeout: nonzero_ms(self.idle_timeout_ms),
            read_timeout: nonzero_ms(self.read_timeout_ms),
            tls: self.tls.clone(),
            allow: self.allow.clone(),
        }
    }
}

/// A listener block with its defaults resolved: what [`crate::Listener`]
/// runs with. `None` timeouts are off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// Address to bind.
    pub listen: SocketAddr,
    /// Connection limit (at least 1).
    pub max_connections: usize,
    /// Idle timeout.
    pub idle_timeout: Option<Duration>,
    /// Partial-frame timeout.
    pub read_timeout: Option<Duration>,
    /// TLS files.
    pub tls: Option<TlsConfig>,
    /// Allowed networks (empty: all).
    pub allow: Vec<IpNet>,
}

impl ListenerSettings {
    /// Plain TCP on `addr` with the default limits (tests, benches).
    pub fn plain(addr: SocketAddr) -> Self {
        ListenerConfig::<0>::on(addr).settings()
    }

    /// True when `ip` may connect.
    pub fn allows(&self, ip: IpAddr) -> bool {
        if self.allow.is_empty() {
            return true;
        }
        // An IPv4 client on a dual-stack socket shows up as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.allow.iter().any(|net| net.contains(&ip))
    }
}

fn nonzero_ms(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

fn default_listen<const PORT: u16>() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), PORT)
}

fn default_true() -> bool {
    true
}

fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

fn default_idle_timeout_ms() -> u64 {
    DEFAULT_IDLE_TIMEOUT_MS
}

fn default_read_timeout_ms() -> u64 {
    DEFAULT_READ_TIMEOUT_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Section {
        #[serde(flatten)]
        listener: ListenerConfig<24224>,
        #[serde(default)]
        other: u32,
    }

    #[test]
    fn a_flattened_block_takes_the_sections_default_port() {
        let s: Section = toml::from_str("other = 3\n").unwrap();
        assert_eq!(s.listener.listen.to_string(), "127.0.0.1:24224");
        assert_eq!(s.listener.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(s.other, 3);
        let s: Section = toml::from_str(
            "listen = \"0.0.0.0:1\"\nmax_connections = 5\nallow = [\"10.0.0.0/8\"]\n[tls]\ncert = \"c\"\nkey = \"k\"\n",
        )
        .unwrap();
        assert_eq!(s.listener.max_connections, 5);
        assert_eq!(
            s.listener.tls.as_ref().unwrap().client_auth,
            ClientAuth::Required
        );
        let back: Section = toml::from_str(&toml::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn the_allow_list_matches_networks_and_mapped_addresses() {
        let mut s = ListenerSettings::plain("127.0.0.1:0".parse().unwrap());
        assert!(s.allows("192.0.2.1".parse().unwrap()));
        s.allow = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        assert!(s.allows("10.1.2.3".parse().unwrap()));
        assert!(s.allows("::ffff:10.1.2.3".parse().unwrap()));
        assert!(s.allows("::1".parse().unwrap()));
        assert!(!s.allows("192.0.2.1".parse().unwrap()));
    }
}
