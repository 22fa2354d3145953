//! Memory per quiet connection, measured on this process (server and the
//! clients' sockets both; the kernel's socket buffers are not in RSS): a
//! connection that sent nothing, one that sent the first bytes of a
//! message, and one whose header announced a maximum-size value, each hold
//! at most 16 KiB — buffers grow with what arrives, never with what a
//! header announces.
//!
//! One test in its own file, so its process measures only itself.

mod common;

use std::time::Duration;

use common::*;
use tidegate_forward::ForwardConfig;
use tidegate_hub::Hub;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const CONNS: usize = 2_000;
const LIMIT_PER_CONNECTION: usize = 16 * 1024;

/// (resident, virtual) bytes of this process.
fn memory() -> (usize, usize) {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let mut fields = statm
        .split_whitespace()
        .map(|f| f.parse::<usize>().unwrap());
    let pages_virtual = fields.next().unwrap();
    let pages_resident = fields.next().unwrap();
    let page = 4096; // x86-64 and aarch64 Linux defaults
    (pages_resident * page, pages_virtual * page)
}

async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let every session reach its next wait.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_quiet_connection_holds_at_most_16_kib_whatever_its_header_announced() {
    let hub = Hub::default();
    let config = ForwardConfig::default();
    let announced = (config.max_chunk_bytes - 64) as u32;
    let srv = start(hub.clone(), config).await;
    let m = hub.metrics().listener("forward");
    let budget = hub.budget().clone();

    // Warm up what is allocated once (metric families, the runtime's slabs).
    let mut warm = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(&[0x93, 0xa1, b't']).await.unwrap();
        warm.push(s);
    }
    eventually("warm-up read", || budget.in_use() == 300).await;
    drop(warm);
    eventually("warm-up closed", || m.open_connections() == 0).await;

    let (rss0, vm0) = memory();
    let mut conns = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        conns.push(TcpStream::connect(srv.addr).await.unwrap());
    }
    eventually("all accepted", || m.open_connections() == CONNS as i64).await;
    let (rss, _) = memory();
    let idle = rss.saturating_sub(rss0) / CONNS;

    // `["t", ` — the first bytes of a Message-mode array.
    for s in &mut conns {
        s.write_all(&[0x93, 0xa1, b't']).await.unwrap();
    }
    eventually("3 bytes read on each", || budget.in_use() == 3 * CONNS).await;
    let (rss, _) = memory();
    let partial = rss.saturating_sub(rss0) / CONNS;

    // …then a str32 header announcing a value of the maximum size.
    let mut header = vec![0xdb];
    header.extend_from_slice(&announced.to_be_bytes());
    for s in &mut conns {
        s.write_all(&header).await.unwrap();
    }
    eventually("headers read", || budget.in_use() == 8 * CONNS).await;
    let (rss, vm) = memory();
    let announcing = rss.saturating_sub(rss0) / CONNS;
    let announcing_virtual = vm.saturating_sub(vm0) / CONNS;

    eprintln!(
        "per connection: idle {idle} B, partial frame {partial} B, \
         max-size header {announcing} B resident / {announcing_virtual} B virtual"
    );
    for (what, bytes) in [
        ("idle", idle),
        ("partial frame", partial),
        ("max-size header", announcing),
        ("max-size header (virtual)", announcing_virtual),
    ] {
        assert!(
            bytes <= LIMIT_PER_CONNECTION,
            "{what}: {bytes} bytes per connection"
        );
    }
    assert_eq!(m.open_connections(), CONNS as i64, "none closed early");
}
