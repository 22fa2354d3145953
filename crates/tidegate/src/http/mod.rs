//! The `[http]` listener: one HTTP/1.1 server on the listener core carrying
//! Tidegate's own routes (`/metrics`, `/healthz`, `/readyz`, `/`) and the
//! routers protocol crates contribute (S2S under `/nifi-api/`).
//!
//! - [`config`]: the `[http]` section.
//! - [`routes`]: the hub's own routes.
//! - [`health`]: what `/readyz` knows (listeners accepting, sinks ready).
//! - [`first_head`]: a connection's first request head, read into a buffer
//!   that grows with what arrives before hyper allocates its own.
//! - `tracked`: the stream hyper serves on (the first head, the clock, and
//!   the byte budget of an upgraded websocket).
//! - [`limits`]: the request timeout, the body limit and the byte budget,
//!   wrapped once around the router.
//! - [`server`]: hyper on a listener-core connection, with the header-read
//!   and idle timeouts.

pub mod config;
pub mod first_head;
pub mod health;
pub mod limits;
pub mod routes;
pub mod server;
mod tracked;

pub use config::HttpConfig;
pub use health::Readiness;
