//! The plain WebSocket protocol at `/ws`: JSON requests ([`protocol`]) and
//! the connection that serves them ([`server`]).

pub mod protocol;
pub mod server;
