//! The trait every routed destination implements (Kafka, the KV store, the
//! null sink used by benchmarks).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::{AckToken, SharedMessage};

/// A boxed future returned by [`Sink`] methods (object-safe async).
pub type SinkFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A routed destination that acknowledges durability.
pub trait Sink: Send + Sync + 'static {
    /// The name routes refer to (`kafka`).
    fn name(&self) -> &str;

    /// Takes `msg`, waiting while the sink has no room (this wait is the
    /// backpressure a source feels). The sink completes `ack` once the message
    /// is as durable as the sink promises, or fails it.
    ///
    /// The future must be safe to drop before it completes: a source gives
    /// up a publish that waits too long (at shutdown, on a timeout), and
    /// then the sink must hold nothing of the message (no queue place, no
    /// count) — the dropped `ack` fails the message's route.
    fn send(&self, msg: SharedMessage, ack: AckToken) -> SinkFuture<'_>;

    /// Takes `msg` at once if there is room, without the boxed future of
    /// [`Sink::send`]: the hub tries this first on every publish and falls
    /// back to `send` when it gets the message back. The default always hands
    /// it back.
    #[allow(clippy::result_large_err)] // the Err is the message handed back, not an error
    fn try_send(&self, msg: SharedMessage, ack: AckToken) -> Result<(), (SharedMessage, AckToken)> {
        Err((msg, ack))
    }

    /// True when a `send` now would wait. Sources that must answer "full"
    /// rather than wait (S2S `PORTS_DESTINATION_FULL` over raw sockets, 503
    /// over HTTP) ask this.
    fn is_full(&self) -> bool {
        false
    }

    /// Whether the sink can take traffic now, for `/readyz`: a Kafka sink
    /// with no broker connection or a full queue is not ready. The default
    /// is always ready.
    fn health(&self) -> SinkHealth {
        SinkHealth::Ready
    }

    /// Its queue depth and acknowledgements so far, for `$sys.stats`. The
    /// default (a sink that keeps nothing) reports zeros.
    fn counters(&self) -> SinkCounters {
        SinkCounters::default()
    }

    /// Resolves when everything handed over is acknowledged or `timeout`
    /// passed; called once at shutdown.
    fn flush(&self, timeout: Duration) -> SinkFuture<'_> {
        let _ = timeout;
        Box::pin(async {})
    }
}

/// What a sink has in hand and has finished, read once a second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounters {
    /// Messages handed over and not yet acknowledged or failed.
    pub queued: u64,
    /// Messages acknowledged (durable) since start.
    pub acked: u64,
    /// Messages failed since start.
    pub failed: u64,
}

/// A sink's readiness, as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkHealth {
    /// Connected and with room.
    Ready,
    /// Cannot take traffic now; the reason is shown to the operator
    /// (`"no broker connection"`, `"queue full"`).
    NotReady(String),
}

/// A sink that acknowledges at once and keeps nothing: the benchmarks' "null
/// route", and a way to measure a source alone.
#[derive(Debug, Default)]
pub struct NullSink;

impl Sink for NullSink {
    fn name(&self) -> &str {
        "null"
    }

    fn send(&self, _msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        ack.succeed();
        Box::pin(async {})
    }

    fn try_send(
        &self,
        _msg: SharedMessage,
        ack: AckToken,
    ) -> Result<(), (SharedMessage, AckToken)> {
        ack.succeed();
        Ok(())
    }
}
