//! Memory per quiet `[http]` connection stays within 16 KiB — idle, and
//! after sending the first part of a request head (announcing a huge body)
//! and then nothing: the slowloris pattern. Measured on a `tidegate serve`
//! process as the growth of its RSS over many connections.
//!
//! Alone in its file so that no other test loads the machine's allocator
//! while it measures.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{free_addr, serve, Served};

/// Connections measured.
const CONNECTIONS: usize = 2000;
/// The bound from the hardening issue, bytes per connection.
const MAX_BYTES_PER_CONNECTION: u64 = 16 * 1024;
/// Time given to the allocator and the runtime to settle before a reading.
const SETTLE: Duration = Duration::from_millis(500);

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// One blocking HTTP/1.1 exchange; the response text.
fn get(addr: SocketAddr, path: &str) -> String {
    use std::io::Read;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn open_connections(addr: SocketAddr) -> u64 {
    get(addr, "/metrics")
        .lines()
        .find(|l| l.starts_with("tidegate_listener_connections_open{") && l.contains("\"http\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn wait_for(what: &str, served: &Served, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {}",
            served.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn quiet_and_half_sent_http_connections_hold_at_most_16_kib_each() {
    let http = free_addr();
    let served = serve(&format!(
        "[http]\nlisten = \"{http}\"\n\
         [wire]\nenabled = false\n[sockperf]\nenabled = false\n\
         [forward]\nenabled = false\n[s2s]\nenabled = false\n"
    ));
    let pid = served.child.id();
    wait_for("serve to start", &served, || {
        TcpStream::connect(http).is_ok()
    });
    // Warm up the runtime, the allocator's arenas and the metric families.
    for _ in 0..50 {
        assert!(get(http, "/healthz").starts_with("HTTP/1.1 200"));
    }
    std::thread::sleep(SETTLE);
    let base = rss_bytes(pid);

    let mut clients: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| TcpStream::connect(http).unwrap())
        .collect();
    // The probe's own connection counts as one while it asks.
    wait_for("every connection to be served", &served, || {
        open_connections(http) > CONNECTIONS as u64
    });
    std::thread::sleep(SETTLE);
    let idle = rss_bytes(pid).saturating_sub(base) / CONNECTIONS as u64;

    // A request head announcing a 1 TiB body, never finished.
    let head = format!(
        "POST /v1/publish?topic=t HTTP/1.1\r\nHost: {http}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: 1099511627776\r\n"
    );
    for c in &mut clients {
        c.write_all(head.as_bytes()).unwrap();
    }
    std::thread::sleep(SETTLE * 2);
    let partial = rss_bytes(pid).saturating_sub(base) / CONNECTIONS as u64;
    // Still held: nothing timed out or was refused in between.
    assert!(
        open_connections(http) > CONNECTIONS as u64,
        "connections were closed: {}",
        served.log()
    );

    eprintln!(
        "per http connection: idle {idle} B, with a partial head {partial} B ({CONNECTIONS} connections)"
    );
    assert!(
        idle <= MAX_BYTES_PER_CONNECTION,
        "an idle connection holds {idle} bytes"
    );
    assert!(
        partial <= MAX_BYTES_PER_CONNECTION,
        "a connection with a partial head holds {partial} bytes"
    );
    drop(clients);
}
