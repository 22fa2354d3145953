//! Hostile clients against a real `tidegate serve`: thousands of
//! connections that announce a maximum-size frame and then trickle one byte
//! a second, on every TCP listener at once; and a few connections that
//! stream huge frames as fast as they can. The server's memory must stay
//! within the in-flight budget plus a fixed allowance, the trickling
//! connections must be closed by the read timeout, and a well-behaved stock
//! client (fluent-logger) must be served meanwhile.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_ports, serve, KillOnDrop, Served};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections per protocol in the trickle flood.
const TRICKLERS_PER_PROTOCOL: usize = 2_000;
/// The in-flight budget the server runs with.
const BUDGET_BYTES: u64 = 64 << 20;
/// What the server may hold beyond the budget: code, runtime, per-connection
/// state of 8,000 sockets, allocator slack.
const ALLOWANCE_BYTES: u64 = 192 << 20;
/// The read timeout the listeners run with.
const READ_TIMEOUT_MS: u64 = 3_000;

struct Ports {
    http: SocketAddr,
    wire: SocketAddr,
    forward: SocketAddr,
    s2s: SocketAddr,
}

fn start_server() -> (Served, Ports) {
    // Four distinct ports (four free_addr() calls once returned one port
    // twice, and the server refused two listeners on it).
    let [http, wire, forward, s2s] = free_ports();
    let p = Ports {
        http,
        wire,
        forward,
        s2s,
    };
    let t = READ_TIMEOUT_MS;
    let served = serve(&format!(
        "[hub]\nmax_inflight_bytes = {BUDGET_BYTES}\n\
         [http]\nlisten = \"{}\"\nread_timeout_ms = {t}\nrequest_timeout_ms = {t}\n\
         [wire]\nlisten = \"{}\"\nread_timeout_ms = {t}\n\
         [sockperf]\nenabled = false\n\
         [forward]\nlisten = \"{}\"\nread_timeout_ms = {t}\nudp_heartbeat = false\n\
         [s2s]\nlisten = \"{}\"\nread_timeout_ms = {t}\n",
        p.http, p.wire, p.forward, p.s2s
    ));
    (served, p)
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

async fn wait_until_up(p: &Ports, served: &Served) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for addr in [p.http, p.wire, p.forward, p.s2s] {
        while TcpStream::connect(addr).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "serve did not start: {}",
                served.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn metric(http: SocketAddr, line_prefix: &str) -> u64 {
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body.lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The first bytes of a maximum-size frame, per protocol.
fn announce(protocol: &str) -> Vec<u8> {
    match protocol {
        // Forward Message mode ["t", 1, {"k": <bin32 of 60 MiB>}].
        "forward" => vec![
            0x93, 0xa1, b't', 0x01, 0x81, 0xa1, b'k', 0xc6, 0x03, 0xc0, 0x00, 0x00,
        ],
        // wire: a PUBLISH frame of the 1 MiB maximum.
        "wire" => {
            let mut v = (1u32 << 20).to_le_bytes().to_vec();
            v.push(0x01);
            v
        }
        // S2S RAW: the magic, then the protocol name announced 65,535
        // bytes long (its modified-UTF-8 length prefix).
        "s2s" => b"NiFi\xff\xff".to_vec(),
        // HTTP: a request head announcing a large body, never finished.
        "http" => b"POST /nifi-api/site-to-site HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\nX-Pad: ".to_vec(),
        _ => unreachable!(),
    }
}

/// Starts the stock fluent-logger sending `count` records to `forward`;
/// killed if the test fails before waiting for it.
fn fluent_logger(forward: SocketAddr, count: usize) -> KillOnDrop {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../forward/tests/python/fluent_logger_send.py"
    );
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    KillOnDrop::new(
        Command::new(python)
            .args([
                script,
                "127.0.0.1",
                &forward.port().to_string(),
                &count.to_string(),
                "1700000000000000000",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3 with fluent-logger (scripts/setup/forward.sh)"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_trickling_connections_are_closed_by_the_read_timeout_within_bounded_memory() {
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let (served, ports) = start_server();
    wait_until_up(&ports, &served).await;
    let pid = served.child.id();
    let baseline = rss_bytes(pid);

    let protocols = [
        ("forward", ports.forward),
        ("wire", ports.wire),
        ("s2s", ports.s2s),
        ("http", ports.http),
    ];
    let mut conns = Vec::new();
    for (name, addr) in protocols {
        for i in 0..TRICKLERS_PER_PROTOCOL {
            // Spread over source addresses so 8,000 sockets never exhaust
            // one address's ephemeral ports.
            let src: SocketAddr = format!("127.0.{}.{}:0", 1 + i / 250, 1 + i % 250)
                .parse()
                .unwrap();
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(src).unwrap();
            let mut s = sock
                .connect(addr)
                .await
                .unwrap_or_else(|e| panic!("{name} #{i}: {e}"));
            s.write_all(&announce(name)).await.unwrap();
            conns.push((name, s));
        }
    }
    let opened = Instant::now();

    // A stock client is served while the flood lasts.
    let published_before = metric(ports.http, "tidegate_hub_published").await;
    let mut logger = fluent_logger(ports.forward, 300);

    // One byte a second on every connection, until the server closed them
    // all (or a generous bound passed).
    let closed = Arc::new(AtomicUsize::new(0));
    let mut peak = baseline;
    let total = conns.len();
    let mut open: Vec<Option<(&str, TcpStream)>> = conns.into_iter().map(Some).collect();
    while opened.elapsed() < Duration::from_millis(READ_TIMEOUT_MS * 4) {
        for slot in open.iter_mut() {
            let Some((_, s)) = slot else { continue };
            let mut probe = [0u8; 256];
            let gone =
                match tokio::time::timeout(Duration::from_micros(1), s.read(&mut probe)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => true,
                    Ok(Ok(_)) => false, // an error reply before the close
                    Err(_) => s.write_all(b"a").await.is_err(),
                };
            if gone {
                *slot = None;
                closed.fetch_add(1, Ordering::Relaxed);
            }
        }
        peak = peak.max(rss_bytes(pid));
        if closed.load(Ordering::Relaxed) == total {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let still_open: Vec<&str> = open.iter().flatten().map(|(n, _)| *n).collect();
    assert!(
        still_open.is_empty(),
        "{} of {total} trickling connections still open after {:?} (first: {:?})",
        still_open.len(),
        opened.elapsed(),
        &still_open[..still_open.len().min(5)]
    );
    let status = tokio::task::spawn_blocking(move || logger.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "fluent-logger failed during the flood");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let published = metric(ports.http, "tidegate_hub_published").await;
        if published >= published_before + 300 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stock client's 300 records were not all published ({} of 300)",
            published - published_before
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timeouts = metric(
        ports.http,
        "tidegate_listener_errors_total{listener=\"forward\",kind=\"read_timeout\"",
    )
    .await
        + metric(
            ports.http,
            "tidegate_listener_errors_total{listener=\"wire\",kind=\"read_timeout\"",
        )
        .await
        + metric(
            ports.http,
            "tidegate_listener_errors_total{listener=\"http\",kind=\"read_timeout\"",
        )
        .await;
    assert!(
        timeouts >= 3 * TRICKLERS_PER_PROTOCOL as u64 * 9 / 10,
        "read timeouts counted: {timeouts}"
    );
    assert!(
        peak < baseline + BUDGET_BYTES + ALLOWANCE_BYTES,
        "server RSS peaked at {} MiB (baseline {} MiB, budget {} MiB)",
        peak >> 20,
        baseline >> 20,
        BUDGET_BYTES >> 20
    );
    eprintln!(
        "{total} trickling connections closed in {:?}; RSS baseline {} MiB, peak {} MiB",
        opened.elapsed(),
        baseline >> 20,
        peak >> 20
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_frames_sent_at_full_speed_stay_within_the_budget() {
    const STREAMS: usize = 16;
    const FRAME: usize = 60 << 20; // announced and actually sent
    let (served, ports) = start_server();
    wait_until_up(&ports, &served).await;
    let pid = served.child.id();
    let baseline = rss_bytes(pid);

    let mut writers = Vec::new();
    for _ in 0..STREAMS {
        let addr = ports.forward;
        writers.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(&announce("forward")).await;
            let chunk = vec![b'x'; 1 << 20];
            let mut sent = 0;
            while sent < FRAME {
                match tokio::time::timeout(Duration::from_secs(20), s.write_all(&chunk)).await {
                    Ok(Ok(())) => sent += chunk.len(),
                    _ => break,
                }
            }
            sent
        }));
    }
    let mut logger = fluent_logger(ports.forward, 300);
    let mut peak = baseline;
    let started = Instant::now();
    while writers.iter().any(|w| !w.is_finished()) && started.elapsed() < Duration::from_secs(60) {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut offered = 0;
    for w in writers {
        w.abort();
        offered += w.await.unwrap_or(0);
    }
    let status = tokio::task::spawn_blocking(move || logger.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "fluent-logger failed while huge frames streamed"
    );
    assert!(
        peak < baseline + BUDGET_BYTES + ALLOWANCE_BYTES,
        "server RSS peaked at {} MiB (baseline {} MiB, budget {} MiB) with {} MiB offered",
        peak >> 20,
        baseline >> 20,
        BUDGET_BYTES >> 20,
        offered >> 20
    );
    // A small peak proves nothing unless the budget was actually spent:
    // reads on the Forward listener must have had to wait for it (had the
    // server dropped every stream at once, none would have).
    let budget_waits = metric(
        ports.http,
        "tidegate_listener_errors_total{listener=\"forward\",kind=\"budget_wait\"",
    )
    .await;
    assert!(
        budget_waits > 0,
        "no read waited for the budget ({} MiB offered, budget {} MiB): \
         the huge frames never pressed on it",
        offered >> 20,
        BUDGET_BYTES >> 20
    );
    eprintln!(
        "{} MiB offered in {STREAMS} huge frames; RSS baseline {} MiB, peak {} MiB; \
         {budget_waits} reads waited for the budget",
        offered >> 20,
        baseline >> 20,
        peak >> 20
    );
}
