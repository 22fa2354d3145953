//! Tidegate push: hub topics delivered to browsers and apps over Engine.IO
//! v4 / Socket.IO v5 (long-polling and WebSocket) and a plain WebSocket JSON
//! protocol, served on `[http]`.
//!
//! - [`engineio`], [`socketio`], [`ws::protocol`]: the pure codecs.
//! - [`session`]: one Engine.IO session's shared state, its registry and the
//!   task that runs heartbeats and the application protocol ([`app`]).
//! - [`transport`]: the HTTP handlers (polling GET/POST, websocket) that
//!   move a session's packets.
//! - [`ws`]: the plain WebSocket protocol at `/ws`; [`publish`]: `POST
//!   /v1/publish`.
//! - [`delivery`]: how a hub message looks on each transport, encoded once.
//! - [`recovery`]: connection state recovery (offsets, parked sessions).
//! - [`shutdown`]: sessions told to go away when the server stops.

#![warn(missing_docs)]

pub mod app;
pub mod auth;
pub mod config;
pub mod context;
pub mod delivery;
pub mod engineio;
pub mod origin;
pub mod publish;
pub mod recovery;
pub mod session;
pub mod shutdown;
pub mod socketio;
pub mod stats;
pub mod transport;
pub mod ws;

use std::sync::Arc;

use axum::routing::{any, get, post};
use axum::Router;
use tidegate_hub::Hub;

pub use config::PushConfig;
pub use context::PushContext;

use transport::Flavor;

/// The push routes (`/engine.io/`, `/socket.io/`, `/ws`, `/v1/publish`),
/// to be merged into the `[http]` router. Empty when `[push]` is disabled.
pub fn router(hub: Hub, config: PushConfig) -> Router {
    if !config.enabled {
        return Router::new();
    }
    router_with_context(PushContext::new(hub, config))
}

/// The push routes on an existing context (tests inspect its sessions).
pub fn router_with_context(ctx: Arc<PushContext>) -> Router {
    let sio = |st, m, q, h, u, ws, b| transport::handle(Flavor::SocketIo, st, m, q, h, u, ws, b);
    let eio = |st, m, q, h, u, ws, b| transport::handle(Flavor::EngineIo, st, m, q, h, u, ws, b);
    Router::new()
        .route("/socket.io/", any(sio))
        .route("/socket.io", any(sio))
        .route("/engine.io/", any(eio))
        .route("/engine.io", any(eio))
        .route("/ws", get(ws::server::handle))
        .route("/v1/publish", post(publish::handle))
        .with_state(ctx)
}
