//! `tidegate serve` keeps its promise to a stock client while its Kafka
//! broker goes away mid-load: a broker (started here from Maven Central
//! jars) is killed and started again while Fluency sends PackedForward with
//! ack through the `tidegate` binary, and then every record Fluency was
//! acknowledged for is counted in Kafka. `/readyz` says "no broker
//! connection" meanwhile.
//!
//! The topic comes from `topic_template` and its allow-list, so the run also
//! checks that only the allowed topic is written.
//!
//! Needs `scripts/setup/kafka.sh` (JDK, Maven, the jars); fails otherwise.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tidegate_kafka::testing::{record_count, TestBroker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
#[path = "common/fluency.rs"]
mod fluency;

use common::{free_ports, KillOnDrop, Served};
use fluency::{fluency, fluency_done, missing_seqs, read_back, seq_counts};

/// The allowed topic Fluency's tag `logs.fluency` maps to.
const TOPIC: &str = "recovery_fluency";
/// Where anything not on the allow-list would go.
const DEFAULT_TOPIC: &str = "recovery-default";

/// `tidegate serve` with Forward and HTTP, routing `logs.>` to Kafka.
fn serve(forward: SocketAddr, http: SocketAddr, bootstrap: &str) -> Served {
    common::serve(&format!(
        "[http]\nlisten = \"{http}\"\n\
         [wire]\nenabled = false\n\
         [sockperf]\nenabled = false\n\
         [s2s]\nenabled = false\n\
         [forward]\nlisten = \"{forward}\"\nudp_heartbeat = false\n\
         [sinks.kafka]\nbrokers = \"{bootstrap}\"\n\
         topic = \"{DEFAULT_TOPIC}\"\n\
         topic_template = \"recovery_$TAG[-1]\"\n\
         topics = [\"{TOPIC}\"]\n\
         [[routes]]\ntopics = \"logs.>\"\nsink = \"kafka\"\n"
    ))
}

/// `GET path` on `addr`: the status code and the body.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// Polls `GET path` until `accept` likes the answer (at most `limit`).
async fn http_until(
    addr: SocketAddr,
    path: &str,
    limit: Duration,
    served: &mut Served,
    accept: impl Fn(u16, &str) -> bool,
) -> (u16, String) {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while Instant::now() < deadline {
        assert!(
            served.child.try_wait().unwrap().is_none(),
            "tidegate serve exited:\n{}",
            served.log()
        );
        if let Some((status, body)) = http_get(addr, path).await {
            if accept(status, &body) {
                return (status, body);
            }
            last = Some((status, body));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("GET {path}: never as expected within {limit:?}; last answer {last:?}");
}

/// The value of the metric line `name` (no labels) in a `/metrics` body.
fn metric(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_mid_load_loses_no_record_fluency_was_acknowledged_for() {
    let mut broker = tokio::task::spawn_blocking(TestBroker::start)
        .await
        .unwrap()
        .expect("start a dedicated broker (run scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    let [forward, http] = free_ports();
    let mut served = serve(forward, http, &bootstrap);
    http_until(
        http,
        "/readyz",
        Duration::from_secs(60),
        &mut served,
        |s, _| s == 200,
    )
    .await;

    // 16,000 records at 2,000/s: about 8 s of load, the outage in the middle.
    let n = 16_000;
    // Killed if an assertion fails before `fluency_done` waits for it.
    let mut sender = KillOnDrop::new(fluency(forward, "logs.fluency", n, 2_000, "restart"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        sender.try_wait().unwrap().is_none(),
        "fluency is still sending when the broker goes"
    );

    broker.stop();
    let (_, body) = http_until(
        http,
        "/readyz",
        Duration::from_secs(20),
        &mut served,
        |s, b| s == 503 && b.contains("no broker connection"),
    )
    .await;
    let (_, metrics) = http_until(
        http,
        "/metrics",
        Duration::from_secs(10),
        &mut served,
        |s, b| s == 200 && metric(b, "tidegate_kafka_in_flight").is_some_and(|v| v > 0.0),
    )
    .await;
    let waiting = metric(&metrics, "tidegate_kafka_in_flight").unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let broker = tokio::task::spawn_blocking(move || broker.restart().map(|()| broker))
        .await
        .unwrap()
        .expect("restart the broker");
    // Fluency's success means every chunk it sent was acknowledged.
    fluency_done(sender.into_inner(), Duration::from_secs(240)).await;
    http_until(
        http,
        "/readyz",
        Duration::from_secs(60),
        &mut served,
        |s, _| s == 200,
    )
    .await;

    let records = read_back(&bootstrap, TOPIC, n as usize, Duration::from_secs(60)).await;
    let counts = seq_counts(&records, "restart");
    let missing = missing_seqs(&counts, n);
    let duplicates = records.len() - counts.len();
    let (_, end_metrics) = http_until(
        http,
        "/metrics",
        Duration::from_secs(10),
        &mut served,
        |s, _| s == 200,
    )
    .await;
    let recreations =
        metric(&end_metrics, "tidegate_kafka_producer_recreations_total").unwrap_or_default();
    eprintln!(
        "{n} acknowledged, {} distinct in Kafka, {duplicates} duplicates, \
         {waiting} waiting during the outage, {recreations} producer recreations",
        counts.len()
    );
    assert!(
        missing.is_empty(),
        "{} of {n} acknowledged records missing from Kafka (first {:?}); \
         {duplicates} duplicates; {waiting} records were waiting during the outage; \
         /readyz said {body}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let (b, t) = (bootstrap.clone(), DEFAULT_TOPIC.to_owned());
    let stray = tokio::task::spawn_blocking(move || record_count(&b, &t))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(stray, 0, "only the allowed topic is written");
    drop(served);
    drop(broker);
}
