//! `[forward]` configuration section: the listener block shared by every
//! listener (`listen`, `enabled`, `max_connections`, `idle_timeout_ms`,
//! `read_timeout_ms`, `tls`, `allow`; see [`tidegate_listener::config`]),
//! then what is Forward's own: tag → topic mapping, payload format, the
//! shared-key handshake and users, the UDP heartbeat, and every limit that
//! bounds what one client can make the server hold.
//!
//! Each limit is a named constant here, documented once; the server and the
//! codec read them from [`ForwardConfig`] and never hard-code a number.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use tidegate_listener::ListenerConfig;

/// Default port: Fluentd's own (TCP, and UDP for heartbeats), on loopback.
pub const DEFAULT_PORT: u16 = 24224;
/// Default topic prefix: tag `app.web` becomes topic `logs.app.web`, which
/// the usual `[[routes]] topics = "logs.>"` sends on.
pub const DEFAULT_TOPIC_PREFIX: &str = "logs.";
/// Default largest msgpack value (a whole Forward message) accepted, bytes.
pub const DEFAULT_MAX_CHUNK_BYTES: usize = 64 * 1024 * 1024;
/// Default largest decompressed size of one CompressedPackedForward chunk
/// (Fluentd's own limit).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 256 * 1024 * 1024;
/// Default deepest msgpack nesting accepted (records inside entries inside
/// the message count).
pub const DEFAULT_MAX_DEPTH: usize = 64;
/// Default chunks per connection published but not yet acknowledged; when
/// reached, the connection stops reading until an ack is sent.
pub const DEFAULT_MAX_INFLIGHT_CHUNKS: usize = 16;
/// Default time a chunk may wait for its sinks before the connection is
/// closed without an ack (Fluentd clients give up after 190 s).
pub const DEFAULT_ACK_TIMEOUT_MS: u64 = 190_000;
/// Default time allowed for the shared-key handshake (HELO → PONG). The TLS
/// handshake runs before it, under the listener's `read_timeout_ms`.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Default time in-flight chunks get to be acknowledged at shutdown.
pub const DEFAULT_SHUTDOWN_DRAIN_MS: u64 = 5_000;
/// Default largest single socket read, bytes. Reads start small and grow
/// with what arrives, up to this; a quiet connection holds no read buffer.
pub const DEFAULT_READ_BUFFER_BYTES: usize = 256 * 1024;
/// An events vector that grew past this many entries (one large chunk) is
/// released after the chunk, so a connection gone quiet does not keep it.
pub const KEEP_EVENTS_CAPACITY: usize = 1024;

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
///
/// Unknown keys: serde cannot combine `flatten` with `deny_unknown_fields`,
/// so the binary refuses them for the whole file (every key read must come
/// back when the parsed configuration is written out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ForwardConfig {
    /// The listener block (`listen`, `enabled`, `max_connections`,
    /// `idle_timeout_ms`, `read_timeout_ms`, `tls`, `allow`), flattened into
    /// `[forward]`. UDP heartbeats are answered on the same address.
    #[serde(flatten)]
    pub listener: ListenerConfig<DEFAULT_PORT>,
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
    pub users: Vec<UserConfig>,
    /// Largest single msgpack/JSON value (one Forward message), bytes.
    pub max_chunk_bytes: usize,
    /// Largest decompressed CompressedPackedForward chunk, bytes.
    pub max_decompressed_bytes: usize,
    /// Deepest nesting of msgpack containers.
    pub max_depth: usize,
    /// Chunks awaiting their ack per connection before reading pauses.
    pub max_inflight_chunks: usize,
    /// How long a chunk may wait for its sinks before the connection is
    /// closed without an ack, milliseconds.
    pub ack_timeout_ms: u64,
    /// Time allowed for the shared-key handshake, milliseconds.
    pub handshake_timeout_ms: u64,
    /// Largest single socket read, bytes (reads start at 4 KiB and grow
    /// with what arrives).
    pub read_buffer_bytes: usize,
    /// At shutdown, how long connections wait for pending acks, milliseconds.
    pub shutdown_drain_ms: u64,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            listener: ListenerConfig::default(),
            topic_prefix: DEFAULT_TOPIC_PREFIX.to_owned(),
            payload: PayloadFormat::Json,
            udp_heartbeat: true,
            shared_key: None,
            self_hostname: "tidegate".to_owned(),
            users: Vec::new(),
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
            max_inflight_chunks: DEFAULT_MAX_INFLIGHT_CHUNKS,
            ack_timeout_ms: DEFAULT_ACK_TIMEOUT_MS,
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            read_buffer_bytes: DEFAULT_READ_BUFFER_BYTES,
            shutdown_drain_ms: DEFAULT_SHUTDOWN_DRAIN_MS,
        }
    }
}

