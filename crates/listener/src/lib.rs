//! Tidegate's one listener core. Every TCP protocol (Forward, S2S RAW, wire,
//! the sockperf echo, and the HTTP server carrying S2S HTTP, push and KV)
//! is served through it, so each protocol crate holds only its codec, its
//! session logic and its client — nothing about sockets or TLS set-up.
//!
//! - [`ListenerConfig`]: the block flattened into every listener section
//!   (`listen`, `enabled`, `max_connections`, `idle_timeout_ms`,
//!   `read_timeout_ms`, `tls`, `allow`).
//! - [`Listener`]: bind (TLS files loaded first, errors naming the section
//!   and key), accept with the limit and allow-list, a task and span per
//!   connection, panics caught, drain at shutdown.
//! - [`Connection`]: what a session gets — a metered [`ConnStream`] and an
//!   [`Inbound`] that applies the byte budget and the idle and partial-frame
//!   timeouts to every read.

#![warn(missing_docs)]

pub mod accept_errors;
pub mod config;
pub mod inbound;
pub mod server;
pub mod stream;
pub mod tls;

pub use config::{ClientAuth, ListenerConfig, ListenerSettings, TlsConfig};
pub use inbound::{Inbound, ReadError, ReadReady};
pub use server::{load_tls, Connection, Listener, ListenerError, TlsIdentity};
pub use stream::{Activity, ConnReader, ConnStream, ConnWriter};
pub use tls::{TestPki, TlsError};
