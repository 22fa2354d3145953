//! What push does when the server shuts down ([`crate::PushContext::shutdown`]
//! cancelled): each session writes what it already holds, then tells its
//! client it is going away — `/ws` with close code 1001, an Engine.IO
//! session with its close packet `1` (on a websocket followed by a close
//! frame 1001; over polling as the last packet of the pending GET's answer)
//! — and new handshakes are answered 503. Without this a connected client
//! kept a live-looking connection with nothing arriving until the HTTP
//! listener's drain gave up on it (`[hub] shutdown_grace_ms`), and the
//! process waited that long too.

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// The close reason a client is given.
pub const REASON: &str = "server shutting down";

/// How long a session may take to write what it holds and its close at
/// shutdown. A client that reads nothing for that long is not waited for:
/// the process is stopping and its drain is bounded.
pub const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Messages already waiting in a session's hub queue that are still sent
/// before its close, at most (the queue may hold `queue_capacity`; a
/// client that needs everything recovers the rest elsewhere).
pub const BACKLOG: usize = 1024;

/// How long a closed websocket waits for the client's close frame in
/// return, so the connection ends with the close handshake rather than a
/// reset that could cut off the close frame itself.
pub const CLOSE_REPLY_WAIT: Duration = Duration::from_secs(1);

/// The answer to a handshake (Engine.IO, Socket.IO, `/ws`) while shutting
/// down: 503, so the client tries again, elsewhere.
pub fn refusal() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"message":"server shutting down"}"#,
    )
        .into_response()
}
