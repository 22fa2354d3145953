//! The listener core's limits as the Forward listener applies them: the
//! partial-frame (read) timeout, the idle timeout, and the hub's in-flight
//! byte budget — a header announcing a huge value buffers only what has
//! arrived, a chunk holds its bytes of the budget until its ack is written,
//! and a sink that never acknowledges stops the reading instead of growing
//! memory.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use parking_lot::Mutex;
use tidegate_forward::codec::encode::{
    packed_entries, write_message, write_packed_forward, EntriesWrap, MessageOption, TimeForm,
};
use tidegate_forward::codec::EventTime;
use tidegate_forward::{ClientOptions, ForwardClient, ForwardConfig};
use tidegate_hub::{
    AckToken, Hub, InflightBudget, RouteConfig, RouteTable, SharedMessage, Sink, SinkFuture,
};
use tidegate_listener::inbound::MIN_READ_BYTES;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

/// The defaults with the given read (partial-frame) and idle timeouts.
fn with_timeouts(read_timeout_ms: u64, idle_timeout_ms: u64) -> ForwardConfig {
    let mut config = ForwardConfig::default();
    config.listener.read_timeout_ms = read_timeout_ms;
    config.listener.idle_timeout_ms = idle_timeout_ms;
    config
}

/// Waits until `done()` holds, or panics naming `what`.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the server to close `s` (end of stream or reset), without
/// sending anything back; returns how long that took.
async fn closed_by_server(s: &mut TcpStream) -> Duration {
    let from = Instant::now();
    let mut b = [0u8; 64];
    match tokio::time::timeout(WAIT, s.read(&mut b))
        .await
        .expect("the server must close the connection")
    {
        Ok(0) | Err(_) => from.elapsed(),
        Ok(n) => panic!("server answered {:?} instead of closing", &b[..n]),
    }
}

