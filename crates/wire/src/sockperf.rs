//! The `[sockperf]` echo listener: what the stock `sockperf` client drives in
//! `ping-pong` and `under-load` modes over TCP.
//!
//! Accepting runs on the tokio runtime; each connection is then served by a
//! dedicated OS thread with a blocking socket (or a busy-polled non-blocking
//! one with `busy_poll = true`), because a thread sleeping in `read` wakes
//! faster than a task going through the runtime's reactor and scheduler —
//! the listener exists to measure latency. The echo rule itself is the pure
//! [`echo_replies`] in `sockperf_header.rs`; every reply produced by one read
//! leaves in one write.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tidegate_hub::{Hub, ListenerMetrics};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::sockperf_header::echo_replies;
use crate::SockperfConfig;

/// Smallest read buffer of a connection thread, bytes.
const MIN_READ_BUFFER: usize = 64 * 1024;
/// How long shutdown waits for connection threads to exit.
const THREAD_EXIT_WAIT: Duration = Duration::from_secs(2);

/// A bound `[sockperf]` echo listener, ready to serve.
pub struct SockperfServer {
    listener: TcpListener,
    config: SockperfConfig,
}

/// The open connections, so shutdown can wake their blocked threads.
#[derive(Default)]
struct OpenConnections {
    next_id: AtomicU64,
    streams: Mutex<Vec<(u64, TcpStream)>>,
}

impl OpenConnections {
    fn add(&self, s: &TcpStream) -> std::io::Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.streams.lock().push((id, s.try_clone()?));
        Ok(id)
    }

    fn remove(&self, id: u64) {
        self.streams.lock().retain(|(i, _)| *i != id);
    }

    fn len(&self) -> usize {
        self.streams.lock().len()
    }

    fn shutdown_all(&self) {
        for (_, s) in self.streams.lock().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl SockperfServer {
    /// Binds `config.listen` (port 0 picks a free port).
    pub async fn bind(config: SockperfConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        Ok(SockperfServer { listener, config })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled, then stops accepting and closes
    /// every open connection (an echo has no in-flight work to drain beyond
    /// the write in progress).
    pub async fn run(self, hub: Hub, shutdown: CancellationToken) -> std::io::Result<()> {
        let metrics = hub.metrics().listener("sockperf");
        let open = Arc::new(OpenConnections::default());
        let stop = Arc::new(AtomicBool::new(false));
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = self.listener.accept() => a,
            };
            let stream = match accepted.and_then(|(s, _)| s.into_std()) {
                Ok(s) => s,
                Err(e) => {
                    metrics.error("accept");
                    tracing::warn!("sockperf: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            if open.len() >= self.config.max_connections {
                metrics.error("connection_limit");
                continue;
            }
            if let Err(e) = self.start_connection(stream, &open, &stop, &metrics) {
                metrics.error("spawn");
                tracing::warn!("sockperf: cannot serve a connection: {e}");
            }
        }
        drop(self.listener);
        stop.store(true, Ordering::Release);
        open.shutdown_all();
        let waited = tokio::time::timeout(THREAD_EXIT_WAIT, async {
            while open.len() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        if waited.is_err() {
            tracing::warn!(
                "sockperf: {} connection threads still running at shutdown",
                open.len()
            );
        }
        Ok(())
    }

    fn start_connection(
        &self,
        stream: TcpStream,
        open: &Arc<OpenConnections>,
        stop: &Arc<AtomicBool>,
        metrics: &ListenerMetrics,
    ) -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(self.config.busy_poll)?;
        let id = open.add(&stream)?;
        let (open, stop, metrics) = (open.clone(), stop.clone(), metrics.clone());
        let config = self.config.clone();
        let spawned = std::thread::Builder::new()
            .name("sockperf-echo".into())
            .spawn({
                let open = open.clone();
                move || {
                    let _guard = metrics.connection();
                    if let Err(e) = echo_connection(stream, &config, &stop) {
                        metrics.error(e.kind());
                        tracing::debug!("sockperf: connection closed: {}", e.text);
                    }
                    open.remove(id);
                }
            });
        if let Err(e) = spawned {
            open.remove(id);
            return Err(e);
        }
        Ok(())
    }
}

/// Why a connection thread closed its connection.
struct EchoEnd {
    kind: &'static str,
    text: String,
}

impl EchoEnd {
    fn kind(&self) -> &'static str {
        self.kind
    }
}

/// Echoes on one connection until end of stream, an error or `stop`.
fn echo_connection(
    mut s: TcpStream,
    config: &SockperfConfig,
    stop: &AtomicBool,
) -> Result<(), EchoEnd> {
    let mut input = vec![0u8; config.max_message.max(MIN_READ_BUFFER)];
    let mut filled = 0usize;
    let mut out = Vec::with_capacity(MIN_READ_BUFFER);
    let io = |e: std::io::Error| EchoEnd {
        kind: "io",
        text: e.to_string(),
    };
    loop {
        let n = match s.read(&mut input[filled..]) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                std::hint::spin_loop();
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        filled += n;
        let consumed =
            echo_replies(&input[..filled], config.max_message, &mut out).map_err(|e| EchoEnd {
                kind: "bad_length",
                text: e.to_string(),
            })?;
        input.copy_within(consumed..filled, 0);
        filled -= consumed;
        if !out.is_empty() {
            write_all(&mut s, &out).map_err(io)?;
            out.clear();
        }
    }
}

/// `write_all` that also works on a non-blocking (busy-polled) socket.
fn write_all(s: &mut TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
