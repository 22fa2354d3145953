//! A parked session: its transport is gone, its state waits
//! `recovery_window_ms` for the client to come back. Messages keep arriving
//! in its bounded hub queue and are let go (the hub's history keeps them
//! for the client's return); the window's end drops the state, and with it
//! the subscriptions and the session id.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use tracing::debug;

use crate::app::App;
use crate::context::PushContext;
use crate::session::task::DELIVERY_BATCH;

/// Parks `app` (already detached from its transport) if recovery is on,
/// it has something to recover and fewer than `max_sessions` are parked;
/// otherwise drops it.
pub fn park(mut app: App, ctx: &Arc<PushContext>) {
    let window = Duration::from_millis(ctx.config.recovery_window_ms);
    let registry = ctx.recovery.clone();
    if window.is_zero() || !app.recoverable() {
        forget(&app, ctx);
        return;
    }
    if registry.parked.inc() >= ctx.config.max_sessions as i64 {
        registry.parked.dec();
        forget(&app, ctx);
        return;
    }
    app.detach();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        hold(app, window, &ctx).await;
        registry.parked.dec();
    });
}

/// `app` ends for good: in cluster mode the other nodes are told, so none
/// recovers it.
pub fn forget(app: &App, ctx: &PushContext) {
    if let App::SocketIo(a) = app {
        a.announce_gone(ctx);
    }
}

async fn hold(app: App, window: Duration, ctx: &PushContext) {
    let Some(handle) = app.recovery_handle() else {
        return;
    };
    let deadline = Instant::now() + window;
    let mut batch = Vec::with_capacity(DELIVERY_BATCH);
    loop {
        let Some(sub) = app.subscriber() else { return };
        tokio::select! {
            _ = handle.requested() => {
                if let Some(tx) = handle.take_reply() {
                    let _ = tx.send(app);
                }
                return;
            }
            _ = sleep_until(deadline) => {
                debug!("recovery window over; parked session dropped");
                // Nor may another node recover it now.
                forget(&app, ctx);
                return;
            }
            r = sub.recv_many(&mut batch, DELIVERY_BATCH) => {
                if r.is_err() {
                    return;
                }
                // The history keeps them for the client's return.
                batch.clear();
            }
        }
    }
}