/// A healthy client still gets a chunk acked.
async fn still_serving(addr: std::net::SocketAddr, chunk: &str) {
    let mut c = ForwardClient::connect(addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("ok", EventTime::new(1, 0), &record(1), Some(chunk))
        .await
        .unwrap();
    c.wait_ack(chunk, WAIT).await.unwrap();
}

#[tokio::test]
async fn three_bytes_of_a_message_then_silence_are_closed_by_the_read_timeout() {
    let hub = Hub::default();
    let srv = start(hub.clone(), with_timeouts(300, 60_000)).await;
    let m = hub.metrics().listener("forward");
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    // `["t", …` — the start of a Message-mode array, then nothing.
    s.write_all(&[0x93, 0xa1, b't']).await.unwrap();
    let took = closed_by_server(&mut s).await;
    assert!(
        took >= Duration::from_millis(250),
        "closed after {took:?}, before the read timeout"
    );
    eventually("read_timeout counted", || {
        m.error_count("read_timeout") == 1
    })
    .await;
    assert_eq!(m.error_count("idle_timeout"), 0);
    eventually("connection no longer open", || m.open_connections() == 0).await;
    still_serving(srv.addr, "after").await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_by_the_idle_timeout() {
    let hub = Hub::default();
    let srv = start(hub.clone(), with_timeouts(60_000, 300)).await;
    let m = hub.metrics().listener("forward");
    // Nothing sent at all.
    let mut silent = TcpStream::connect(srv.addr).await.unwrap();
    let took = closed_by_server(&mut silent).await;
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
    eventually("idle_timeout counted", || {
        m.error_count("idle_timeout") == 1
    })
    .await;
    // A client that had its chunk acked and then went quiet is idle too.
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("t", EventTime::new(1, 0), &record(1), Some("one"))
        .await
        .unwrap();
    c.wait_ack("one", WAIT).await.unwrap();
    eventually("idle_timeout counted twice", || {
        m.error_count("idle_timeout") == 2
    })
    .await;
    assert_eq!(m.error_count("read_timeout"), 0);
    eventually("no connection left open", || m.open_connections() == 0).await;
}

/// The first bytes of a Message-mode array whose record is a str32 that
/// announces `len` bytes.
fn header_announcing(len: u32) -> Vec<u8> {
    let mut b = vec![0x93, 0xa1, b't', 0xdb];
    b.extend_from_slice(&len.to_be_bytes());
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_announcing_a_max_size_value_then_a_trickle_buffers_only_what_arrived() {
    const CONNS: usize = 20;
    let hub = Hub::default();
    let config = with_timeouts(1_500, 60_000);
    // Just under the frame limit, so the header itself is not refused.
    let announced = (config.max_chunk_bytes - 64) as u32;
    let srv = start(hub.clone(), config).await;
    let m = hub.metrics().listener("forward");
    let budget = hub.budget().clone();
    let mut trickles = Vec::new();
    for _ in 0..CONNS {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(&header_announcing(announced)).await.unwrap();
        trickles.push(tokio::spawn(async move {
            // One byte of the value every 100 ms until the server closes.
            let mut b = [0u8; 16];
            let mut sent = 0usize;
            loop {
                tokio::select! {
                    r = s.read(&mut b) => {
                        assert!(matches!(r, Ok(0) | Err(_)), "server answered: {r:?}");
                        return sent;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {
                        if s.write_all(b"x").await.is_err() {
                            return sent;
                        }
                        sent += 1;
                    }
                }
            }
        }));
    }
    // While they trickle, the budget holds only the bytes that arrived
    // (a read in progress reserves one small read, never the announced size).
    let mut most = 0;
    let sampling = Instant::now();
    while sampling.elapsed() < Duration::from_millis(1_000) {
        most = most.max(budget.in_use());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        most <= CONNS * MIN_READ_BYTES,
        "{most} bytes of the budget in use for {CONNS} connections that sent ~20 bytes each"
    );
    // A well-behaved client is served meanwhile.
    still_serving(srv.addr, "meanwhile").await;
    // Every trickling connection is closed by the read timeout.
    for t in trickles {
        let sent = tokio::time::timeout(WAIT, t).await.unwrap().unwrap();
        assert!(sent < 40, "{sent} bytes trickled before the close");
    }
    eventually("every trickle counted as read_timeout", || {
        m.error_count("read_timeout") == CONNS as u64
    })
    .await;
    eventually("the budget is all given back", || budget.in_use() == 0).await;
}

/// Holds every ack token (never acknowledges) and counts what it got.
#[derive(Default)]
struct NeverAcks {
    tokens: Mutex<Vec<AckToken>>,
    bytes: AtomicUsize,
}

impl NeverAcks {
    fn held(&self) -> usize {
        self.tokens.lock().len()
    }
    fn release_all(&self) {
        for t in self.tokens.lock().drain(..) {
            t.succeed();
        }
    }
}

impl Sink for NeverAcks {
    fn name(&self) -> &str {
        "never"
    }
    fn send(&self, msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        self.bytes.fetch_add(msg.payload.len(), Ordering::Relaxed);
        self.tokens.lock().push(ack);
        Box::pin(async {})
    }
}

fn hub_with_budget(sink: Arc<NeverAcks>, budget: &InflightBudget) -> Hub {
    let sink: Arc<dyn Sink> = sink;
    let routes = RouteTable::build(
        &[RouteConfig {
            topics: "logs.>".into(),
            sink: "never".into(),
        }],
        &[sink],
    )
    .unwrap();
    Hub::with_budget(routes, budget.clone())
}

/// One PackedForward chunk of `records` records, as it goes on the wire.
fn packed_chunk(records: usize, chunk: &str) -> Vec<u8> {
    let recs: Vec<Vec<u8>> = (0..records).map(record).collect();
    let entries: Vec<(EventTime, &[u8])> = recs
        .iter()
        .map(|r| (EventTime::new(1, 0), r.as_slice()))
        .collect();
    let opt = MessageOption {
        chunk: Some(chunk),
        ..Default::default()
    };
    let mut frame = Vec::new();
    write_packed_forward(
        &mut frame,
        "app",
        &packed_entries(&entries, TimeForm::FixExt8),
        EntriesWrap::Bin,
        &opt,
    );
    frame
}

#[tokio::test]
async fn a_chunk_holds_its_bytes_of_the_budget_until_its_ack_is_written() {
    let budget = InflightBudget::new(1 << 20);
    let sink = Arc::new(NeverAcks::default());
    let hub = hub_with_budget(sink.clone(), &budget);
    let srv = start(hub, ForwardConfig::default()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let frame = packed_chunk(50, "held");
    c.send_raw(&frame).await.unwrap();
    eventually("the chunk's events reach the sink", || sink.held() == 50).await;
    // Exactly the chunk's bytes stay taken while its ack waits.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(budget.in_use(), frame.len());
    assert!(c
        .wait_ack("held", Duration::from_millis(200))
        .await
        .is_err());
    sink.release_all();
    c.wait_ack("held", WAIT).await.unwrap();
    eventually("the chunk's bytes are given back", || budget.in_use() == 0).await;
    // A chunk without an ack request holds nothing once published.
    let mut plain = Vec::new();
    write_message(
        &mut plain,
        "app",
        EventTime::new(1, 0),
        TimeForm::FixExt8,
        &record(1),
        &MessageOption::default(),
    );
    c.send_raw(&plain).await.unwrap();
    eventually("published", || sink.held() == 1).await;
    eventually("nothing held", || budget.in_use() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_stops_reading_while_the_sink_never_acknowledges() {
    const BUDGET: usize = 256 * 1024;
    const TOTAL: usize = 64 << 20; // far more than the budget and socket buffers
    let budget = InflightBudget::new(BUDGET);
    let sink = Arc::new(NeverAcks::default());
    let hub = hub_with_budget(sink.clone(), &budget);
    let config = ForwardConfig {
        // Only the budget bounds this connection.
        max_inflight_chunks: 100_000,
        ..Default::default()
    };
    let srv = start(hub.clone(), config).await;
    let c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let (mut w, mut r) = c.into_split();
    let written = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(AtomicBool::new(false));
    let writer = {
        let written = written.clone();
        tokio::spawn(async move {
            let mut k = 0;
            while written.load(Ordering::Relaxed) < TOTAL {
                let frame = packed_chunk(100, &format!("c{k}"));
                if w.write_all(&frame).await.is_err() {
                    return;
                }
                written.fetch_add(frame.len(), Ordering::Relaxed);
                k += 1;
            }
        })
    };
    let reader = {
        let acked = acked.clone();
        tokio::spawn(async move {
            if r.next_ack().await.is_ok() {
                acked.store(true, Ordering::Relaxed);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let published = hub.metrics().published.get();
    let in_sink = sink.bytes.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        hub.metrics().published.get(),
        published,
        "the server went on reading with the budget spent"
    );
    assert!(budget.in_use() <= BUDGET);
    assert!(
        in_sink <= BUDGET,
        "{in_sink} bytes of records taken in with a budget of {BUDGET}"
    );
    assert!(
        !writer.is_finished() && written.load(Ordering::Relaxed) < TOTAL,
        "the client's writes never blocked"
    );
    assert!(!acked.load(Ordering::Relaxed), "a chunk was acked");
    assert!(hub.metrics().listener("forward").error_count("budget_wait") > 0);
    writer.abort();
    reader.abort();
}

/// One CompressedPackedForward chunk of `records` records of ~1 KiB
/// (highly compressible) and the size its entries inflate to.
fn gzip_chunk(records: usize, chunk: &str) -> (Vec<u8>, usize) {
    use tidegate_forward::codec::encode::{gzip, record_from_json};
    let pad = "x".repeat(1000);
    let recs: Vec<Vec<u8>> = (0..records)
        .map(|i| record_from_json(&serde_json::json!({"i": i, "pad": pad})))
        .collect();
    let entries: Vec<(EventTime, &[u8])> = recs
        .iter()
        .map(|r| (EventTime::new(1, 0), r.as_slice()))
        .collect();
    let packed = packed_entries(&entries, TimeForm::FixExt8);
    let opt = MessageOption {
        chunk: Some(chunk),
        gzip: true,
        ..Default::default()
    };
    let mut frame = Vec::new();
    write_packed_forward(&mut frame, "app", &gzip(&packed), EntriesWrap::Bin, &opt);
    (frame, packed.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_chunk_holds_its_decompressed_bytes_of_the_budget_until_its_ack() {
    let budget = InflightBudget::new(16 << 20);
    let sink = Arc::new(NeverAcks::default());
    let hub = hub_with_budget(sink.clone(), &budget);
    let srv = start(hub, ForwardConfig::default()).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    let (frame, inflated) = gzip_chunk(2_000, "gz");
    assert!(frame.len() * 50 < inflated, "a compressible chunk");
    c.send_raw(&frame).await.unwrap();
    eventually("the chunk's events reach the sink", || sink.held() == 2_000).await;
    // The decompressed entries (the records are slices of them) are
    // counted, not just the few kilobytes that came over the wire.
    let held = budget.in_use();
    assert!(
        held >= inflated + frame.len() && held <= 2 * inflated + frame.len(),
        "held {held} B of the budget for {} B on the wire, {inflated} B inflated",
        frame.len()
    );
    sink.release_all();
    c.wait_ack("gz", WAIT).await.unwrap();
    eventually("the chunk's bytes are given back", || budget.in_use() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_chunk_that_inflates_past_the_free_budget_is_refused_unacked() {
    let budget = InflightBudget::new(1 << 20);
    let sink = Arc::new(NeverAcks::default());
    let hub = hub_with_budget(sink.clone(), &budget);
    let srv = start(hub.clone(), with_timeouts(500, 60_000)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let (frame, inflated) = gzip_chunk(2_000, "big");
    assert!(inflated > 1 << 20);
    s.write_all(&frame).await.unwrap();
    // Waited for budget up to the read timeout, then closed without an ack.
    let took = closed_by_server(&mut s).await;
    assert!(took >= Duration::from_millis(400), "closed after {took:?}");
    assert_eq!(sink.held(), 0, "nothing of the refused chunk was published");
    assert_eq!(hub.metrics().published.get(), 0);
    eventually("its bytes are given back", || budget.in_use() == 0).await;
    let errors = hub.metrics().render();
    assert!(
        errors.contains(r#"kind="inflate_budget""#),
        "counted: {}",
        errors
            .lines()
            .filter(|l| l.contains("listener_errors"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
