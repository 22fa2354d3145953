//! The `wire` protocol: length-prefixed binary frames over TCP for publish,
//! subscribe and echo (the seed-002 latency probe), plus a listener the stock
//! `sockperf` client can drive. The byte format is specified in `docs/wire.md`.
//!
//! Layout, one job per file:
//! - [`frame`]: the frame values; [`codec`]: frames to bytes and back (pure);
//! - [`server`]: the `[wire]` accept loop; `connection`: one connection's
//!   reader and writer; `outbound`: the reader → writer mailbox;
//! - [`client`]: an async client (tests, bench);
//! - [`sockperf_header`]: the sockperf header and echo rule (pure);
//!   [`sockperf`]: the `[sockperf]` listener;
//! - [`config`]: the `[wire]` and `[sockperf]` sections.

#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod config;
mod connection;
pub mod frame;
mod outbound;
pub mod server;
pub mod sockperf;
pub mod sockperf_header;

pub use client::{ClientError, WireClient};
pub use config::{SockperfConfig, WireConfig};
pub use frame::{Echo, ErrorCode, ErrorFrame, Frame, FrameType};
pub use server::WireServer;
pub use sockperf::SockperfServer;
/// The shutdown signal the servers' `run` takes (re-exported so callers need
/// not depend on `tokio-util` themselves).
pub use tokio_util::sync::CancellationToken;
