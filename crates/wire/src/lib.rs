//! The `wire` protocol: length-prefixed binary frames over TCP for publish,
//! subscribe and echo, plus a listener the stock `sockperf` client can drive.
//!
//! Layout: `codec` (pure frame encoding/decoding), `server`, `client`,
//! `sockperf` (the sockperf-compatible echo), `config`.

pub mod config;
pub mod server;
pub mod sockperf;

pub use config::{SockperfConfig, WireConfig};
