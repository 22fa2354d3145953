//! `[forward]` configuration section: the listener address, tag → topic
//! mapping, payload format, security (shared key, users, TLS) and every limit
//! that bounds what one client can make the server hold.
//!
//! Each limit is a named constant here, documented once; the server and the
//! codec read them from [`ForwardConfig`] and never hard-code a number.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default address: Fluentd's own port, loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:24224";
/// Default largest msgpack value (a whole Forward message) accepted, bytes.
pub const DEFAULT_MAX_CHUNK_BYTES: usize = 64 * 1024 * 1024;
/// Default largest decompressed size of one CompressedPackedForward chunk
/// (Fluentd's own limit).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 256 * 1024 * 1024;
/// Default deepest msgpack nesting accepted (records inside entries inside
/// the message count).
pub const DEFAULT_MAX_DEPTH: usize = 64;
/// Default maximum simultaneous TCP connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default chunks per connection published but not yet acknowledged; when
/// reached, the connection stops reading until an ack is sent.
pub const DEFAULT_MAX_INFLIGHT_CHUNKS: usize = 16;
/// Default time a chunk may wait for its sinks before the connection is
/// closed without an ack (Fluentd clients give up after 190 s).
pub const DEFAULT_ACK_TIMEOUT_MS: u64 = 190_000;
/// Default time allowed for the TLS and shared-key handshakes.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Default time in-flight chunks get to be acknowledged at shutdown.
pub const DEFAULT_SHUTDOWN_DRAIN_MS: u64 = 5_000;
/// Default size of each socket read, bytes.
pub const DEFAULT_READ_BUFFER_BYTES: usize = 256 * 1024;

/// What a published message's payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadFormat {
    /// The record re-encoded as a JSON object (default).
    #[default]
    Json,
    /// The record's msgpack bytes exactly as the client sent them.
    Msgpack,
}

/// `[forward.tls]`: serve TLS on the same port (the whole stream, handshake
/// included, inside TLS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// `[[forward.users]]`: a username and password a client must present in
/// its PING when any user is configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// User name.
    pub username: String,
    /// Password (compared through the salted SHA-512 digest of the protocol).
    pub password: String,
}

/// `[forward]`: the Fluentd Forward listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForwardConfig {
    /// Address to bind (TCP, and UDP for heartbeats).
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    pub enabled: bool,
    /// Prefix put before the sanitized tag to make the topic
    /// (`"logs."` turns tag `app.web` into topic `logs.app.web`).
    pub topic_prefix: String,
    /// Payload of each published message: `json` or `msgpack`.
    pub payload: PayloadFormat,
    /// Answer UDP heartbeats on the same port.
    pub udp_heartbeat: bool,
    /// When set, every connection must pass the HELO/PING/PONG handshake
    /// with this key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_key: Option<String>,
    /// Hostname this server states in HELO/PONG.
    pub self_hostname: String,
    /// Users accepted in the handshake (none: no user authentication).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserConfig>,
    /// TLS certificate and key; absent means plain TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Largest single msgpack/JSON value (one Forward message), bytes.
    pub max_chunk_bytes: usize,
    /// Largest decompressed CompressedPackedForward chunk, bytes.
    pub max_decompressed_bytes: usize,
    /// Deepest nesting of msgpack containers.
    pub max_depth: usize,
    /// Simultaneous TCP connections; one more is closed at once and counted.
    pub max_connections: usize,
    /// Chunks awaiting their ack per connection before reading pauses.
    pub max_inflight_chunks: usize,
    /// How long a chunk may wait for its sinks before the connection is
    /// closed without an ack, milliseconds.
    pub ack_timeout_ms: u64,
    /// Time allowed for the TLS and shared-key handshakes, milliseconds.
    pub handshake_timeout_ms: u64,
    /// Bytes requested per socket read.
    pub read_buffer_bytes: usize,
    /// At shutdown, how long connections wait for pending acks, milliseconds.
    pub shutdown_drain_ms: u64,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            listen: DEFAULT_LISTEN.parse().expect("literal"),
            enabled: true,
            topic_prefix: String::new(),
            payload: PayloadFormat::Json,
            udp_heartbeat: true,
            shared_key: None,
            self_hostname: "tidegate".to_owned(),
            users: Vec::new(),
            tls: None,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_inflight_chunks: DEFAULT_MAX_INFLIGHT_CHUNKS,
            ack_timeout_ms: DEFAULT_ACK_TIMEOUT_MS,
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            read_buffer_bytes: DEFAULT_READ_BUFFER_BYTES,
            shutdown_drain_ms: DEFAULT_SHUTDOWN_DRAIN_MS,
        }
    }
}

impl ForwardConfig {
    /// The codec limits this configuration sets.
    pub fn limits(&self) -> crate::codec::Limits {
        crate::codec::Limits {
            max_frame_bytes: self.max_chunk_bytes,
            max_decompressed_bytes: self.max_decompressed_bytes,
            max_depth: self.max_depth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_gives_the_defaults() {
        let c: ForwardConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, ForwardConfig::default());
        assert_eq!(c.listen.port(), 24224);
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(serde_json::from_str::<ForwardConfig>(r#"{"listne":"x"}"#).is_err());
    }
}
