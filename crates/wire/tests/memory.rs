//! Memory per quiet `[wire]` connection stays within 16 KiB — idle, and
//! after sending the first bytes of a frame (one byte, or a header that
//! announces a maximum-size frame) and then nothing. Measured as the
//! growth of this process's RSS over many connections; the clients are
//! plain blocking sockets, which hold no user-space memory of their own.
//!
//! Alone in its file so that no other test shares the process while it
//! measures.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{eventually, TestServer};
use tidegate_wire::{FrameType, WireClient, WireConfig};

/// Connections measured (two sockets each in this process).
const CONNECTIONS: usize = 2000;
/// The bound from issue 9 §3, bytes per connection.
const MAX_BYTES_PER_CONNECTION: usize = 16 * 1024;
/// Time given to the allocator and the runtime to settle before a reading.
const SETTLE: Duration = Duration::from_millis(300);

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_connections_hold_at_most_16_kib_each() {
    let s = TestServer::start(WireConfig::default()).await;
    let m = s.metrics("wire");
    // Warm up the runtime, the allocator's arenas and the metric families.
    for _ in 0..50 {
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.ping().await.unwrap();
    }
    eventually("warm-up connections to close", || m.open_connections() == 0).await;
    tokio::time::sleep(SETTLE).await;
    let base = rss_bytes();

    let mut clients: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    eventually("every connection to be served", || {
        m.open_connections() == CONNECTIONS as i64
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let idle = rss_bytes().saturating_sub(base) / CONNECTIONS;

    // Half send one byte of a frame, half a header announcing 1 MiB.
    let mut big_header = ((1u32 << 20) - 1).to_le_bytes().to_vec();
    big_header.push(FrameType::Publish as u8);
    let mut sent = 0;
    for (i, c) in clients.iter_mut().enumerate() {
        let bytes: &[u8] = if i % 2 == 0 { &[9] } else { &big_header };
        c.write_all(bytes).unwrap();
        sent += bytes.len();
    }
    let budget = s.hub.budget().clone();
    eventually("every partial frame to be read", || budget.in_use() == sent).await;
    tokio::time::sleep(SETTLE).await;
    let partial = rss_bytes().saturating_sub(base) / CONNECTIONS;

    eprintln!(
        "per connection: idle {idle} B, with a partial frame {partial} B ({CONNECTIONS} connections)"
    );
    assert!(
        idle <= MAX_BYTES_PER_CONNECTION,
        "an idle connection holds {idle} bytes"
    );
    assert!(
        partial <= MAX_BYTES_PER_CONNECTION,
        "a connection with a partial frame holds {partial} bytes"
    );
    assert_eq!(m.open_connections(), CONNECTIONS as i64);
    drop(clients);
}
