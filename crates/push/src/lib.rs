//! Tidegate push: hub topics delivered to browsers and apps over Engine.IO
//! v4 / Socket.IO v5 (long-polling and WebSocket) and a plain WebSocket JSON
//! protocol, served on `[http]`.
//!
//! - [`engineio`], [`socketio`]: the pure codecs.
//! - [`session`]: one Engine.IO session's shared state, its registry and the
//!   task that runs the application protocol on it.
//! - [`transport`]: the HTTP handlers (polling GET/POST, websocket) that
//!   move a session's packets.
//! - [`ws`]: the plain WebSocket protocol at `/ws`.

#![warn(missing_docs)]

pub mod config;
pub mod engineio;
pub mod socketio;

pub use config::PushConfig;
