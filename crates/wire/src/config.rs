//! `[wire]` and `[sockperf]` configuration sections. Every limit of the two
//! listeners is a named constant here, documented once.

use serde::{Deserialize, Deserializer, Serialize};
use tidegate_hub::OverflowPolicy;
use tidegate_listener::ListenerConfig;

use crate::frame::AuthToken;

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
/// Default longest sockperf message accepted (header included), in bytes.
pub const DEFAULT_SOCKPERF_MAX_MESSAGE: usize = 65_536;
/// Default milliseconds given to open connections to finish on shutdown.
pub const DEFAULT_DRAIN_MS: u64 = 2000;
/// Default milliseconds the low-latency poller keeps spinning with nothing
/// read before it parks on epoll.
pub const DEFAULT_SPIN_IDLE_MS: u64 = 100;

/// How `[wire]` connections are served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireMode {
    /// Each connection is a reader and a writer task on the tokio runtime,
    /// which park when there is nothing to do.
    #[default]
    Default,
    /// Plain-TCP connections are handed to one dedicated thread that
    /// busy-polls their sockets (`low_latency.rs`); it costs a core while
    /// traffic flows and parks after `spin_idle_ms` of silence.
    LowLatency,
}

/// `[wire]`: the framed publish/subscribe/echo listener. The listener block
/// (`listen`, `enabled`, `max_connections`, `idle_timeout_ms`,
/// `read_timeout_ms`, `tls`, `allow`) is flattened into the section.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WireConfig {
    /// The keys every listener shares; `listen` defaults to 127.0.0.1:9998.
    #[serde(flatten)]
    pub listener: ListenerConfig<9998>,
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
    /// Milliseconds open connections get to flush on shutdown.
    pub drain_ms: u64,
    /// `default` or `low_latency` (docs/wire.md, "Low-latency mode").
    pub mode: WireMode,
    /// Low-latency mode: the CPU the poller thread is pinned to (none: the
    /// scheduler places it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    /// Low-latency mode: milliseconds with nothing read before the poller
    /// stops spinning and parks on epoll.
    pub spin_idle_ms: u64,
    /// Secrets a client may authenticate with (each 1 to 256 bytes). When
    /// not empty, a connection's first frame must be an AUTH carrying one of
    /// them; anything else is refused (ERROR 10) and the connection closed.
    #[serde(deserialize_with = "deserialize_tokens")]
    pub tokens: Vec<String>,
}

impl Default for WireConfig {
    fn default() -> Self {
        WireConfig {
            listener: ListenerConfig::default(),
            max_frame: DEFAULT_MAX_FRAME,
            subscriber_capacity: DEFAULT_SUBSCRIBER_CAPACITY,
            overflow: OverflowPolicy::DropOldest,
            max_outbound_bytes: DEFAULT_MAX_OUTBOUND_BYTES,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            write_batch: DEFAULT_WRITE_BATCH,
            drain_ms: DEFAULT_DRAIN_MS,
            mode: WireMode::Default,
            cpu: None,
            spin_idle_ms: DEFAULT_SPIN_IDLE_MS,
            tokens: Vec::new(),
        }
    }
}

impl std::fmt::Debug for WireConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves: configs end up in logs.
        f.debug_struct("WireConfig")
            .field("listener", &self.listener)
            .field("max_frame", &self.max_frame)
            .field("subscriber_capacity", &self.subscriber_capacity)
            .field("overflow", &self.overflow)
            .field("max_outbound_bytes", &self.max_outbound_bytes)
            .field("max_subscriptions", &self.max_subscriptions)
            .field("write_batch", &self.write_batch)
            .field("drain_ms", &self.drain_ms)
            .field("mode", &self.mode)
            .field("cpu", &self.cpu)
            .field("spin_idle_ms", &self.spin_idle_ms)
            .field("tokens", &format_args!("<{} redacted>", self.tokens.len()))
            .finish()
    }
}

