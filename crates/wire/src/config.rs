//! `[wire]` and `[sockperf]` configuration sections. Every limit of the two
//! listeners is a named constant here, documented once.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use tidegate_hub::OverflowPolicy;

/// Default largest frame accepted (the length prefix), in bytes: 1 MiB.
pub const DEFAULT_MAX_FRAME: usize = 1024 * 1024;
/// Default bound of a connection's subscriber queue, in messages.
pub const DEFAULT_SUBSCRIBER_CAPACITY: usize = 4096;
/// Default bound of the replies (ECHO, PONG, ERROR) waiting to be written to
/// one connection, in bytes.
pub const DEFAULT_MAX_OUTBOUND_BYTES: usize = 4 * 1024 * 1024;
/// Default most subscriptions one connection may hold.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 10_000;
/// Default most subscriber messages the writer takes per wake-up.
pub const DEFAULT_WRITE_BATCH: usize = 1024;
/// Default most concurrent connections of a listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default longest sockperf message accepted (header included), in bytes.
pub const DEFAULT_SOCKPERF_MAX_MESSAGE: usize = 65_536;
/// Default most concurrent sockperf connections (each has its own thread).
pub const DEFAULT_SOCKPERF_MAX_CONNECTIONS: usize = 64;
/// Default milliseconds given to open connections to finish on shutdown.
pub const DEFAULT_DRAIN_MS: u64 = 2000;

/// `[wire]`: the framed publish/subscribe/echo listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WireConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    pub enabled: bool,
    /// Largest frame accepted (the length prefix: type byte plus body), bytes.
    pub max_frame: usize,
    /// Bound of each connection's subscriber queue, in messages.
    pub subscriber_capacity: usize,
    /// What a full subscriber queue does: `drop-oldest` or `disconnect`.
    pub overflow: OverflowPolicy,
    /// Bound of replies waiting to be written to one connection, in bytes; a
    /// client that lets more pile up gets ERROR 7 and is disconnected.
    pub max_outbound_bytes: usize,
    /// Most subscriptions one connection may hold.
    pub max_subscriptions: usize,
    /// Most subscriber messages coalesced into one write.
    pub write_batch: usize,
    /// Most concurrent connections; further ones are closed at once.
    pub max_connections: usize,
    /// Milliseconds open connections get to flush on shutdown.
    pub drain_ms: u64,
}

impl Default for WireConfig {
    fn default() -> Self {
        WireConfig {
            listen: "127.0.0.1:9998".parse().expect("literal"),
            enabled: true,
            max_frame: DEFAULT_MAX_FRAME,
            subscriber_capacity: DEFAULT_SUBSCRIBER_CAPACITY,
            overflow: OverflowPolicy::DropOldest,
            max_outbound_bytes: DEFAULT_MAX_OUTBOUND_BYTES,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            write_batch: DEFAULT_WRITE_BATCH,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            drain_ms: DEFAULT_DRAIN_MS,
        }
    }
}

/// `[sockperf]`: the echo the stock sockperf client drives. Each connection
/// is served by a dedicated thread with a blocking socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SockperfConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// `false` leaves the listener off.
    pub enabled: bool,
    /// Longest message accepted (header included), bytes.
    pub max_message: usize,
    /// Most concurrent connections (threads); further ones are closed at once.
    pub max_connections: usize,
    /// Spin on a non-blocking socket instead of sleeping in `read` (lower
    /// latency, one busy core per connection).
    pub busy_poll: bool,
}

impl Default for SockperfConfig {
    fn default() -> Self {
        SockperfConfig {
            listen: "127.0.0.1:11111".parse().expect("literal"),
            enabled: true,
            max_message: DEFAULT_SOCKPERF_MAX_MESSAGE,
            max_connections: DEFAULT_SOCKPERF_MAX_CONNECTIONS,
            busy_poll: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_gives_the_defaults() {
        let w: WireConfig = toml::from_str("").unwrap();
        assert_eq!(w, WireConfig::default());
        assert_eq!(w.listen.port(), 9998);
        let s: SockperfConfig = toml::from_str("").unwrap();
        assert_eq!(s.listen.port(), 11111);
    }

    #[test]
    fn the_overflow_policy_is_spelled_in_kebab_case() {
        let w: WireConfig = toml::from_str("overflow = \"disconnect\"").unwrap();
        assert_eq!(w.overflow, OverflowPolicy::Disconnect);
        assert!(toml::from_str::<WireConfig>("bogus = 1").is_err());
    }
}
