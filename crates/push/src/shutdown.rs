//! What push does when the server shuts down ([`crate::PushContext::shutdown`]
//! cancelled): each session writes what it already holds, then tells its
//! client it is going away — `/ws` with close code 1001, an Engine.IO
//! session with its close packet `1` (on a websocket followed by a close
//! frame 1001; over polling as the last packet of the pending GET's answer)
//! — and new handshakes are answered 503. Without this a connected client
//! kept a live-looking connection with nothing arriving until the HTTP
//! listener's drain gave up on it (`[hub] shutdown_grace_ms`), and the
//! process waited that long too.
//!
//! A session stuck in a write to a client that reads nothing must notice
//! the shutdown too, not only once the write gives up (`ping_timeout_ms`,
//! 20 s by default): its writes go through a [`WriteBound`], which cuts
//! them short [`FLUSH_WAIT`] after the shutdown.
//!
//! A connection state recovery under way is given up too, and one that did
//! not succeed is not answered: a clean start would hand the client a new
//! session id in place of the one it can still recover on another node.

use std::future::Future;
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::time::{sleep_until, timeout_at, Instant};
use tokio_util::sync::CancellationToken;

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
/// reset that could cut off the close frame itself. Only once its own
/// close frame went out: a client that never got one has none to return.
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

/// Bounds one session's writes to its client: each by its own limit while
/// the server runs, and once the server shuts down all of them together —
/// the write under way, what the session still holds, its close — by
/// [`FLUSH_WAIT`] from when the session first saw the shutdown. A write
/// stalled on a client that reads nothing therefore holds neither the
/// session nor the `[http]` drain past that.
#[derive(Debug)]
pub struct WriteBound {
    shutdown: CancellationToken,
    /// When the session's writes must be over, once it saw the shutdown.
    until: Option<Instant>,
}

impl WriteBound {
    /// Bounds writes against the server's `shutdown` token.
    pub fn new(shutdown: &CancellationToken) -> Self {
        WriteBound {
            shutdown: shutdown.clone(),
            until: None,
        }
    }

    /// When the session's last writes must be over: [`FLUSH_WAIT`] after
    /// the first call once the server shuts down (the session's first look
    /// at the shutdown), `None` before.
    pub fn deadline(&mut self) -> Option<Instant> {
        if self.until.is_none() && self.shutdown.is_cancelled() {
            self.until = Some(Instant::now() + FLUSH_WAIT);
        }
        self.until
    }

    /// Runs `write` for at most `limit`, and — should the server shut down
    /// meanwhile, or have already — no later than [`WriteBound::deadline`].
    /// `None` when the time ran out first (the write is dropped: whatever
    /// it left half-written is the connection's end anyway).
    pub async fn within<F: Future>(&mut self, limit: Duration, write: F) -> Option<F::Output> {
        let limit_at = Instant::now() + limit;
        tokio::pin!(write);
        if self.deadline().is_none() {
            tokio::select! {
                r = &mut write => return Some(r),
                _ = sleep_until(limit_at) => return None,
                _ = self.shutdown.cancelled() => {}
            }
        }
        let until = self.deadline().map_or(limit_at, |d| d.min(limit_at));
        timeout_at(until, write).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_goes_on_at_most_flush_wait_after_the_shutdown() {
        let shutdown = CancellationToken::new();
        let mut bound = WriteBound::new(&shutdown);
        assert_eq!(bound.within(LONG, async { 7 }).await, Some(7));
        assert_eq!(bound.deadline(), None);

        let cancel = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cancel.cancel();
        });
        let start = Instant::now();
        // A write that never ends, like one to a client that reads nothing.
        assert_eq!(bound.within(LONG, std::future::pending::<()>()).await, None);
        let took = start.elapsed();
        assert!(took >= FLUSH_WAIT && took < FLUSH_WAIT + Duration::from_secs(1));

        // The session's later writes share that deadline: none is left,
        // though a write that needs no waiting still goes.
        let start = Instant::now();
        assert_eq!(bound.within(LONG, std::future::pending::<()>()).await, None);
        assert!(start.elapsed() < Duration::from_millis(100));
        assert_eq!(bound.within(LONG, async { 7 }).await, Some(7));
    }

    #[tokio::test]
    async fn before_the_shutdown_the_write_s_own_limit_applies() {
        let shutdown = CancellationToken::new();
        let mut bound = WriteBound::new(&shutdown);
        let start = Instant::now();
        let limit = Duration::from_millis(50);
        assert_eq!(
            bound.within(limit, std::future::pending::<()>()).await,
            None
        );
        assert!(start.elapsed() < FLUSH_WAIT);
    }

    const LONG: Duration = Duration::from_secs(60);
}
