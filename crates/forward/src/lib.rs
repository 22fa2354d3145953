//! Fluentd Forward protocol v1 for Tidegate: the codec (all four modes,
//! EventTime, gzip, JSON connections), the `[forward]` server that publishes
//! every event into the hub and acks a chunk only once its sinks have it,
//! and a client speaking the same protocol (tests, load generator, interop).
//!
//! - [`codec`]: bytes ↔ frames and events, pure.
//! - [`server`]: the `[forward]` listener on the listener core
//!   (`tidegate-listener`: accept, limits, allow-list, TLS, timeouts, byte
//!   budget), plus the UDP heartbeat.
//! - [`connection`]: one connection's session: handshake, decode, publish,
//!   ack.
//! - [`handshake`]: HELO / PING / PONG.
//! - [`client`]: the sending side.

#![deny(missing_docs)]

pub mod client;
pub mod codec;
pub mod config;
pub mod connection;
pub mod handshake;
pub mod heartbeat;
pub mod metrics;
pub mod server;
pub mod tls;
pub mod topic;

pub use client::{ClientAuth, ClientOptions, ClientTls, ForwardClient};
pub use config::{ForwardConfig, PayloadFormat, UserConfig};
pub use server::ForwardServer;
pub use tidegate_listener::{ListenerConfig, TlsConfig};
