//! Apache NiFi Site-to-Site source: stock NiFi clients (and NiFi instances)
//! send FlowFiles to Tidegate's input ports and receive from its output ports.
//!
//! - [`codec`]: the wire format, pure and fuzzable;
//! - [`server`]: the RAW socket listener (`[s2s]`, default 127.0.0.1:10000):
//!   a Site-to-Site session on each connection the listener core
//!   (`tidegate_listener`) accepts;
//! - [`http`]: discovery (`/nifi-api/site-to-site`) and the HTTP transport
//!   (`/nifi-api/data-transfer/...`), an axum router merged into `[http]`;
//! - [`ports`]: input/output ports shared by both transports;
//! - [`client`]: a RAW and HTTP client, used by the load generator, the tests
//!   and the sink;
//! - [`sink`]: `[sinks.s2s]`, hub topics delivered to a NiFi input port;
//! - [`tls`]: client-certificate DNs against the per-port allow lists, and
//!   the RAW client's TLS;
//! - [`config`]: the `[s2s]` section.
#![warn(missing_docs)]

pub mod client;
pub mod codec;
pub mod config;
pub mod frame_io;
pub mod http;
pub mod ports;
pub mod server;
pub mod sink;
pub mod tls;

pub use config::{PortConfig, S2sConfig};
pub use ports::S2sPorts;
pub use server::S2sServer;
