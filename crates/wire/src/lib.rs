//! The `wire` protocol: length-prefixed binary frames over TCP (or TLS) for
//! publish, subscribe and echo (the AsyncTCP latency probe), plus a listener
//! the stock `sockperf` client can drive. The byte format is specified in
//! `docs/wire.md`.
//!
//! Both listeners run on the listener core (`tidegate-listener`): accepting,
//! limits, the allow-list, TLS, timeouts and the byte budget live there, and
//! this crate holds only codecs, session logic and the client.
//!
//! Layout, one job per file:
//! - [`frame`]: the frame values; [`codec`]: frames to bytes and back (pure);
//! - [`server`]: the `[wire]` listener; `connection`: one connection's two
//!   halves, `reader` (decode, authenticate, act) and `writer` (replies and
//!   subscriber messages), meeting in `outbound`; `timed_write`: writes
//!   that give up on a client that does not read; `auth`: the tokens and
//!   their constant-time check;
//! - `mode = "low_latency"`: `low_latency` (hand-over from the listener
//!   core), `spin_poller` (the busy-polling thread), `spin_conn` (one
//!   connection on it), `hub_link` (its bounded queues to the hub);
//!   `sockperf_spin` (a `[sockperf]` connection on the same kind of
//!   thread); [`pin`]: pinning a thread to a CPU;
//! - [`client`]: an async client (tests, bench), plain or TLS, with a token;
//! - [`sockperf_header`]: the sockperf header and echo rule (pure);
//!   [`sockperf`]: the `[sockperf]` listener;
//! - [`config`]: the `[wire]` and `[sockperf]` sections.

#![warn(missing_docs)]

pub mod auth;
pub mod client;
pub mod codec;
pub mod config;
mod connection;
pub mod frame;
mod hub_link;
mod low_latency;
mod outbound;
pub mod pin;
mod reader;
pub mod server;
pub mod sockperf;
pub mod sockperf_header;
mod sockperf_spin;
mod spin_conn;
mod spin_poller;
mod timed_write;
mod writer;

pub use client::{ClientError, ConnectOptions, WireClient};
pub use config::{SockperfConfig, WireConfig, WireMode};
pub use frame::{AuthToken, Echo, ErrorCode, ErrorFrame, Frame, FrameType};
pub use server::WireServer;
pub use sockperf::SockperfServer;
/// The listener block flattened into `[wire]` and `[sockperf]` (re-exported
/// so callers can build configs without depending on the listener crate).
pub use tidegate_listener::{ListenerConfig, ListenerError};
/// The shutdown signal the servers' `run` takes (re-exported so callers need
/// not depend on `tokio-util` themselves).
pub use tokio_util::sync::CancellationToken;