/// Reads `tokens`, refusing one that no AUTH frame could carry.
fn deserialize_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let tokens = Vec::<String>::deserialize(d)?;
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() || t.len() > AuthToken::MAX_LEN {
            return Err(serde::de::Error::custom(format!(
                "token {} is {} bytes; a token holds 1 to {} bytes",
                i + 1,
                t.len(),
                AuthToken::MAX_LEN
            )));
        }
    }
    Ok(tokens)
}

/// `[sockperf]`: the echo the stock sockperf client drives. The listener
/// block is flattened into the section; `listen` defaults to
/// 127.0.0.1:11111.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SockperfConfig {
    /// The keys every listener shares.
    #[serde(flatten)]
    pub listener: ListenerConfig<11111>,
    /// Longest message accepted (header included), bytes.
    pub max_message: usize,
    /// `default` or `low_latency`, as in `[wire]`.
    pub mode: WireMode,
    /// Low-latency mode: the CPU the poller thread is pinned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    /// Low-latency mode: milliseconds with nothing read before the poller
    /// parks on epoll.
    pub spin_idle_ms: u64,
}

impl Default for SockperfConfig {
    fn default() -> Self {
        SockperfConfig {
            listener: ListenerConfig::default(),
            max_message: DEFAULT_SOCKPERF_MAX_MESSAGE,
            mode: WireMode::Default,
            cpu: None,
            spin_idle_ms: DEFAULT_SPIN_IDLE_MS,
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
        assert_eq!(w.listener.listen.port(), 9998);
        let s: SockperfConfig = toml::from_str("").unwrap();
        assert_eq!(s, SockperfConfig::default());
        assert_eq!(s.listener.listen.port(), 11111);
    }

    #[test]
    fn the_listener_block_and_the_protocol_keys_share_the_section() {
        let w: WireConfig = toml::from_str(
            "listen = \"0.0.0.0:1\"\nmax_frame = 10\nread_timeout_ms = 5\ntokens = [\"t1\"]\n[tls]\ncert = \"c\"\nkey = \"k\"\n",
        )
        .unwrap();
        assert_eq!(w.listener.listen.port(), 1);
        assert_eq!(w.listener.read_timeout_ms, 5);
        assert!(w.listener.tls.is_some());
        assert_eq!((w.max_frame, w.tokens.clone()), (10, vec!["t1".to_owned()]));
        let back: WireConfig = toml::from_str(&toml::to_string(&w).unwrap()).unwrap();
        assert_eq!(back, w);
    }

    #[test]
    fn a_token_no_auth_frame_can_carry_is_refused_and_tokens_are_not_debug_printed() {
        let e = toml::from_str::<WireConfig>("tokens = [\"ok\", \"\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("token 2 is 0 bytes"), "{e}");
        let long = "x".repeat(AuthToken::MAX_LEN + 1);
        assert!(toml::from_str::<WireConfig>(&format!("tokens = [\"{long}\"]")).is_err());
        let w: WireConfig = toml::from_str("tokens = [\"hunter2\"]").unwrap();
        assert!(!format!("{w:?}").contains("hunter2"));
    }

    #[test]
    fn the_mode_defaults_to_default_and_low_latency_takes_cpu_and_spin_idle() {
        assert_eq!(WireConfig::default().mode, WireMode::Default);
        let w: WireConfig =
            toml::from_str("mode = \"low_latency\"\ncpu = 1\nspin_idle_ms = 5").unwrap();
        assert_eq!(
            (w.mode, w.cpu, w.spin_idle_ms),
            (WireMode::LowLatency, Some(1), 5)
        );
        assert!(toml::from_str::<WireConfig>("mode = \"fast\"").is_err());
    }

    #[test]
    fn the_overflow_policy_is_spelled_in_kebab_case() {
        let w: WireConfig = toml::from_str("overflow = \"disconnect\"").unwrap();
        assert_eq!(w.overflow, OverflowPolicy::Disconnect);
    }
}
