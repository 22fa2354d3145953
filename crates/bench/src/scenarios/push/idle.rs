//! Memory per idle session: open `n` sessions (Socket.IO connected and
//! subscribed to one topic, or `/ws` subscribed to one topic), let them
//! sit, and read the server's resident set before and after from /proc.
//! The difference divided by the sessions held is what one idle session
//! costs the server. The samplers are read when the opening starts and
//! ends: the CPU reported is the opening's, the span the rate covers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::load::{CONNECT_CONCURRENCY, CONNECT_TIMEOUT};
use super::session::ClientSession;
use super::stamp::{self, Delivered};
use super::Transport;
use crate::latency::LatencyRecorder;
use crate::sampler::{rss_kb, CpuWindow, Marker};

/// How long the sessions sit idle before the second reading (the
/// allocator settles; no heartbeat falls due within it).
pub const SETTLE: Duration = Duration::from_secs(3);

/// What the idle run saw.
#[derive(Debug, Default)]
pub struct IdleOutcome {
    /// Sessions held open at the second reading.
    pub held: usize,
    /// Sessions that failed to open or subscribe.
    pub failed: usize,
    /// Seconds to open them all.
    pub open_s: f64,
    /// Server RSS before, KiB (`None`: not visible from here — an external
    /// `--target` — or not readable).
    pub rss_before_kb: Option<u64>,
    /// Server RSS with every session held, KiB (`None` as above).
    pub rss_after_kb: Option<u64>,
    /// Time to open and subscribe each session.
    pub open_latency: LatencyRecorder,
    /// The opening as marked on the samplers.
    pub cpu_window: Option<CpuWindow>,
}

impl IdleOutcome {
    /// KiB of server memory per held session (`None` when no session was
    /// held or the server's memory was not read).
    pub fn kib_per_session(&self) -> Option<f64> {
        let (before, after) = (self.rss_before_kb?, self.rss_after_kb?);
        (self.held > 0).then(|| after.saturating_sub(before) as f64 / self.held as f64)
    }
}

async fn open_one(
    transport: Transport,
    server: SocketAddr,
    i: usize,
) -> std::io::Result<ClientSession> {
    let mut s = ClientSession::open(transport, server, i).await?;
    let topics = [stamp::topic(i)];
    let (req, classify) = match transport {
        Transport::Ws => (
            stamp::ws_subscribe(&topics),
            stamp::classify_ws as fn(&[u8]) -> Delivered,
        ),
        _ => (
            stamp::socketio_subscribe(&topics),
            stamp::classify_socketio as fn(&[u8]) -> Delivered,
        ),
    };
    s.send(&req).await?;
    let mut acked = false;
    while !acked {
        let open = s
            .recv(&mut |p| {
                if let Delivered::SubscribeAck { .. } = classify(p) {
                    acked = true;
                }
            })
            .await?;
        if !open {
            return Err(std::io::ErrorKind::ConnectionAborted.into());
        }
        s.answer().await?;
    }
    Ok(s)
}

/// Opens `n` sessions to `server` (process `pid`) and measures, marking
/// the opening on `marker`.
pub async fn run(
    server: SocketAddr,
    pid: Option<u32>,
    transport: Transport,
    n: usize,
    marker: &Marker,
) -> IdleOutcome {
    let mut out = IdleOutcome::default();
    // The baseline after one session went through, so lazily built state
    // (the first session's buffers, the runtime's) is not charged to all.
    let warm = open_one(transport, server, n + 1).await.ok();
    tokio::time::sleep(Duration::from_millis(500)).await;
    out.rss_before_kb = pid.and_then(rss_kb);
    let permits = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let cpu_from = marker.mark();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let permits = permits.clone();
            tokio::spawn(async move {
                let _p = permits.acquire().await;
                let t = Instant::now();
                let s = tokio::time::timeout(CONNECT_TIMEOUT, open_one(transport, server, i)).await;
                (s.ok().and_then(Result::ok), t.elapsed())
            })
        })
        .collect();
    let mut held = Vec::with_capacity(n);
    for t in tasks {
        match t.await {
            Ok((Some(s), d)) => {
                out.open_latency.record(d);
                held.push(s);
            }
            _ => out.failed += 1,
        }
    }
    out.open_s = t0.elapsed().as_secs_f64();
    out.cpu_window = Some(CpuWindow {
        from: cpu_from,
        to: marker.mark(),
    });
    tokio::time::sleep(SETTLE).await;
    out.rss_after_kb = pid.and_then(rss_kb);
    out.held = held.len();
    drop(held);
    drop(warm);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_per_session_is_none_when_the_server_was_not_read() {
        let mut o = IdleOutcome {
            held: 10,
            ..Default::default()
        };
        assert_eq!(o.kib_per_session(), None);
        o.rss_before_kb = Some(1_000);
        o.rss_after_kb = Some(1_500);
        assert_eq!(o.kib_per_session(), Some(50.0));
        o.held = 0;
        assert_eq!(o.kib_per_session(), None);
    }
}