impl ForwardConfig {
    /// The defaults, listening on `addr` (tests use `127.0.0.1:0`).
    pub fn on(addr: SocketAddr) -> Self {
        ForwardConfig {
            listener: ListenerConfig::on(addr),
            ..Default::default()
        }
    }

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

    fn parse(text: &str) -> Result<ForwardConfig, String> {
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize(de).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn an_empty_section_gives_the_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, ForwardConfig::default());
        assert_eq!(c.listener.listen.to_string(), "127.0.0.1:24224");
        assert!(c.listener.enabled);
        assert_eq!(c.topic_prefix, "logs.");
    }

    #[test]
    fn the_listener_block_is_read_from_the_section_itself() {
        let c = parse(
            "listen = \"0.0.0.0:5170\"\nmax_connections = 7\nread_timeout_ms = 500\n\
             allow = [\"10.0.0.0/8\"]\ntopic_prefix = \"\"\nshared_key = \"k\"\n\
             [tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
             [[users]]\nusername = \"u\"\npassword = \"p\"\n",
        )
        .unwrap();
        assert_eq!(c.listener.listen.port(), 5170);
        assert_eq!(c.listener.max_connections, 7);
        assert_eq!(c.listener.read_timeout_ms, 500);
        assert_eq!(c.listener.allow.len(), 1);
        assert_eq!(c.listener.tls.as_ref().unwrap().key.to_str(), Some("k.pem"));
        assert_eq!(c.topic_prefix, "");
        assert_eq!(c.users.len(), 1);
        // What `tidegate config` prints reads back the same.
        let text = toml::to_string(&c).unwrap();
        assert_eq!(parse(&text).unwrap(), c, "{text}");
    }

    #[test]
    fn every_key_read_is_written_back() {
        // The binary's unknown-key check relies on it: a key missing from
        // the written-out section is reported as unknown.
        let text = "listen = \"127.0.0.1:1\"\nenabled = false\nmax_connections = 3\n\
                    idle_timeout_ms = 4\nread_timeout_ms = 5\nallow = [\"::1/128\"]\n\
                    topic_prefix = \"x.\"\npayload = \"msgpack\"\nudp_heartbeat = false\n\
                    shared_key = \"k\"\nself_hostname = \"h\"\nmax_chunk_bytes = 6\n\
                    max_decompressed_bytes = 7\nmax_depth = 8\nmax_inflight_chunks = 9\n\
                    ack_timeout_ms = 10\nhandshake_timeout_ms = 11\n\
                    read_buffer_bytes = 12\nshutdown_drain_ms = 13\n\
                    [tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\nclient_auth = \"optional\"\n\
                    [[users]]\nusername = \"u\"\npassword = \"p\"\n";
        let input: toml::Table = toml::from_str(text).unwrap();
        let written = toml::Table::try_from(parse(text).unwrap()).unwrap();
        for key in input.keys() {
            assert_eq!(written.get(key), input.get(key), "{key}");
        }
        // And a misspelt key is not taken for a known one.
        assert_eq!(parse("listne = \"x\"\n").unwrap(), ForwardConfig::default());
    }

    #[test]
    fn a_bad_listener_value_is_an_error() {
        let e = parse("listen = \"not an address\"\n").unwrap_err();
        assert!(e.contains("address"), "{e}");
    }
}
